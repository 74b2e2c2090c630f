"""`physlm status`: each run's state, read from its directory and, where it ran under Slurm,
from its jobs (launch.slurm_status): pending, running, needs eval (trained, not evaluated),
eval failed, done, failed with the last error line, or damaged (its metrics.jsonl, in one line).

A run is done when its latest checkpoint is at its last step (train.max_steps, or with
train.exposures the steps its training worked out from the corpus, which every checkpoint's
meta.json records) and every task of eval.tasks was evaluated at that step; the step and loss
come from `metrics.jsonl`: the last logged while it trains, the checkpoint's (where it resumes)
while it waits. The local executor leaves `job.json` in the run directory (its process, stage
and exit code) and the jobs' output in `log.txt`.
"""

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import LOCK, lock_holder, read_json_file
from launch.job_log import last_error
from launch.local_process import is_job_process
from launch.plan import PLAN, RUN_RECORD, Plan, PlannedRun, find_root, planned_runs, read_plan
from launch.slurm_status import slurm_states
from trainer.errors import TrainError
from trainer.run_dir import (
    CHECKPOINTS,
    CONFIG,
    EVAL,
    JOB,
    LOG,
    META,
    read_latest,
    read_metrics,
    read_run_config,
    step_of,
)

STATES = ("pending", "running", "needs eval", "done", "eval failed", "failed")
FAILED = ("failed", "eval failed", "damaged")


@dataclass
class RunStatus:
    name: str
    run: str  # the run directory: relative to the plan's root, or as given
    state: str  # one of STATES
    step: int  # the last logged step while it trains, else its checkpoint's (0: none yet)
    max_steps: int
    loss: float | None
    detail: str  # the last error line, the Slurm state, a note


def checkpoint_step(run_dir: Path) -> int:
    """The step of the run's latest checkpoint (0 if none), from the `latest` pointer."""
    try:
        return step_of(read_latest(run_dir / CHECKPOINTS) or "") or 0
    except (OSError, ValueError):  # ValueError: not UTF-8
        return 0


def evaluated_at(run_dir: Path, task: str) -> int | None:
    """The step a task's results were computed at, None if not evaluated (or unreadable)."""
    try:
        return int(read_json_file(run_dir / EVAL / f"{task}.json")["step"])
    except (OSError, CorpusError, ValueError, KeyError, TypeError):
        return None


def last_step(run_dir: Path, max_steps: int, exposures: int | None = None) -> int | None:
    """The step the run trains to: train.max_steps, or with train.exposures the steps its
    training worked out from the corpus (the latest checkpoint's schedule); None while no
    checkpoint says."""
    if exposures is None:
        return max_steps
    try:
        name = read_latest(run_dir / CHECKPOINTS)
        meta = read_json_file(run_dir / CHECKPOINTS / name / META) if name else None
        return int(meta["schedule"]["max_steps"]) if meta else None
    except (OSError, CorpusError, ValueError, KeyError, TypeError):
        return None


def trained(run_dir: Path, max_steps: int, exposures: int | None = None) -> bool:
    """Whether the run's latest checkpoint is at its last step."""
    last = last_step(run_dir, max_steps, exposures)
    return last is not None and checkpoint_step(run_dir) >= last


def evaluated(run_dir: Path, max_steps: int, tasks: list[str],
              exposures: int | None = None) -> bool:
    """Whether each task of eval.tasks has results of the last step."""
    last = last_step(run_dir, max_steps, exposures)
    return last is not None and all((evaluated_at(run_dir, task) or 0) >= last
                                    for task in tasks)


def run_finished(run_dir: Path, max_steps: int, tasks: list[str],
                 exposures: int | None = None) -> bool:
    return (trained(run_dir, max_steps, exposures)
            and evaluated(run_dir, max_steps, tasks, exposures))


def last_metrics(logged: list[dict], up_to: int | None = None) -> dict:
    """The last logged line (of `read_metrics`), or the last of a step <= `up_to` ({} if none)."""
    for metrics in reversed(logged):
        if up_to is None or int(metrics.get("step", 0)) <= up_to:
            return metrics
    return {}


def read_job(run_dir: Path) -> dict:
    try:
        return read_json_file(run_dir / JOB)
    except (OSError, CorpusError):
        return {}


def process_alive(job: dict) -> bool:
    """Whether the job's process still runs (only knowable on the host that started it)."""
    if job.get("host") != socket.gethostname() or not job.get("pid"):
        return False
    try:
        os.kill(int(job["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return is_job_process(job)  # not a later process given the same pid


def saved(run_dir: Path) -> str:
    """Where a resume of the run would start, in words."""
    step = checkpoint_step(run_dir)
    return f"checkpoint at step {step}" if step else "no checkpoint yet"


def working(run_dir: Path, job: dict) -> str | None:
    """What works in the run directory now: the local executor's job (`train (pid 12)`), or a
    `physlm train`/`eval` holding the directory's lock (`physlm train (pid 12 on host, since
    ...)`); None if nothing does."""
    if job.get("state") == "running" and process_alive(job):
        return f"{job.get('stage', '')} (pid {job['pid']})"
    return lock_holder(run_dir / LOCK)


def run_status(run: PlannedRun, shown: str, slurm: dict[str, tuple[str, str]]) -> RunStatus:
    try:
        logged = read_metrics(run.run_dir)
    except TrainError as exc:  # one damaged run is a row of its own, never the whole table
        return RunStatus(run.name, shown, "damaged", 0, run.max_steps, None, str(exc))

    last = last_step(run.run_dir, run.max_steps, run.exposures)

    def status(state: str, detail: str = "", waiting: bool = False) -> RunStatus:
        # a run waiting to go on resumes from its checkpoint, not from its last logged step
        metrics = last_metrics(logged, checkpoint_step(run.run_dir) if waiting else None)
        return RunStatus(run.name, shown, state, int(metrics.get("step", 0)),
                         run.max_steps if last is None else last, metrics.get("loss"), detail)

    if run_finished(run.run_dir, run.max_steps, run.tasks, run.exposures):
        return status("done")
    job = read_job(run.run_dir)
    now = working(run.run_dir, job)
    if now:
        return status("running", f"{now}; {saved(run.run_dir)}")
    state, detail = slurm.get(run.name, ("done", ""))  # done: no job of it is in flight
    if state == "requeued":
        return status("pending", f"{detail}, resumes at step {checkpoint_step(run.run_dir)}",
                      waiting=True)
    if state != "done":  # a submission after a local attempt: Slurm's word is the newer
        return status(state, detail, waiting=state in ("pending", "needs eval"))
    if job.get("state") == "failed":
        return status("eval failed" if job.get("stage") == "eval" else "failed",
                      job.get("error") or last_error(run.run_dir / LOG))
    if job.get("state") == "stopped":
        return status("pending", f"stopped at step {checkpoint_step(run.run_dir)}; rerun "
                                 "resumes", waiting=True)
    if trained(run.run_dir, run.max_steps, run.exposures):
        missing = [task for task in run.tasks if (evaluated_at(run.run_dir, task) or 0) < last]
        return status("needs eval", f"trained; not evaluated: {', '.join(missing)}",
                      waiting=True)
    if logged:
        return status("pending", saved(run.run_dir), waiting=True)
    return status("pending", f"after {run.parent}" if run.parent else "")


def plan_runs(path: Path) -> tuple[Path | None, list[PlannedRun]]:
    """The runs `path` names: a plan's root, a run of a plan, or a lone run directory
    (config.yaml)."""
    if path.is_dir() and not (path / RUN_RECORD).exists() and (path / CONFIG).exists() \
            and not (path / PLAN).exists():
        config = read_run_config(path)
        try:
            return None, [PlannedRun(str(config["name"]), path, {}, Path(config["corpus_dir"]),
                                     None, int(config["train"]["max_steps"]),
                                     list(config["eval"]["tasks"]),
                                     config["train"].get("exposures"))]
        except (KeyError, TypeError, ValueError) as exc:
            raise TrainError(f"{path / CONFIG}: damaged run config: it needs name, corpus_dir, "
                             f"train.max_steps and eval.tasks ({type(exc).__name__}: {exc})"
                             ) from None
    root = find_root(path)
    _, runs = read_plan(root)
    if path.is_dir() and path.resolve() != root.resolve() and (path / RUN_RECORD).exists():
        runs = [r for r in runs if r.run_dir.resolve() == path.resolve()]
    return root, runs


def statuses(where: Path | Plan) -> list[RunStatus]:
    """Each run's status: of a plan's root, a run directory, or a plan as its file says now."""
    root, runs = (where.root, planned_runs(where)) if isinstance(where, Plan) \
        else plan_runs(where)
    if not runs:
        raise TrainError(f"{root or where}: no runs")
    slurm = slurm_states(root) if root is not None else {}
    return [run_status(run, shown_dir(run.run_dir, root or where), slurm) for run in runs]


def shown_dir(run_dir: Path, root: Path) -> str:
    """The run column: the run directory relative to the plan's root, the root as given where
    the run is the root itself (an experiment's plan, a lone run directory)."""
    if run_dir == root:
        return str(root)
    try:
        return str(run_dir.relative_to(root))
    except ValueError:
        return str(run_dir)


def status_table(rows: list[RunStatus]) -> str:
    lines = ["| run | state | step | loss | detail |", "|---|---|---|---|---|"]
    for row in rows:
        loss = "" if row.loss is None else f"{row.loss:.4f}"
        lines.append(f"| {row.run} | {row.state} | {row.step}/{row.max_steps} | {loss} | "
                     f"{row.detail} |")
    counts = {state: sum(row.state == state for row in rows) for state in STATES}
    lines.append("\n" + ", ".join(f"{n} {state}" for state, n in counts.items() if n))
    return "\n".join(lines)
