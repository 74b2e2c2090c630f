"""`physlm submit`: a plan's corpora, trainings and evaluations as Slurm batch jobs, chained with
dependencies.

- A corpus not yet generated: a prepare job (tokenizer, evaluation sets), then an array job whose
  task k generates the k-th contiguous range of its shards, then a manifest job (a plain
  `physlm gen`, which finds every part done and writes the manifest).
- Runs not yet at train.max_steps: one training array per generation (the runs, then the runs
  finetuning them, ...), task i the i-th run of a runs file, after the manifest jobs of its
  corpora and the previous generation's array; then an evaluation array over the same file whose
  task i starts when training task i is done (aftercorr).
What is done is decided from files (manifest, progress records, checkpoints, eval results), so
submitting again submits only what is missing, which is what failed.

The scripts are rendered from the templates in slurm/ into `<root>/slurm/` (logs in
`<root>/slurm/logs/`); each job submitted is recorded in `<root>/slurm/jobs.json`, and each job
records its own start and end in `<root>/slurm/records/`, which `launch.slurm_status` reads,
with squeue and sacct, for `physlm status`.
"""

import json
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

import configs
import slurm as templates
from corpus_gen.core.config import COMMAND_LINE, build_config, parse_overrides, read_yaml, require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import TOKENIZER, corpus_fingerprint, shard_count, shard_name
from corpus_gen.core.io import atomic_write
from corpus_gen.core.manifest import recorded_entries
from corpus_gen.core.registry import get_family
from launch.experiment import corpus_finished
from launch.local import PACKAGE_ROOT
from launch.plan import SLURM_DIR, CorpusJob, Plan, RunJob, settle_changed, write_plan
from launch.slurm_status import JOBS, LOGS, RECORDS, job_name, query, read_jobs, squeue
from launch.status import evaluated, trained
from trainer.errors import TrainError

LAUNCHERS = ("torchrun", "srun")
TIME_KEYS = ("time", "gen_time", "eval_time")
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}")  # MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS
_MEM = re.compile(r"\d+[KMGT]?")


@dataclass
class SlurmConfig:
    """What `physlm submit` asks Slurm for. Layers: these defaults < the sweep file's `slurm:`
    < `--slurm FILE` < `slurm.KEY=VALUE`. An optional key left unset is the cluster's default."""

    partition: str | None = None  # --partition of every job (gen jobs: unless cpu_partition)
    cpu_partition: str | None = None  # --partition of the corpus generation jobs (no GPU)
    account: str | None = None  # --account of every job
    qos: str | None = None  # --qos of every job
    constraint: str | None = None  # --constraint (node features, e.g. a100) of every job
    nodes: int = 1  # nodes per training run
    gpus_per_node: int = 1  # GPUs per training node, one process each (0: CPU, one process)
    # --cpus-per-task of train jobs: with torchrun one task per node runs all the node's
    # processes, so give it their CPUs together; with srun a task is one process. An eval job
    # (one GPU) gets the CPUs of one process
    cpus_per_task: int | None = None
    mem: str | None = None  # --mem (per node) of train jobs, e.g. 200G
    # --mem of each generation job and each evaluation job (unset: an eval job gets its GPU's
    # share of `mem`). Unset, a job gets the cluster's default, which is a whole node's memory
    # where the cluster sets no DefMemPerCPU
    gen_mem: str | None = None
    eval_mem: str | None = None
    time: str = "24:00:00"  # train jobs' time limit; a longer run requeues from its checkpoint
    gen_time: str = "04:00:00"  # each corpus generation job's time limit
    eval_time: str = "02:00:00"  # each evaluation job's time limit
    gen_tasks: int = 8  # array tasks per corpus, each generating a contiguous range of shards
    gen_cpus: int = 4  # CPUs of each generation job, and its `physlm gen --workers`
    max_concurrent: int = 0  # at most this many tasks of an array at once (%N); 0: no cap
    # USR1 this many seconds before a train job's time limit: checkpoint, requeue (0: none)
    signal_seconds: int = 300
    # torchrun: one srun task per node, spawning a process per GPU (c10d rendezvous on the
    # first node) | srun: one srun task per GPU, ranks from SLURM_PROCID
    launcher: str = "torchrun"
    # shell lines run before physlm in every job: `module load cuda/12.4`,
    # `source ~/venvs/physlm/bin/activate`
    setup: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # more #SBATCH lines of every job: --exclusive
    python: str = "python"  # the interpreter (after setup) that runs `-m launch.cli`

    def validate(self) -> None:
        for key in ("nodes", "gen_tasks", "gen_cpus"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        for key in ("gpus_per_node", "max_concurrent", "signal_seconds"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(self.cpus_per_task is None or self.cpus_per_task >= 1, "cpus_per_task",
                self.cpus_per_task, "must be >= 1 (or unset: the cluster's default)")
        require(self.launcher in LAUNCHERS, "launcher", self.launcher, "must be torchrun or srun")
        for key in ("time", "gen_time", "eval_time"):
            require(bool(_TIME.fullmatch(getattr(self, key))), key, getattr(self, key),
                    "must be a Slurm time: MINUTES, HH:MM:SS or D-HH:MM:SS")
        for key in ("mem", "gen_mem", "eval_mem"):
            value = getattr(self, key)
            require(value is None or bool(_MEM.fullmatch(value)), key, value,
                    "must be a Slurm size: a whole number of megabytes, or with K, M, G or T")
        # USR1 at or before the start would stop (and requeue) every job as it begins
        require(self.signal_seconds < slurm_seconds(self.time), "signal_seconds",
                self.signal_seconds, f"must be less than the time limit (time={self.time})")
        # an #SBATCH option's value is one word
        for key in ("partition", "cpu_partition", "account", "qos", "constraint", "mem",
                    "gen_mem", "eval_mem"):
            value = getattr(self, key)
            require(value is None or (value != "" and len(value.split()) == 1), key, value,
                    "must be one word (or unset)")
        for key in ("setup", "extra"):
            for i, line in enumerate(getattr(self, key)):
                require("\n" not in line, f"{key}[{i}]", line, "must be one line")
        require(self.python.strip() != "", "python", self.python, "must name an interpreter")


def slurm_seconds(text: str) -> int:
    """A Slurm time limit in seconds: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


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


@dataclass
class Submission:
    """One sbatch job: its script, the jobs it waits for and, once submitted, its id."""

    kind: str  # gen-prepare | gen-array | gen-manifest | train | eval
    name: str  # the corpus; for train and eval the plan (`-gN`: its N-th finetuning generation)
    script: Path
    after: list["Submission"]
    dependency_type: str = "afterok"  # aftercorr: task i waits for task i of each job it names
    array: list[int] | None = None  # the array's task indices; None: not an array
    runs: list[str] = field(default_factory=list)  # train, eval: task array[j] trains runs[j]
    shards: list[str] = field(default_factory=list)  # gen-array: task array[j] makes shards[j]
    corpus: str | None = None  # gen jobs: the corpus's name (its directory's)
    job_id: str | None = None  # set when submitted (never on --dry-run)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    def dependency(self) -> str | None:
        """`afterok:ID:ID`; before submission the ids are placeholders, `<gen-manifest NAME>`."""
        if not self.after:
            return None
        return ":".join([self.dependency_type,
                         *(job.job_id or f"<{job.label}>" for job in self.after)])


@dataclass
class _Context:
    """What every script is rendered with."""

    plan: Plan
    slurm: SlurmConfig
    directory: Path  # <root>/slurm, absolute
    workdir: Path  # where physlm submit runs, where each job runs
    log: Callable[[str], None]


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
    jobs = _jobs(_Context(plan, slurm, directory, Path.cwd(), log))
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


def _jobs(ctx: _Context) -> list[Submission]:
    """Every job still to do, in an order where each comes after those it waits for."""
    jobs: list[Submission] = []
    manifests: dict[str, Submission] = {}  # corpus name -> the job that finishes it
    for corpus in ctx.plan.corpora:  # a corpus comes after those whose tokenizer it reuses
        waits = [manifests[name] for name in corpus.after if name in manifests]
        made = _corpus_jobs(ctx, corpus, waits)
        if made:
            manifests[corpus.name] = made[-1]
        jobs += made
    return jobs + _run_jobs(ctx, manifests)


def _corpus_jobs(ctx: _Context, corpus: CorpusJob, waits: list[Submission]
                 ) -> list[Submission]:
    """prepare -> shard array -> manifest, less what is recorded done: a finished prepare, the
    array tasks whose shards all have progress records (read, not checksummed: the manifest
    job's plain `physlm gen` verifies and regenerates)."""
    if corpus_finished(corpus.config, corpus.out):
        ctx.log(f"slurm  | corpus {corpus.name}: generated already")
        return []
    fp = corpus_fingerprint(corpus.config)
    recorded = {name for name, entry in recorded_entries(corpus.out, lambda _: None).items()
                if entry.get("fingerprint") == fp}
    eval_sets = get_family(corpus.config.family).eval_sets(corpus.config)
    prepared = [TOKENIZER, *(f"eval/{name}.jsonl" for name in eval_sets)]
    ranges = shard_ranges(shard_count(corpus.config), ctx.slurm.gen_tasks)
    missing = [k for k, (start, stop) in enumerate(ranges)
               if any(shard_name(i) not in recorded for i in range(start, stop))]
    jobs: list[Submission] = []
    if not all(name in recorded for name in prepared):
        jobs.append(_gen_job(ctx, corpus, "gen-prepare", waits))
    if missing:
        jobs.append(_gen_job(ctx, corpus, "gen-array", jobs[-1:] or waits, ranges, missing))
    manifest = _gen_job(ctx, corpus, "gen-manifest", jobs[-1:] or waits)
    if missing:  # after the array however its tasks ended: it redoes what a failed task left
        manifest.dependency_type = "afterany"
    jobs.append(manifest)
    return jobs


def shard_ranges(shards: int, tasks: int) -> list[tuple[int, int]]:
    """`shards` split into at most `tasks` contiguous (start, stop) ranges of near-equal size."""
    tasks = min(tasks, shards)
    return [(k * shards // tasks, (k + 1) * shards // tasks) for k in range(tasks)]


_GEN_PURPOSE = {
    "gen-prepare": "Prepares the corpus: trains its tokenizer (or copies the one it reuses) and\n"
                   "# writes its evaluation sets. Its shard array runs after it.",
    "gen-manifest": "Finishes the corpus after its shard array: a plain `physlm gen` finds every "
                    "part\n# written, regenerates whatever a failed task left missing, and "
                    "writes manifest.json.",
}


def _gen_job(ctx: _Context, corpus: CorpusJob, kind: str, after: list[Submission],
             ranges: list[tuple[int, int]] | None = None,
             tasks: list[int] | None = None) -> Submission:
    slurm = ctx.slurm
    own = ["--nodes=1", "--ntasks=1", f"--cpus-per-task={slurm.gen_cpus}",
           *([f"--mem={slurm.gen_mem}"] if slurm.gen_mem else []), f"--time={slurm.gen_time}"]
    values = dict(_common(ctx), corpus=corpus.name, workers=str(slurm.gen_cpus),
                  config_file=_quoted(corpus.config_file), out=_quoted(corpus.out),
                  sbatch=_sbatch_lines(ctx, kind, corpus.name, own, tasks))
    if kind == "gen-array":
        text = templates.render("gen_array.sh", **values,
                                ranges=" ".join(f"{start}-{stop}" for start, stop in ranges))
        shards = [f"{ranges[k][0]}-{ranges[k][1]}" for k in tasks]
    else:
        part = "--part prepare " if kind == "gen-prepare" else ""
        text = templates.render("gen.sh", **values, kind=kind, purpose=_GEN_PURPOSE[kind],
                                part=part)
        shards = []
    return Submission(kind, corpus.name, _write(ctx, kind, corpus.name, text), after,
                      array=tasks, shards=shards, corpus=corpus.name)


def _run_jobs(ctx: _Context, manifests: dict[str, Submission]) -> list[Submission]:
    """A training array per generation of the runs to train (a run finetuning another run to
    train is one generation after it: an array cannot wait for some of its own tasks), each
    with its evaluation array; one more evaluation array for runs trained but not evaluated."""
    plan = ctx.plan
    todo, unevaluated = [], []
    for run in plan.runs:
        if not trained(run.run_dir, run.experiment.train.max_steps):
            todo.append(run)
        elif not evaluated(run.run_dir, run.experiment.train.max_steps,
                           list(run.experiment.eval.tasks)):
            ctx.log(f"slurm  | run {run.name}: trained already")
            unevaluated.append(run)
        else:
            ctx.log(f"slurm  | run {run.name}: done already")
    generation: dict[str, int] = {}
    for run in todo:  # a parent comes before its children; one not trained now counts as -1
        generation[run.name] = generation.get(run.parent, -1) + 1
    jobs: list[Submission] = []
    parents: list[Submission] = []  # the previous generation's training array
    for g in range(max(generation.values(), default=-1) + 1):
        runs = [run for run in todo if generation[run.name] == g]
        corpora = {run.corpus.name: manifests[run.corpus.name] for run in runs
                   if run.corpus.name in manifests}
        name = plan.name if g == 0 else f"{plan.name}-g{g}"
        runs_file = _runs_file(ctx, "train", name, runs)
        train = _train_job(ctx, name, runs, runs_file, [*corpora.values(), *parents])
        jobs += [train, *_eval_jobs(ctx, name, runs, runs_file, train)]
        parents = [train]
    if unevaluated:
        name = f"{plan.name}-trained"
        jobs += _eval_jobs(ctx, name, unevaluated, _runs_file(ctx, "eval", name, unevaluated),
                           None)
    return jobs


def _train_job(ctx: _Context, name: str, runs: list[RunJob], runs_file: Path,
               after: list[Submission]) -> Submission:
    for run in runs:
        if run.experiment.train.resume not in ("auto", "reschedule"):
            raise TrainError(f"run {run.name}: train.resume={run.experiment.train.resume}, but "
                             "a requeued job must continue its checkpoint: physlm submit needs "
                             "train.resume=auto or reschedule (delete the run directory to "
                             "start it over)")
    slurm = ctx.slurm
    processes = max(slurm.gpus_per_node, 1)
    tasks = 1 if slurm.launcher == "torchrun" else processes
    own = [f"--nodes={slurm.nodes}", f"--ntasks-per-node={tasks}", *_gpus(slurm.gpus_per_node),
           *([f"--cpus-per-task={slurm.cpus_per_task}"] if slurm.cpus_per_task else []),
           *([f"--mem={slurm.mem}"] if slurm.mem else []), f"--time={slurm.time}", "--requeue",
           "--open-mode=append"]
    if slurm.signal_seconds:
        own.append(f"--signal=B:USR1@{slurm.signal_seconds}")
    indices = list(range(len(runs)))
    text = templates.render(
        "train.sh", **_common(ctx), title=_title(runs), runs_file=_quoted(runs_file),
        nodes=str(slurm.nodes), launcher=slurm.launcher, launch=_launch(slurm),
        sbatch=_sbatch_lines(ctx, "train", name, own, indices))
    return Submission("train", name, _write(ctx, "train", name, text), after, array=indices,
                      runs=[run.name for run in runs])


def _launch(slurm: SlurmConfig) -> str:
    """The command line that starts one training process per GPU (per node: `nodes` of them)."""
    processes = max(slurm.gpus_per_node, 1)
    if slurm.launcher == "srun":
        # a rank that fails alone ends the others, which would wait for it forever
        return f"srun --ntasks-per-node={processes} --kill-on-bad-exit=1 {slurm.python}"
    return " \\\n    ".join([
        f"srun --ntasks-per-node=1 {slurm.python} -m torch.distributed.run",  # torchrun
        f'--nnodes="$SLURM_NNODES" --nproc_per_node={processes}',
        '--rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"',
    ])


def _eval_jobs(ctx: _Context, name: str, runs: list[RunJob], runs_file: Path,
               train: Submission | None) -> list[Submission]:
    """The evaluation array of the runs with eval.tasks, task i the run on line i of
    `runs_file`; after `train` (the training array of that file), each task after the
    training task of the same index."""
    indices = [i for i, run in enumerate(runs) if run.experiment.eval.tasks]
    if not indices:
        return []
    slurm = ctx.slurm
    # one GPU, the CPUs of one training process and its memory
    processes = max(slurm.gpus_per_node, 1) if slurm.launcher == "torchrun" else 1
    cpus = [f"--cpus-per-task={max(slurm.cpus_per_task // processes, 1)}"] \
        if slurm.cpus_per_task else []
    mem = _eval_mem(slurm)
    own = ["--nodes=1", "--ntasks=1", *_gpus(min(slurm.gpus_per_node, 1)), *cpus,
           *([f"--mem={mem}"] if mem else []), f"--time={slurm.eval_time}"]
    text = templates.render(
        "eval.sh", **_common(ctx), title=_title([runs[i] for i in indices]),
        runs_file=_quoted(runs_file), sbatch=_sbatch_lines(ctx, "eval", name, own, indices))
    return [Submission("eval", name, _write(ctx, "eval", name, text), [train] if train else [],
                       dependency_type="aftercorr", array=indices,
                       runs=[runs[i].name for i in indices])]


def _eval_mem(slurm: SlurmConfig) -> str | None:
    """An eval job's --mem: eval_mem, else its GPU's share of a training node's mem (0, all of
    the node's memory, stays the cluster's default)."""
    if slurm.eval_mem or not slurm.mem or megabytes(slurm.mem) == 0:
        return slurm.eval_mem
    return f"{max(megabytes(slurm.mem) // max(slurm.gpus_per_node, 1), 1)}M"


def megabytes(size: str) -> int:
    """A Slurm size (`200G`, `512`: megabytes) in megabytes."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}
    unit = size[-1] if size[-1] in scale else "M"
    return int(int(size.rstrip("KMGT")) * scale[unit])


def _gpus(count: int) -> list[str]:
    return [f"--gpus-per-node={count}"] if count else []


def _title(runs: list[RunJob]) -> str:
    names = ", ".join(run.name for run in runs[:3])
    return f"{len(runs)} run(s): {names}" + (", ..." if len(runs) > 3 else "")


def _runs_file(ctx: _Context, kind: str, name: str, runs: list[RunJob]) -> Path:
    """The file a train or eval script reads its task's run from: line i is task i's run
    directory and corpus directory, separated by a tab."""
    path = ctx.directory / f"{kind}-{name}.tsv"
    atomic_write(path, "".join(f"{run.run_dir.resolve()}\t{run.corpus.out}\n"
                               for run in runs).encode())
    return path


def _common(ctx: _Context) -> dict[str, str]:
    """The placeholders every template has."""
    return {"plan": ctx.plan.name, "workdir": _quoted(ctx.workdir),
            "records": _quoted(ctx.directory / RECORDS),
            "pythonpath": _pythonpath(),
            "setup": "\n".join(ctx.slurm.setup), "python": ctx.slurm.python}


def _pythonpath() -> str:
    """Where physlm runs from a source checkout (its pyproject.toml beside the packages), the
    jobs import that same checkout; an installed physlm is the setup lines' business."""
    if not (Path(PACKAGE_ROOT) / "pyproject.toml").is_file():
        return "# physlm comes from the environment the setup lines activate"
    return ("# the physlm checkout that submitted this job, installed on the nodes or not\n"
            f"export PYTHONPATH={shlex.quote(PACKAGE_ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}")


def _sbatch_lines(ctx: _Context, kind: str, name: str, own: list[str],
                  array: list[int] | None) -> str:
    """The script's #SBATCH block: name and log, the cluster keys, the job's own resources,
    the array, then the config's extra lines."""
    slurm = ctx.slurm
    log = "%x-%A_%a.out" if array is not None else "%x-%j.out"
    options = [f"--job-name={job_name(kind, name)}", f"--output={ctx.directory / LOGS / log}"]
    cluster = {"partition": slurm.partition, "account": slurm.account, "qos": slurm.qos,
               "constraint": slurm.constraint}
    if kind.startswith("gen-") and slurm.cpu_partition:  # CPU work, on CPU nodes
        cluster.update(partition=slurm.cpu_partition, constraint=None)
    options += [f"--{key}={value}" for key, value in cluster.items() if value]
    options += own
    if array is not None:
        options.append(f"--array={array_spec(array, slurm.max_concurrent)}")
    lines = [f"#SBATCH {option}" for option in options]
    lines += [line if line.startswith("#SBATCH") else f"#SBATCH {line}" for line in slurm.extra]
    return "\n".join(lines)


def array_spec(indices: list[int], cap: int) -> str:
    """sbatch's --array value: runs of consecutive indices as ranges, `0-3,7,9-10%4`."""
    parts, start = [], 0
    for i in range(1, len(indices) + 1):
        if i == len(indices) or indices[i] != indices[i - 1] + 1:
            first, last = indices[start], indices[i - 1]
            parts.append(f"{first}-{last}" if last > first else str(first))
            start = i
    return ",".join(parts) + (f"%{cap}" if cap else "")


def _write(ctx: _Context, kind: str, name: str, text: str) -> Path:
    path = ctx.directory / f"{kind}-{name}.sh"
    atomic_write(path, text.encode())
    path.chmod(0o755)
    return path


def _quoted(path: Path) -> str:
    return shlex.quote(str(path.resolve()))


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
