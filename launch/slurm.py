"""`physlm submit`: a plan's corpora, trainings and evaluations as Slurm batch jobs, chained with
dependencies.

The settings come in layers (`load_slurm_config`); the jobs still to do and their scripts from
`launch.slurm_scripts`, written into `<root>/slurm/` (logs in `<root>/slurm/logs/`). Submitting
again submits only what is missing, which is what failed. Each job submitted is recorded in
`<root>/slurm/jobs.json`, and each job records its own start and end in `<root>/slurm/records/`,
which `launch.slurm_status` reads, with squeue and sacct, for `physlm status`.
"""

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

import configs
from corpus_gen.core.config import COMMAND_LINE, build_config, parse_overrides, read_yaml
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.io import atomic_write
from launch.plan import SLURM_DIR, Plan, settle_changed, write_plan
from launch.slurm_config import TIME_KEYS, SlurmConfig
from launch.slurm_scripts import Submission, write_job_scripts
from launch.slurm_status import JOBS, LOGS, RECORDS, query, read_jobs, squeue
from trainer.errors import TrainError


def load_slurm_config(plan: Plan, slurm_file: str | None, overrides: list[str]) -> SlurmConfig:
    """The plan's SlurmConfig: the defaults, the sweep file's `slurm:`, `--slurm FILE` (a path
    or the name of a configs/slurm file), then the overrides (`slurm.KEY=VALUE` or
    `KEY=VALUE`); errors name the key, the value and where it came from."""
    if not isinstance(plan.slurm, dict):
        raise ConfigError("slurm", plan.slurm, "must be a mapping of slurm keys", plan.source)
    written = _as_written(Path(plan.source)).get("slurm") if plan.slurm else None
    layers = [(_times_as_written(OmegaConf.create(plan.slurm), written), plan.source)]
    if slurm_file is not None:
        path = configs.find("slurm", slurm_file)
        if path is None:
            known = ", ".join(configs.names("slurm"))
            raise ConfigError("--slurm", slurm_file, "no such file, and no shipped slurm config "
                              f"of that name (known: {known})", COMMAND_LINE)
        layers.append((_times_as_written(read_yaml(path), _as_written(path)), str(path)))
    # `slurm.KEY=VALUE` as typed, or `KEY=VALUE` as the command line passes it on
    items = [item.removeprefix("slurm.") for item in overrides]
    typed = dict(item.split("=", 1) for item in items if "=" in item)
    layers.append((_times_as_written(parse_overrides(items), typed), COMMAND_LINE))
    return build_config(SlurmConfig, layers, prefix="slurm.")


def _as_written(path: Path) -> dict:
    """The YAML file with every scalar as the text it was written as."""
    try:
        return yaml.load(path.read_text(), Loader=yaml.BaseLoader) or {}
    except (OSError, yaml.YAMLError):
        return {}  # read_yaml has already said what is wrong with it, or will


def _times_as_written(layer: DictConfig, written: object) -> DictConfig:
    """Time limits as the text written: YAML 1.1 reads an unquoted 48:00:00 as the number
    172800 (base 60), which Slurm would take for minutes."""
    if isinstance(written, dict):
        for key in TIME_KEYS:
            if key in layer and isinstance(written.get(key), str):
                layer[key] = written[key].strip().strip("'\"")
    return layer


def submit(plan: Plan, slurm: SlurmConfig, dry_run: bool,
           log: Callable[[str], None] = print, redo_changed: bool = False) -> list[Submission]:
    """Write the plan's files and the scripts of what is not done yet, and submit them in
    dependency order (on `dry_run`, print the sbatch commands instead). Each job submitted is
    recorded in `<root>/slurm/jobs.json` at once, so a refusal leaves the earlier ones listed.
    A run directory trained with other settings is refused, or with `redo_changed` moved aside
    (`settle_changed`), once none of the plan's jobs is queued any more."""
    sbatch = shutil.which("sbatch")
    if not dry_run and sbatch is None:
        raise TrainError("sbatch not found on PATH; physlm submit --dry-run writes the scripts "
                         "without it")
    directory = (plan.root / SLURM_DIR).resolve()
    if not dry_run:
        _refuse_queued(directory / JOBS)
        _refuse_cpus_no_node_has(slurm)
    settle_changed(plan, redo_changed, log, dry_run)  # before the plan's files are written again
    write_plan(plan)
    for folder in (LOGS, RECORDS):  # sbatch does not create the logs' folder
        (directory / folder).mkdir(parents=True, exist_ok=True)
    jobs = write_job_scripts(plan, slurm, directory, log)
    if not jobs:
        log("slurm  | nothing to submit: every corpus, training and evaluation is done")
    for job in jobs:
        dependency = job.dependency()
        # a job whose dependency failed is cancelled, not left pending forever (which would
        # also block the resubmission, see _refuse_queued)
        options = ["--parsable", *([f"--dependency={dependency}", "--kill-on-invalid-dep=yes"]
                                   if dependency else [])]
        if dry_run:
            log(" ".join(["sbatch", *options, shlex.quote(str(job.script))]))
            continue
        job.job_id = _sbatch([sbatch, *options, str(job.script)], job, jobs, directory / JOBS,
                             slurm)
        _record(directory / JOBS, job)
        log(f"slurm  | job {job.job_id}: {job.label}"
            + (f" (after {dependency})" if dependency else ""))
    return jobs


def _refuse_cpus_no_node_has(slurm: SlurmConfig) -> None:
    """Refuse, before submitting anything, a job's CPUs beyond the largest node of its partition
    as sinfo tells them (where it answers; sbatch would refuse that job, after the ones before)."""
    asked = [("gen_cpus", slurm.gen_cpus, slurm.cpu_partition or slurm.partition),
             ("cpus_per_task", slurm.cpus_per_task, slurm.partition)]
    for key, cpus, partition in asked:
        if not cpus:
            continue
        out = query(["sinfo", "--noheader", "--Node", "--format=%c",
                     *([f"--partition={partition}"] if partition else [])])
        counts = [int(word) for word in (out or "").split() if word.isdigit()]
        if counts and cpus > max(counts):
            where = f"partition {partition}" if partition else "the cluster"
            raise ConfigError(f"slurm.{key}", cpus, f"more than the {max(counts)} CPUs of the "
                              f"largest node of {where} (sinfo); sbatch would refuse the job")


# the keys a job's resources come from, by what sbatch says no node has: CPUs, memory, other
_RESOURCE_KEYS = {"gen": (["gen_cpus"], ["gen_mem"], []),
                  "train": (["cpus_per_task"], ["mem"], ["nodes", "gpus_per_node"]),
                  "eval": (["cpus_per_task"], ["eval_mem", "mem"], ["gpus_per_node"])}


def _no_node_has(failure: str, job: Submission, slurm: SlurmConfig) -> str:
    """sbatch's refusal of a job no node can hold, as the slurm keys that ask too much."""
    if "Requested node configuration is not available" not in failure:
        return failure
    cpus, mem, other = _RESOURCE_KEYS[job.kind.split("-")[0]]
    keys = cpus if "CPU count" in failure else mem if "Memory specification" in failure \
        else cpus + mem + other
    named = ", ".join(f"slurm.{key}={getattr(slurm, key)}" for key in keys)
    return (f"no node of its partition has what it asks for: {named} (sbatch: Requested node "
            "configuration is not available)")


def _sbatch(command: list[str], job: Submission, jobs: list[Submission], record: Path,
            slurm: SlurmConfig) -> str:
    """Submit one script; its job id (sbatch --parsable prints `ID` or `ID;CLUSTER`)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        failure = None if done.returncode == 0 else _no_node_has(" ".join(
            (done.stderr or done.stdout).split()) or f"exit code {done.returncode}", job, slurm)
    except OSError as exc:
        failure = str(exc)
    job_id = "" if failure else done.stdout.strip().split(";")[0]
    if not failure and not job_id.isdigit():
        failure = f"printed {done.stdout.strip()!r}, not a job id"
    if not failure:
        return job_id
    earlier = [j for j in jobs if j.job_id]
    if not earlier:
        raise TrainError(f"sbatch refused {job.label}: {failure}; nothing was submitted")
    listed = ", ".join(f"{j.job_id} ({j.label})" for j in earlier)
    raise TrainError(f"sbatch refused {job.label}: {failure}; submitted before it (recorded in "
                     f"{record}): {listed}; cancel them with `scancel "
                     f"{' '.join(j.job_id for j in earlier)}` or let them run, then submit again")


def _record(path: Path, job: Submission) -> None:
    records = read_jobs(path)
    records.append({
        "id": job.job_id, "kind": job.kind, "name": job.name, "script": str(job.script),
        "dependency": job.dependency(), "after": [j.job_id for j in job.after],
        "array": job.array, "runs": job.runs, "shards": job.shards, "corpus": job.corpus,
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "records": True,  # its script records its start and end (slurm_status reads them)
    })
    atomic_write(path, (json.dumps({"jobs": records}, indent=1) + "\n").encode())


def _refuse_queued(path: Path) -> None:
    """Refuse to submit while jobs recorded for this plan are still queued or running: their
    runs would be trained twice, in one run directory."""
    queued = {key.split("_")[0] for key, (_, reason) in (squeue() or {}).items()
              if reason != "DependencyNeverSatisfied"}  # never to run: no obstacle
    waiting = [record for record in read_jobs(path) if record["id"] in queued]
    if waiting:
        ids = " ".join(dict.fromkeys(record["id"] for record in waiting))
        raise TrainError("jobs of this plan are still queued or running: " + ", ".join(
            f"{r['id']} ({r['kind']} {r['name']})" for r in waiting) + "; wait for them, or "
            f"cancel them (scancel {ids}) and submit again")
