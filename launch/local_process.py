"""The local executor's jobs as processes: which process a recorded pid is (a pid is reused
once its process ends), and a job that dies with its executor (a `kill -9` of the executor
would otherwise leave its jobs training unsupervised, in sessions of their own)."""

import ctypes
import os
import signal
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_JOB_MODULE = "launch.cli"  # every job is `python -m launch.cli train|eval ...`


def _find_prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# looked up here, in the executor: after a fork in a parent with threads, loading a library
# (dlopen takes locks another thread may have held) could hang the child
_PRCTL = _find_prctl()


def process_start(pid: int) -> str | None:
    """When process `pid` started: `<boot id>/<clock ticks after boot>` (field 22 of
    /proc/<pid>/stat), which with the pid names one process for good; None where /proc cannot
    tell (no such process, not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # the command name, field 2, is in parentheses and may hold spaces and parentheses itself
    fields = stat[stat.rindex(")") + 2:].split()
    return f"{boot}/{fields[19]}"  # fields[0] is field 3


def is_job_process(job: dict) -> bool:
    """Whether the live process of job.json's pid is that job and not a later process given
    the same pid: its start time as recorded, or (a record without one) a physlm command line.
    True where /proc cannot tell."""
    pid = int(job["pid"])
    if job.get("started"):
        return process_start(pid) in (job["started"], None)
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    return _JOB_MODULE.encode() in command


def die_with_parent(executor: int) -> None:
    """In a job's process before it starts (Popen's preexec_fn, with the executor's pid): on
    Linux, have the kernel send SIGTERM, on which physlm train saves a checkpoint, when the
    executor dies however it dies (`kill -9` too)."""
    if _PRCTL is None:  # not Linux: a next launch names the jobs left running
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != executor:  # it died before prctl: no signal would come
        os.kill(os.getpid(), signal.SIGTERM)
