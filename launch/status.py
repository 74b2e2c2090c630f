"""`physlm status`: each run's state, read from its directory and, where it ran under Slurm,
from squeue/sacct: pending, running, done, or failed with the last error line.

A run is done when its latest checkpoint is at train.max_steps and every task of eval.tasks
was evaluated at that step; the step and loss so far come from `metrics.jsonl`. The local
executor leaves `job.json` in the run directory (its process, stage and exit code) and the
jobs' output in `log.txt`.
"""

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from launch.plan import RUN_RECORD, Plan, PlannedRun, find_root, planned_runs, read_plan
from launch.slurm_status import slurm_states
from trainer.errors import TrainError

JOB = "job.json"  # the local executor's record of a run's job
LOG = "log.txt"  # the output of a run's jobs, appended
STATES = ("pending", "running", "done", "failed")


@dataclass
class RunStatus:
    name: str
    state: str  # one of STATES
    step: int  # the last logged step (0: none yet)
    max_steps: int
    loss: float | None
    detail: str  # the last error line, the Slurm state, a note


def checkpoint_step(run_dir: Path) -> int:
    """The step of the run's latest checkpoint (0 if none), from the `latest` pointer."""
    pointer = run_dir / "checkpoints" / "latest"
    try:
        return int(pointer.read_text().strip().removeprefix("step-"))
    except (OSError, ValueError):
        return 0


def evaluated_at(run_dir: Path, task: str) -> int | None:
    """The step a task's results were computed at, None if not evaluated."""
    try:
        return int(json.loads((run_dir / "eval" / f"{task}.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def trained(run_dir: Path, max_steps: int) -> bool:
    """Whether the run's latest checkpoint is at train.max_steps."""
    return checkpoint_step(run_dir) >= max_steps


def evaluated(run_dir: Path, max_steps: int, tasks: list[str]) -> bool:
    """Whether each task of eval.tasks has results of the final step."""
    return all((evaluated_at(run_dir, task) or 0) >= max_steps for task in tasks)


def run_finished(run_dir: Path, max_steps: int, tasks: list[str]) -> bool:
    return trained(run_dir, max_steps) and evaluated(run_dir, max_steps, tasks)


def last_metrics(run_dir: Path) -> dict:
    """The last line of metrics.jsonl ({} if none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:  # a line being written
            continue
    return {}


def last_error(log: Path) -> str:
    """The line that says why a job failed: physlm's one-line error, else the last line of a
    traceback, else the last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
                 if line.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("physlm ") and ": error: " in line:
            return line
    return lines[-1] if lines else ""


def read_job(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / JOB).read_text())
    except (OSError, ValueError):
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
        return True
    return True


def run_status(run: PlannedRun, slurm: dict[str, tuple[str, str]]) -> RunStatus:
    metrics = last_metrics(run.run_dir)
    step, loss = int(metrics.get("step", 0)), metrics.get("loss")

    def status(state: str, detail: str = "") -> RunStatus:
        return RunStatus(run.name, state, step, run.max_steps, loss, detail)

    if run_finished(run.run_dir, run.max_steps, run.tasks):
        return status("done")
    job = read_job(run.run_dir)
    if job.get("state") == "running" and process_alive(job):
        return status("running", f"{job.get('stage', '')} (pid {job['pid']})")
    if run.name in slurm:  # a submission after a local attempt: Slurm's word is the newer
        state, detail = slurm[run.name]
        if state == "failed":
            detail = " ".join(filter(None, [detail, last_error(run.run_dir / LOG)]))
        return status(state, detail)
    if job.get("state") == "failed":
        return status("failed", job.get("error") or last_error(run.run_dir / LOG))
    if job.get("state") == "stopped":
        return status("pending", f"stopped at step {checkpoint_step(run.run_dir)}; rerun "
                                 "resumes")
    if step:
        return status("pending", f"checkpoint at step {checkpoint_step(run.run_dir)}")
    return status("pending", f"after {run.parent}" if run.parent else "")


def plan_runs(path: Path) -> tuple[Path | None, list[PlannedRun]]:
    """The runs `path` names: a plan's root, a run of a plan, or a lone run directory
    (config.yaml)."""
    if path.is_dir() and not (path / RUN_RECORD).exists() and (path / "config.yaml").exists() \
            and not (path / "plan.json").exists():
        config = OmegaConf.load(path / "config.yaml")
        return None, [PlannedRun(str(config.name), path, {}, Path(str(config.corpus_dir)),
                                 None, int(config.train.max_steps), list(config.eval.tasks))]
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
    return [run_status(run, slurm) for run in runs]


def status_table(rows: list[RunStatus]) -> str:
    lines = ["| run | state | step | loss | detail |", "|---|---|---|---|---|"]
    for row in rows:
        loss = "" if row.loss is None else f"{row.loss:.4f}"
        lines.append(f"| {row.name} | {row.state} | {row.step}/{row.max_steps} | {loss} | "
                     f"{row.detail} |")
    counts = {state: sum(row.state == state for row in rows) for state in STATES}
    lines.append("\n" + ", ".join(f"{n} {state}" for state, n in counts.items() if n))
    return "\n".join(lines)
