"""What Slurm says of a plan's jobs, for `physlm status`: the jobs `physlm submit` recorded in
`<root>/slurm/jobs.json`, looked up in squeue (queued and running) and sacct (finished)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

from trainer.errors import TrainError

JOBS = "jobs.json"
# Slurm's job states as `physlm status` reads them; any other state reads as pending
STATES = {
    # preempted and requeued jobs wait in the queue again
    "PENDING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending", "PREEMPTED": "pending", "SUSPENDED": "pending",
    "RUNNING": "running", "CONFIGURING": "running", "COMPLETING": "running",
    "STAGE_OUT": "running", "SIGNALING": "running", "RESIZING": "running",
    "COMPLETED": "done",
    "FAILED": "failed", "TIMEOUT": "failed", "OUT_OF_MEMORY": "failed", "CANCELLED": "failed",
    "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed",
    "SPECIAL_EXIT": "failed",
}


def read_jobs(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["jobs"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TrainError(f"{path}: unreadable ({type(exc).__name__}: {exc}); move it aside "
                         "to submit again") from None


def slurm_states(root: Path) -> dict[str, tuple[str, str]]:
    """Run name -> (state, detail) from the jobs recorded in `<root>/slurm/jobs.json` and what
    squeue and sacct (where on PATH) say of them: state is pending, running, done or failed, the
    detail names the job and its Slurm state (or the failed job a pending one waits on). A run
    whose latest jobs neither knows is left out: its files tell."""
    records = read_jobs(root / "slurm" / JOBS)
    states = _sacct(sorted({record["id"] for record in records})) | squeue()
    latest: dict[str, dict[str, tuple[dict, str]]] = {}  # run -> kind -> (record, task key)
    for record in records:
        if record["kind"] in ("train", "eval"):
            for index, run in zip(record["array"], record["runs"]):
                kinds = latest.setdefault(run, {})
                if record["kind"] == "train":  # an evaluation before this training is stale
                    kinds.pop("eval", None)
                kinds[record["kind"]] = (record, f"{record['id']}_{index}")
    by_id = {record["id"]: record for record in records}
    found = {run: _run_state(kinds, states, by_id) for run, kinds in latest.items()}
    return {run: state for run, state in found.items() if state is not None}


def _run_state(kinds: dict[str, tuple[dict, str]], states: dict[str, tuple[str, str]],
               by_id: dict[str, dict]) -> tuple[str, str] | None:
    """The run's state: its training job's, then (once that is done) its evaluation's."""
    answer = None
    for kind in ("train", "eval"):
        if kind not in kinds or kinds[kind][1] not in states:
            return answer
        record, key = kinds[kind]
        slurm_state, reason = states[key]
        state = STATES.get(slurm_state, "pending")
        if state == "pending":
            failed = _failed_dependency(record, key, states, by_id)
            if failed:
                return "failed", f"{kind} job {key} waits on {failed}"
            return "pending", f"{kind} job {key} {slurm_state}" + (f" ({reason})" if reason
                                                                   else "")
        if state != "done":
            return state, f"{kind} job {key} {slurm_state}"
        answer = "done", f"{kind} job {key} COMPLETED"
    return answer


def _failed_dependency(record: dict, key: str, states: dict[str, tuple[str, str]],
                       by_id: dict[str, dict]) -> str | None:
    """The failed job that `record` (task `key`) waits on, directly or through the jobs it
    waits on: `gen-array NAME job 12_3, which ended FAILED`."""
    for dep_id in record.get("after") or []:
        dep = by_id.get(dep_id)
        if dep is None:
            continue
        if dep["array"] is None:
            keys = [dep_id]
        elif record["dependency"].startswith("aftercorr"):
            keys = [f"{dep_id}_{key.split('_')[1]}"]  # task i waits for task i only
        else:
            keys = [f"{dep_id}_{i}" for i in dep["array"]]
        for dep_key in keys:
            slurm_state = states.get(dep_key, ("", ""))[0]
            if STATES.get(slurm_state) == "failed":
                return f"{dep['kind']} {dep['name']} job {dep_key}, which ended {slurm_state}"
        deeper = _failed_dependency(dep, keys[0], states, by_id)
        if deeper:
            return deeper
    return None


def _sacct(ids: list[str]) -> dict[str, tuple[str, str]]:
    """Task key (`12`, `12_3`) -> (Slurm state, "") of the given jobs, from accounting."""
    if not ids or shutil.which("sacct") is None:
        return {}
    out = _query(["sacct", "--noheader", "--allocations", "--parsable2",
                  "--format=JobID,State", f"--jobs={','.join(ids)}"])
    states = {}
    for line in out.splitlines():
        job, _, state = line.partition("|")
        for key in task_keys(job.strip()):
            states[key] = (state.split()[0] if state.split() else "", "")  # CANCELLED by 123
    return states


def squeue() -> dict[str, tuple[str, str]]:
    """Task key -> (Slurm state, reason) of this user's queued and running jobs."""
    if shutil.which("squeue") is None:
        return {}
    out = _query(["squeue", "--me", "--noheader", "--array", "--format=%i|%T|%r"])
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


def _query(command: list[str]) -> str:
    """A Slurm command's output; empty when it fails (status reads the run files then)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""
