"""User-facing training errors: one line naming the culprit, reported without a traceback."""

from pathlib import Path


class TrainError(Exception):
    """A problem with the run's inputs (checkpoint, corpus, config) or a diverged run."""


class DamagedCheckpoint(TrainError):
    """A checkpoint file is missing or does not read as what it should be (torn, emptied)."""


PREEMPTED_EXIT = 75  # physlm train's exit code after a Preempted stop (EX_TEMPFAIL)


class Preempted(Exception):
    """The run stopped on request (a signal or the stop file) after saving `checkpoint` at
    `step`; running it again resumes it. Not a TrainError: nothing is wrong with the run."""

    def __init__(self, step: int, checkpoint: Path, stop_file: Path):
        super().__init__(step, checkpoint, stop_file)  # all of them: the exception pickles
        self.step, self.checkpoint, self.stop_file = step, checkpoint, stop_file

    def __str__(self) -> str:
        return (f"stopped at step {self.step} on request (signal or {self.stop_file}); "
                f"checkpoint {self.checkpoint} saved; run again to resume")
