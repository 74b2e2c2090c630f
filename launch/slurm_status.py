"""What Slurm says of a plan's jobs, for `physlm status`: the jobs `physlm submit` recorded in
`<root>/slurm/jobs.json`, looked up in squeue (queued and running), in the record each job's
script keeps of itself (`<root>/slurm/records/<task>.jsonl`: started, then ended with its exit
code, or requeued) and in sacct where the cluster keeps accounting.

Without accounting an ended job leaves squeue within minutes and sacct answers nothing; its own
record still says how it ended, and a job gone from the queue that never started was cancelled:
by `--kill-on-invalid-dep`, when a job it waits on failed, which is then named with the last
error line of its log."""

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import parse_json
from launch.job_log import last_error
from trainer.errors import TrainError

JOBS = "jobs.json"
RECORDS = "records"  # each job's record of itself, written by the preamble of its script
LOGS = "logs"
# Slurm's job states as `physlm status` reads them; any other state reads as pending
STATES = {
    # preempted jobs wait in the queue again; a requeued one resumes from its checkpoint
    "PENDING": "pending", "REQUEUED": "requeued", "REQUEUE_HOLD": "requeued",
    "REQUEUE_FED": "requeued", "PREEMPTED": "pending", "SUSPENDED": "pending",
    "RUNNING": "running", "CONFIGURING": "running", "COMPLETING": "running",
    "STAGE_OUT": "running", "SIGNALING": "running", "RESIZING": "running",
    "COMPLETED": "done",
    "FAILED": "failed", "TIMEOUT": "failed", "OUT_OF_MEMORY": "failed", "CANCELLED": "failed",
    "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed",
    "SPECIAL_EXIT": "failed",
}
# a run's state when its training, or its evaluation, is in this state
RUN_STATES = {"train": {"pending": "pending", "requeued": "requeued", "running": "running",
                        "failed": "failed"},
              "eval": {"pending": "needs eval", "requeued": "needs eval", "running": "running",
                       "failed": "eval failed"}}


@dataclass
class Task:
    """A job, or a task of an array, as the queue, its own record and accounting tell it."""

    key: str  # `12`, or `12_3`: task 3 of array job 12
    job: dict  # its job's entry in jobs.json
    state: str  # a Slurm state (PENDING, RUNNING, COMPLETED, FAILED, ...); "": nothing tells
    note: str  # squeue's reason, the exit code, how the state was inferred
    recorded: bool  # its script recorded a start
    log: Path  # its output

    @property
    def label(self) -> str:
        return f"{self.job['kind']} job {self.key}"

    @property
    def never_ran(self) -> bool:
        """Cancelled before it started (when a job it waits on failed, by
        --kill-on-invalid-dep)."""
        return self.state == "CANCELLED" and not self.recorded

    def error(self) -> str:
        return last_error(self.log)


def job_name(kind: str, name: str) -> str:
    """A job's --job-name; its log is `<root>/slurm/logs/<job name>-<task key>.out`."""
    return f"physlm-{kind}-{name}"


def read_jobs(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["jobs"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, RecursionError, KeyError, TypeError) as exc:
        raise TrainError(f"{path}: unreadable ({type(exc).__name__}: {exc}); move it aside "
                         "to submit again") from None


def slurm_states(root: Path) -> dict[str, tuple[str, str]]:
    """Run name -> (state, detail) of the latest training and evaluation jobs recorded for it:
    state is pending, requeued, running, needs eval, eval failed, done or failed; the detail
    names the job, its Slurm state and, of a failed job, its last error line (or the failed job
    a cancelled one waited on). A run whose latest jobs nothing tells of is left out: its files
    tell."""
    directory = root / "slurm"
    records = read_jobs(directory / JOBS)
    queue = squeue()  # before the records: a job that leaves the queue has written its end
    accounting = _sacct(sorted({record["id"] for record in records}))
    by_id = {record["id"]: record for record in records}
    tasks: dict[str, Task] = {}

    def task(key: str) -> Task:
        if key not in tasks:
            job = by_id[key.split("_")[0]]
            log = directory / LOGS / f"{job_name(job['kind'], job['name'])}-{key}.out"
            events = _events(directory / RECORDS / f"{key}.jsonl")
            # of a job submitted before the scripts kept records, only what squeue lists tells
            known = queue if queue is not None and (job.get("records") or key in queue) \
                else None
            tasks[key] = Task(key, job, *_task_state(key, known, accounting, events),
                              bool(events), log)
        return tasks[key]

    latest: dict[str, dict[str, str]] = {}  # run -> kind -> task key
    for record in records:
        if record["kind"] in ("train", "eval"):
            for index, run in zip(record["array"], record["runs"]):
                kinds = latest.setdefault(run, {})
                if record["kind"] == "train":  # an evaluation before this training is stale
                    kinds.pop("eval", None)
                kinds[record["kind"]] = f"{record['id']}_{index}"
    found = {run: _run_state(kinds, task, by_id) for run, kinds in latest.items()}
    return {run: state for run, state in found.items() if state is not None}


def _run_state(kinds: dict[str, str], task: Callable[[str], Task], by_id: dict[str, dict]
               ) -> tuple[str, str] | None:
    """The run's state: its training job's, then (once that is done) its evaluation's."""
    answer = None
    for kind in ("train", "eval"):
        if kind not in kinds or not task(kinds[kind]).state:
            return answer
        current = task(kinds[kind])
        state = STATES.get(current.state, "pending")
        if state == "done":
            answer = "done", f"{current.label} COMPLETED"
            continue
        run_state = RUN_STATES[kind][state]
        if state in ("pending", "requeued"):
            # a job that ran before had what it waited for
            failed = None if current.recorded else _failed_dependency(current, task, by_id)
            if failed:  # never to run (cancelled soon, or left pending without the option)
                return (RUN_STATES[kind]["failed"],
                        f"{current.label} will not run: {_failure(failed)}")
            note = f" ({current.note})" if current.note else ""
            word = "requeued" if state == "requeued" else current.state
            return run_state, f"{current.label} {word}{note}"
        if current.never_ran:
            failed = _failed_dependency(current, task, by_id)
            if failed:
                return run_state, f"{current.label} cancelled: {_failure(failed)}"
        return run_state, _described(current)
    return answer


def _described(task: Task) -> str:
    """`train job 12_0 FAILED (exit code 1): physlm train: error: ...`"""
    note = f" ({task.note})" if task.note else ""
    error = task.error() if STATES.get(task.state) == "failed" else ""
    return f"{task.label} {task.state}{note}" + (f": {error}" if error else "")


def _failure(task: Task) -> str:
    """`dependency 12_3 (gen-array) failed: <its last error line>`"""
    dependency = f"dependency {task.key} ({task.job['kind']})"
    if task.state == "CANCELLED":
        return f"{dependency} was cancelled"
    error = task.error()
    return f"{dependency} failed" + (f": {error}" if error else f" ({task.state})")


def _failed_dependency(current: Task, task: Callable[[str], Task], by_id: dict[str, dict]
                       ) -> Task | None:
    """The job that failed among those `current` waits on, directly or through them; of a
    dependency cancelled before it started, the one that failed before it. A job waiting with
    afterany (the manifest job, after the shard array) runs however they ended."""
    record = current.job
    if (record.get("dependency") or "").startswith("afterany"):
        return None
    for dep_id in record.get("after") or []:
        dep = by_id.get(dep_id)
        if dep is None:
            continue
        if dep["array"] is None:
            keys = [dep_id]
        elif record["dependency"].startswith("aftercorr"):
            keys = [f"{dep_id}_{current.key.split('_')[1]}"]  # task i waits for task i only
        else:
            keys = [f"{dep_id}_{i}" for i in dep["array"]]
        for key in keys:
            if STATES.get(task(key).state) == "failed":
                return (task(key).never_ran and _failed_dependency(task(key), task, by_id)
                        ) or task(key)
            if STATES.get(task(key).state, "pending") in ("pending", "requeued"):
                deeper = _failed_dependency(task(key), task, by_id)
                if deeper:
                    return deeper
    return None


def _task_state(key: str, queue: dict[str, tuple[str, str]] | None, accounting: dict[str, str],
                events: list[dict]) -> tuple[str, str]:
    """A task's Slurm state and a note: squeue's while it is queued (REQUEUED when it ran
    before); else how its own record says it ended, sacct's state where accounting knows it,
    and else, the queue answering, CANCELLED (it left the queue without recording an end)."""
    last = events[-1] if events else {}
    if queue is not None and key in queue:
        state, reason = queue[key]
        if events and STATES.get(state) == "pending":  # it ran, and waits to run again
            return "REQUEUED", reason
        return state, reason
    if last.get("event") == "ended":
        code = last.get("exit_code")
        if code == 0:
            return "COMPLETED", ""
        known = accounting.get(key, "")  # TIMEOUT, OUT_OF_MEMORY say more than an exit code
        return (known if STATES.get(known) == "failed" else "FAILED"), _exit_note(code)
    if key in accounting:
        return accounting[key], ""
    if queue is None:  # squeue did not answer: the record is all there is
        return {"started": ("RUNNING", "by its record; squeue did not answer"),
                "requeued": ("REQUEUED", "")}.get(last.get("event"), ("", ""))
    if last.get("event") == "started":
        return "FAILED", "killed before it could record its end: time limit, memory or node"
    if last.get("event") == "requeued":
        return "CANCELLED", "left the queue while waiting to be requeued"
    return "CANCELLED", "left the queue before it started"


def _exit_note(code: object) -> str:
    if isinstance(code, int) and code > 128:
        return f"exit code {code}: killed by signal {code - 128}"
    return f"exit code {code}"


def _events(path: Path) -> list[dict]:
    """A job's record of itself: one JSON object a line (a torn last line is skipped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        with suppress(CorpusError):
            events.append(parse_json(line, str(path)))
    return [event for event in events if isinstance(event, dict)]


def _sacct(ids: list[str]) -> dict[str, str]:
    """Task key (`12`, `12_3`) -> Slurm state of the given jobs, from accounting; {} where the
    cluster keeps none (sacct says "accounting storage is disabled", whatever its exit code)."""
    if not ids or shutil.which("sacct") is None:
        return {}
    out = query(["sacct", "--noheader", "--allocations", "--parsable2",
                  "--format=JobID,State", f"--jobs={','.join(ids)}"])
    if out is None or "accounting storage is disabled" in out.lower():
        return {}
    states = {}
    for line in out.splitlines():
        job, _, state = line.partition("|")
        for key in task_keys(job.strip()):
            states[key] = state.split()[0] if state.split() else ""  # CANCELLED by 123
    return states


def squeue() -> dict[str, tuple[str, str]] | None:
    """Task key -> (Slurm state, reason) of this user's queued and running jobs; None when
    squeue is missing or fails (then nothing is known of what is queued)."""
    if shutil.which("squeue") is None:
        return None
    out = query(["squeue", "--me", "--noheader", "--array", "--format=%i|%T|%r"])
    if out is None:
        return None
    states = {}
    for line in out.splitlines():
        job, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        for key in task_keys(job.strip()):
            states[key] = (state.strip(), "" if reason.strip() == "None" else reason.strip())
    return states


def task_keys(job: str) -> list[str]:
    """The task keys a job id of squeue or sacct stands for: `12` and `12_3` themselves, an
    array's pending tasks `12_[0-2,5%4]` each of them; [] for what is not a job id."""
    base, bracket, tasks = job.partition("_[")
    if not bracket:
        return [job] if re.fullmatch(r"\d+(_\d+)?", job) else []
    keys = []
    for part in tasks.rstrip("]").split("%")[0].split(","):
        start, _, stop = part.partition("-")
        if not (start.isdigit() and (stop or start).isdigit()):
            return []
        keys += [f"{base}_{i}" for i in range(int(start), int(stop or start) + 1)]
    return keys


def query(command: list[str]) -> str | None:
    """A Slurm command's output (stdout and stderr); None when it fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None
