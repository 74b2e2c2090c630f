"""Stopping a run on request at a step boundary, with a checkpoint, so that it can be requeued.

Slurm warns a job before its time is up (`--signal=B:USR1@300`, to the batch shell only); the
batch script (slurm/train.sh) then creates `<run_dir>/.stop`, which rank 0 looks for each step,
whatever launched the ranks (torchrun itself would die of a forwarded USR1). That file, or a
SIGUSR1 or SIGTERM to any rank (the local executor's stop, `kill`), asks the loop to save a
checkpoint at the next optimizer-step boundary and stop; `train.resume=auto` continues from
there. The loop combines the request into its per-step all-reduce, so that
every rank stops at the same step whichever rank was asked.

A clean stop is recorded in `<run_dir>/stopped.json` (its step and checkpoint), and
`physlm train` exits 75; under torchrun it exits 0 instead, since torchrun reports any other
exit of a worker as a failure, in a 30-line ChildFailedError: there the record is what tells
the stop from the end of the run (slurm/train.sh reads it).
"""

import json
import os
import signal
import sys
import threading
from pathlib import Path

from trainer.errors import PREEMPTED_EXIT, TrainError
from trainer.run_dir import STOP_FILE, STOPPED_FILE, replace_file

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


def stopped_exit_code() -> int:
    """`physlm train`'s exit code after a clean stop: 75 (EX_TEMPFAIL), or 0 under torchrun
    (which sets TORCHELASTIC_RUN_ID in its workers' environment)."""
    return 0 if "TORCHELASTIC_RUN_ID" in os.environ else PREEMPTED_EXIT


class StopRequest:
    """While entered, SIGUSR1 and SIGTERM are kept as a request instead of ending the process;
    `requested()` also sees the stop file once `watch_file()` was called (rank 0 only)."""

    def __init__(self, run_dir: Path):
        self.file = run_dir / STOP_FILE
        self.record = run_dir / STOPPED_FILE
        self.signal: int | None = None
        self.watching = False
        self._previous: dict = {}

    def __enter__(self) -> "StopRequest":
        # Python lets only the main thread install handlers; elsewhere the stop file still works
        if threading.current_thread() is threading.main_thread():
            for number in SIGNALS:
                self._previous[number] = signal.signal(number, self._keep)
                # restart system calls the signal interrupts: C++ code (gloo, NCCL, DeepSpeed's
                # I/O) may take an EINTR for a failure
                signal.siginterrupt(number, False)
        return self

    def __exit__(self, *_) -> None:
        for number, previous in self._previous.items():
            # None: a handler not installed from Python, which cannot be put back; the default
            # is the nearest
            signal.signal(number, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _keep(self, number: int, _frame) -> None:
        self.signal = number

    def watch_file(self) -> None:
        """Look for the stop file at every step from now on, after removing a stale one (the
        requeued run must not stop at once on the file that stopped its previous job) and the
        record of the previous stop (the run is going again)."""
        self.file.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)
        self.watching = True

    def requested(self) -> bool:
        return self.signal is not None or (self.watching and self.file.exists())

    def done(self, step: int, checkpoint: Path) -> None:
        """The request is served with `checkpoint` at `step`: record the stop and remove the
        stop file (if this process watches it: rank 0). A record that cannot be written (a full
        disk) is a one-line warning: the stop is clean, its checkpoint saved."""
        if self.watching:
            record = {"step": step, "checkpoint": str(checkpoint)}
            try:
                replace_file(self.record, json.dumps(record) + "\n")
            except TrainError as exc:
                print(f"train  | warning: {exc}", file=sys.stderr, flush=True)
            self.file.unlink(missing_ok=True)
