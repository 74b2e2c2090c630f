"""User-facing training errors: one line naming the culprit, reported without a traceback."""


class TrainError(Exception):
    """A problem with the run's inputs (checkpoint, corpus, config) or a diverged run."""
