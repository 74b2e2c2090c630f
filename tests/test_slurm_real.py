"""`physlm submit` and `physlm status` on a real one-node Slurm cluster (tests/slurm_cluster.py:
munged, slurmctld and slurmd started for this module, no accounting): a tiny experiment through
gen-prepare -> gen-array -> gen-manifest -> train -> eval, stopped by USR1 halfway through its
training and requeued; a two-run sweep over it, whose seed-0 run is the same run uninterrupted;
and an experiment whose corpus cannot be written, whose dependants Slurm cancels.

Skipped, with the reason, where no cluster can be had: not root, the packages (slurmctld slurmd
slurm-client munge) not installed, or daemons that do not start. `.ci/run` installs them.
"""

import contextlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from launch.cli import main
from launch.plan import load_plan
from launch.slurm_status import JOBS, task_keys
from tests.slurm_cluster import COMMANDS, ClusterUnavailable, LocalSlurm, start, stop, unavailable
from trainer.checkpoint import load_weights

STEPS = 300  # long enough that USR1, sent at step 3, stops the training halfway
EXPERIMENT = f"""\
name: tiny
corpus: {{base: bios_s_multi5_permute, people: 30, records_per_shard: 30,
         tokenizer: {{vocab_size: 600, sample_records: 200}}}}
model: {{n_layer: 2, n_head: 2, d_model: 32}}
train: {{max_steps: {STEPS}, ckpt_every: 1000, ctx: 64, micro_batch: 4, lr: 0.003,
        warmup_steps: 1, log_every: 1, wandb: {{mode: disabled}}}}
eval: {{tasks: [qa], qa: {{max_people: 3}}}}
"""
# the experiment's training runs under torchrun (the default launcher), the sweep's under srun
SWEEP = "name: sw\nexperiment: exp.yaml\nseeds: [0, 1]\nslurm: {launcher: srun}\n"
# the node's 2 CPUs: one per job; bounded time limits, so that nothing outlives the test
CLUSTER = f"""\
gpus_per_node: 0
gen_tasks: 2
gen_cpus: 1
time: "00:10:00"
gen_time: "00:05:00"
eval_time: "00:05:00"
signal_seconds: 60
python: {sys.executable}
"""
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "BOOT_FAIL", "DEADLINE"}
SECONDS = 300  # for each stage awaited, on a busy 2-core machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalSlurm:
    try:
        cluster = start(tmp_path_factory.mktemp("slurm"))
    except ClusterUnavailable as exc:
        pytest.skip(f"no local Slurm cluster: {exc}")
    yield cluster
    stop(cluster)


@dataclass
class Lab:
    """What was submitted, once everything submitted has ended."""

    cluster: LocalSlurm
    work: Path  # where physlm submit ran: corpora/, runs/
    states: dict[str, str]  # task key -> Slurm state
    requeue_status: str  # `physlm status` of the experiment while its requeued job waited

    def jobs(self, root: str) -> list[dict]:
        return json.loads((self.work / "runs" / root / "slurm" / JOBS).read_text())["jobs"]

    def status(self, root: str) -> str:
        """`physlm status` (exit 1 where a run failed)."""
        return physlm(self.cluster, self.work, "status", f"runs/{root}", codes=(0, 1))


def physlm(cluster: LocalSlurm, work: Path, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    """physlm's output, run in this process (each process would import torch again) as on the
    cluster's login node: SLURM_CONF set (the jobs inherit the environment of sbatch), in the
    folder of corpora/ and runs/."""
    saved, out, errors = dict(os.environ), io.StringIO(), io.StringIO()
    os.environ.update(SLURM_CONF=str(cluster.conf), OMP_NUM_THREADS="1")
    try:
        with contextlib.chdir(work), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(errors):
            code = main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code in codes, f"physlm {' '.join(args)}: exit {code}: {errors.getvalue()}"
    return out.getvalue()


def queue(cluster: LocalSlurm) -> dict[str, tuple[str, str]]:
    """Task key -> (state, reason) of every job the cluster remembers, ended ones too."""
    out = cluster.run("squeue", "--states=all", "--noheader", "--array", "--format=%i|%T|%r")
    states = {}
    for line in out.splitlines():
        job, state, reason = line.split("|")
        for key in task_keys(job.strip()):
            states[key] = (state, reason)
    return states


def wait_for(cluster: LocalSlurm, what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SECONDS
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {SECONDS} s; queue: {queue(cluster)}\n"
                        f"{cluster.logs()}")
        time.sleep(0.2)


def tasks(job: dict) -> list[str]:
    """The task keys of a job recorded in jobs.json: `12`, or `12_0`, `12_1`, ... of an array."""
    return [job["id"]] if job["array"] is None else [f"{job['id']}_{i}" for i in job["array"]]


def task_of(jobs: list[dict], kind: str) -> str:
    """The (first) task key of the plan's job of `kind`."""
    return tasks(next(job for job in jobs if job["kind"] == kind))[0]


@pytest.fixture(scope="module")
def lab(cluster, tmp_path_factory) -> Lab:
    """Submit the three plans and wait for all their jobs to end: the broken corpus first (it
    fails while the others run), then the experiment; the sweep once the experiment's corpus is
    made (it shares it); USR1 to the experiment's training at step 3."""
    work = tmp_path_factory.mktemp("lab")
    (work / "exp.yaml").write_text(EXPERIMENT)
    (work / "sweep.yaml").write_text(SWEEP)
    (work / "cluster.yaml").write_text(CLUSTER)
    # a corpus whose second shard cannot be written: a directory stands where it goes
    (work / "broken.yaml").write_text(EXPERIMENT.replace("name: tiny", "name: broken")
                                      .replace("people: 30", "people: 31"))
    with contextlib.chdir(work):  # corpora/ is where physlm submit runs
        broken = load_plan(Path("broken.yaml"), []).corpora[0].out.resolve()
    (broken / ".progress").mkdir(parents=True)
    (broken / "train" / "shard-000001.tar").mkdir(parents=True)

    def submit(name: str) -> None:
        physlm(cluster, work, "submit", name, "--slurm", "cluster.yaml")

    def state(key: str) -> tuple[str, str]:
        return queue(cluster).get(key, ("", ""))

    submit("broken.yaml")
    submit("exp.yaml")
    lab = Lab(cluster, work, {}, "")
    manifest, train = task_of(lab.jobs("tiny"), "gen-manifest"), task_of(lab.jobs("tiny"), "train")
    wait_for(cluster, f"gen-manifest job {manifest} ended", lambda: state(manifest)[0] in ENDED)
    submit("sweep.yaml")

    metrics = work / "runs" / "tiny" / "metrics.jsonl"
    wait_for(cluster, "the experiment's training at step 3", lambda: state(train)[0] in ENDED
             or metrics.is_file() and len(metrics.read_text().splitlines()) >= 3)
    assert state(train)[0] not in ENDED, f"train job {train} ended before step 3: {state(train)}"
    # what --signal=B:USR1@N does before the time limit: USR1 to the batch shell only
    cluster.run("scancel", "--batch", "--signal=USR1", train.split("_")[0])
    # a requeued job waits (reason BeginTime) two minutes before it may start again
    wait_for(cluster, f"train job {train} requeued",
             lambda: state(train)[1] == "BeginTime" or state(train)[0] in ENDED)
    assert state(train)[1] == "BeginTime", f"train job {train} not requeued: {state(train)}"
    lab.requeue_status = lab.status("tiny")
    # slurmd refuses a job started in the second its previous run's credential was revoked
    # ("Job credential revoked"; times in whole seconds), which Slurm's own two-minute wait
    # never meets: start it again a second later
    time.sleep(1.5)
    cluster.run("scontrol", "update", f"jobid={train}", "StartTime=now")

    keys = [key for root in ("broken", "tiny", "sw") for job in lab.jobs(root)
            for key in tasks(job)]
    wait_for(cluster, "every job ended", lambda: all(state(key)[0] in ENDED for key in keys))
    lab.states = {key: state for key, (state, _) in queue(cluster).items()}
    return lab


def rows(status: str) -> dict[str, list[str]]:
    """`physlm status`'s table: the last part of each run's name -> its cells after the name
    (state, step, loss, detail)."""
    cells = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in status.splitlines() if line.startswith("| ")]
    return {row[0].rsplit("/", 1)[-1]: row[1:] for row in cells[1:]}


def test_an_experiment_runs_every_stage_on_a_real_cluster(lab):
    jobs = lab.jobs("tiny")
    assert [job["kind"] for job in jobs] == ["gen-prepare", "gen-array", "gen-manifest",
                                            "train", "eval"]
    prepare, array, manifest, train, evaluation = (job["id"] for job in jobs)
    assert {key: lab.states[key] for key in [prepare, f"{array}_0", f"{array}_1", manifest,
                                             f"{train}_0", f"{evaluation}_0"]} == {
        prepare: "COMPLETED", f"{array}_0": "COMPLETED", f"{array}_1": "COMPLETED",
        manifest: "COMPLETED", f"{train}_0": "COMPLETED", f"{evaluation}_0": "COMPLETED"}
    assert [path.name for path in (lab.work / "corpora").glob("*/manifest.json")] == [
        "manifest.json"]  # the experiment's; the broken corpus has none
    assert json.loads((lab.work / "runs/tiny/eval/qa.json").read_text())["step"] == STEPS
    assert rows(lab.status("tiny"))["tiny"][:2] == ["done", f"{STEPS}/{STEPS}"]


def test_a_two_run_sweep_trains_and_evaluates_each_run_as_an_array_task(lab):
    jobs = lab.jobs("sw")
    # the corpus is the experiment's, made already: a training array of 2, then evaluation
    assert [(job["kind"], job["array"], job["runs"]) for job in jobs] == [
        ("train", [0, 1], ["seed-0", "seed-1"]), ("eval", [0, 1], ["seed-0", "seed-1"])]
    assert jobs[1]["dependency"] == f"aftercorr:{jobs[0]['id']}"
    assert [lab.states[f"{job['id']}_{i}"] for job in jobs for i in (0, 1)] == ["COMPLETED"] * 4
    for run in ("seed-0", "seed-1"):
        assert json.loads((lab.work / f"runs/sw/{run}/eval/qa.json").read_text())["step"] == STEPS
    status = lab.status("sw")
    assert {run: cells[:2] for run, cells in rows(status).items()} == {
        "seed-0": ["done", f"{STEPS}/{STEPS}"], "seed-1": ["done", f"{STEPS}/{STEPS}"]}
    assert status.rstrip().endswith("2 done")


def test_usr1_requeues_the_training_which_resumes_bit_identically(lab):
    train = task_of(lab.jobs("tiny"), "train")
    log = next((lab.work / "runs/tiny/slurm/logs").glob(f"*-{train}.out")).read_text()
    assert re.search(r"stopped before the time limit with a checkpoint; requeueing job \d+",
                     log), log
    stopped = int(re.search(r"stopped at step (\d+) on request", log)[1])
    assert 3 <= stopped < STEPS
    assert f"(step {stopped} of {STEPS})" in log  # the requeued job resumed from its checkpoint
    assert "Traceback" not in log and "ChildFailedError" not in log  # a stop, not a crash
    assert "Restarts=1 " in lab.cluster.run("scontrol", "show", "job", "--oneliner", train)
    # while it waited to start again, status said so, at the checkpoint's step
    state, step, _, detail = rows(lab.requeue_status)["tiny"]
    assert (state, step) == ("pending", f"{stopped}/{STEPS}"), lab.requeue_status
    assert f"train job {train} requeued (BeginTime), resumes at step {stopped}" in detail, detail

    # the sweep's seed-0 is the same run, uninterrupted: the same loss at every step, and the
    # same weights at the end
    def losses(run: Path) -> list[tuple[int, float, float]]:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return [(m["step"], m["loss"], m["grad_norm"]) for m in map(json.loads, lines)]

    interrupted, uninterrupted = lab.work / "runs/tiny", lab.work / "runs/sw/seed-0"
    assert [step for step, _, _ in losses(interrupted)] == list(range(1, STEPS + 1))
    assert losses(interrupted) == losses(uninterrupted)
    final = f"checkpoints/step-{STEPS:06d}/weights.pt"
    ours, theirs = (load_weights(run / final)["state_dict"]
                    for run in (interrupted, uninterrupted))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[key], theirs[key]) for key in ours)


def test_a_failed_corpus_job_cancels_its_dependants_and_status_names_its_error(lab):
    jobs = lab.jobs("broken")
    prepare, array, manifest, train, evaluation = (job["id"] for job in jobs)
    assert {key: lab.states[key] for key in [prepare, f"{array}_0", f"{array}_1", manifest,
                                             f"{train}_0", f"{evaluation}_0"]} == {
        prepare: "COMPLETED", f"{array}_0": "FAILED", f"{array}_1": "COMPLETED",
        manifest: "FAILED", f"{train}_0": "CANCELLED", f"{evaluation}_0": "CANCELLED"}
    assert not (lab.work / "runs/broken/checkpoints").exists()
    # no accounting, and the jobs gone from squeue: the run failed, naming the job it waited
    # on and that job's error
    state, step, _, detail = rows(lab.status("broken"))["broken"]
    assert (state, step) == ("failed", f"0/{STEPS}")
    assert f"train job {train}_0" in detail and f"{manifest} (gen-manifest)" in detail, detail
    assert "Is a directory" in detail and "shard-000001.tar" in detail, detail


def test_without_root_or_the_packages_the_cluster_is_skipped_with_the_reason(
        tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable() == "not root: the Slurm daemons run as root"
    with pytest.raises(ClusterUnavailable, match="^not root"):
        start(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert unavailable() == ("munged, slurmctld, slurmd, munge, sbatch, squeue, sinfo, scontrol, "
                             "scancel, srun not found: apt-get install slurmctld slurmd "
                             "slurm-client munge (.ci/run does)")


def test_a_daemon_that_does_not_start_skips_the_cluster_with_its_words(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in COMMANDS:
        script = bin_dir / command
        script.write_text("#!/bin/sh\necho 'munged: Error: Failed to check keyfile' >&2\nexit 1\n")
        script.chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ClusterUnavailable) as error:
        start(tmp_path / "cluster")
    assert str(error.value).startswith(
        "munged did not start (exit 1): munged: Error: Failed to check keyfile")
    assert not list((tmp_path / "cluster").glob("*.pid"))
