"""The local executor: what `physlm submit` asks of Slurm, on this machine. A plan's corpora are
generated first, in this process (each once, however many runs share it); then each run is
`physlm train <run>/experiment.yaml` and `physlm eval <run>` in subprocesses, `jobs` runs at a
time, a finetuning run after its parent. Each run's output goes to `<run>/log.txt` and its state
to `<run>/job.json` (with the job's pid and start time: a pid later given to another process
is not the job); a finished run is kept, and a failed one fails alone: a rerun does only what
is not done. On Linux the jobs die with the executor, however it ends (`local_process`).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import atomic_write
from launch.experiment import prepare_corpus, took
from launch.local_process import die_with_parent, process_start
from launch.plan import Plan, RunJob, settle_changed, write_plan
from launch.status import last_error, process_alive, read_job, run_finished
from trainer.errors import PREEMPTED_EXIT, TrainError
from trainer.run_dir import JOB, LOG, inside

_POLL_SECONDS = 0.5
PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
WORLD_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                   "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
# torchrun's: TORCHELASTIC_RUN_ID would make a job's clean stop exit 0 (trainer.preempt)
WORLD_PREFIX = "TORCHELASTIC_"


@dataclass
class _Job:
    run: RunJob
    stage: str  # train | eval
    process: subprocess.Popen
    log: IO
    began: float


def execute(plan: Plan, jobs: int = 1, workers: int = 1, log: Callable[[str], None] = print,
            redo_changed: bool = False) -> dict[str, str]:
    """Run the plan; each run's final state (done, failed, stopped) by name. A run directory
    trained with other settings than the plan's now is refused, or with `redo_changed` moved
    aside and trained again."""
    _refuse_running(plan)
    for run in plan.runs:  # a run's log and job record are written only inside its directory
        for name in (LOG, JOB):
            inside(run.run_dir, name)
    settle_changed(plan, redo_changed, log)
    write_plan(plan)
    corpus_errors = _generate_corpora(plan, workers, log)
    states: dict[str, str] = {}
    for run in plan.runs:
        if run_finished(run.run_dir, run.experiment.train.max_steps,
                        list(run.experiment.eval.tasks), run.experiment.train.exposures):
            states[run.name] = "done"
            log(f"run    | {run.name}: done already, kept")
    waiting = [run for run in plan.runs if run.name not in states]
    running: list[_Job] = []
    threads = max(1, (os.cpu_count() or 1) // max(1, min(jobs, len(waiting) or 1)))
    try:
        with _interrupted_by(signal.SIGTERM, signal.SIGHUP):
            while waiting or running:
                for run in list(waiting):
                    blocked = _blocked(run, states, corpus_errors)
                    if blocked:
                        waiting.remove(run)
                        states[run.name] = "failed"
                        _record(run, "failed", "train", error=blocked)
                        log(f"run    | {run.name}: failed: {blocked}")
                    elif (run.parent is None or states.get(run.parent) == "done") \
                            and len(running) < jobs:
                        waiting.remove(run)
                        running.append(_start(run, "train", threads, log))
                for job in [job for job in running if job.process.poll() is not None]:
                    running.remove(job)
                    follow = _finish(job, states, log)
                    if follow is not None:
                        running.append(_start(job.run, follow, threads, log))
                time.sleep(_POLL_SECONDS)
    finally:  # however the executor ends, no job goes on alone: each saves and stops
        _stop(running, states, log)
    return states


def _refuse_running(plan: Plan) -> None:
    """Two trainers in one run directory would interleave checkpoints and metrics: refuse while
    a job of an earlier launch still runs."""
    for run in plan.runs:
        job = read_job(run.run_dir)
        if job.get("state") == "running" and process_alive(job):
            raise TrainError(f"run {run.name}: still running ({job.get('stage')}, pid "
                             f"{job['pid']} on {job['host']}); wait for it, or stop it "
                             f"(kill {job['pid']}: it saves a checkpoint) and launch again")


@contextmanager
def _interrupted_by(*signals: signal.Signals) -> Iterator[None]:
    """These signals end the executor as Ctrl-C does (its jobs stopped with a checkpoint)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _stop(running: list["_Job"], states: dict[str, str], log: Callable[[str], None]) -> None:
    """Ask each job still running to stop (physlm train saves a checkpoint on SIGTERM), wait
    for it, and record it as stopped."""
    for job in running:
        job.process.terminate()
    for job in running:
        job.process.wait()
        job.log.close()
        states[job.run.name] = "stopped"
        _record(job.run, "stopped", job.stage, code=job.process.returncode)
        log(f"{job.stage:<6} | {job.run.name}: stopped; a rerun resumes")


def _generate_corpora(plan: Plan, workers: int, log: Callable[[str], None]) -> dict[str, str]:
    """Each corpus once, in plan order (a corpus reusing another's tokenizer after it); the
    error of each that failed, by name."""
    errors: dict[str, str] = {}
    for corpus in plan.corpora:
        failed = [name for name in corpus.after if name in errors]
        if failed:
            errors[corpus.name] = f"corpus {failed[0]} failed"
            continue
        began = time.perf_counter()
        try:
            prepare_corpus(corpus.config, corpus.out, workers, log)
        except CorpusError as exc:
            errors[corpus.name] = f"corpus {corpus.out}: {exc}"
            log(f"gen    | failed: {exc}")
            continue
        log(f"gen    | {corpus.name} ready in {took(began)}")
    return errors


def _blocked(run: RunJob, states: dict[str, str], corpus_errors: dict[str, str]) -> str | None:
    """Why the run cannot start at all: its corpus or its parent failed."""
    if run.corpus.name in corpus_errors:
        return corpus_errors[run.corpus.name]
    if run.parent is not None and states.get(run.parent) in ("failed", "stopped"):
        return f"its parent {run.parent} did not finish"
    return None


def command(run: RunJob, stage: str) -> list[str]:
    """The physlm command line of a run's stage (slurm/train.sh and eval.sh spell it out)."""
    if stage == "train":
        return ["-m", "launch.cli", "train", str(run.experiment_file), "--run-dir",
                str(run.run_dir), "--corpus", str(run.corpus.out)]
    return ["-m", "launch.cli", "eval", str(run.run_dir)]


def _start(run: RunJob, stage: str, threads: int, log: Callable[[str], None]) -> _Job:
    output = open(inside(run.run_dir, LOG), "a")
    output.write(f"\n=== physlm {stage} {run.name} ({time.strftime('%Y-%m-%d %H:%M:%S')}) ===\n")
    output.flush()
    # runs side by side share the cores instead of each taking all of them
    # each job is a world of its own: a rendezvous inherited from here (MASTER_PORT, RANK,
    # an allocation's SLURM_PROCID) would make jobs side by side claim one port
    inherited = {k: v for k, v in os.environ.items()
                 if k not in WORLD_VARIABLES and not k.startswith(WORLD_PREFIX)}
    env = {**inherited, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads)),
           # the jobs run this physlm, also from a source checkout that is not installed
           "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT,
                                                       os.environ.get("PYTHONPATH")]))}
    # a session of its own: Ctrl-C reaches the executor alone, which asks each job to stop
    # (SIGTERM: physlm train saves a checkpoint first) instead of killing it mid-step
    # and it dies with the executor (SIGTERM, a checkpoint saved) however the executor dies
    process = subprocess.Popen([sys.executable, *command(run, stage)], stdout=output,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True,
                               preexec_fn=partial(die_with_parent, os.getpid()))
    _record(run, "running", stage, pid=process.pid)
    log(f"{stage:<6} | {run.name}: started (pid {process.pid}, log {run.run_dir / LOG})")
    return _Job(run, stage, process, output, time.perf_counter())


def _finish(job: _Job, states: dict[str, str], log: Callable[[str], None]) -> str | None:
    """Record a finished process; the next stage to start, if any."""
    job.log.close()
    code, run = job.process.returncode, job.run
    if code == 0 and job.stage == "train" and run.experiment.eval.tasks:
        log(f"train  | {run.name}: done in {took(job.began)}")
        return "eval"
    if code == 0:
        states[run.name] = "done"
        _record(run, "done", job.stage, code=code)
        log(f"{job.stage:<6} | {run.name}: done in {took(job.began)}")
    elif code == PREEMPTED_EXIT:
        states[run.name] = "stopped"
        _record(run, "stopped", job.stage, code=code)
        log(f"{job.stage:<6} | {run.name}: stopped with a checkpoint; a rerun resumes")
    else:
        states[run.name] = "failed"
        error = last_error(run.run_dir / LOG)
        _record(run, "failed", job.stage, code=code, error=error)
        log(f"{job.stage:<6} | {run.name}: failed (exit {code}): {error}")
    return None


def _record(run: RunJob, state: str, stage: str, pid: int | None = None,
            code: int | None = None, error: str | None = None) -> None:
    record = {"executor": "local", "state": state, "stage": stage, "host": socket.gethostname(),
              "pid": pid, "started": pid and process_start(pid), "exit_code": code, "error": error,
              "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write(inside(run.run_dir, JOB), (json.dumps(record, indent=1) + "\n").encode())
