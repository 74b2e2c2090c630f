"""A job's log, read for the line that says why the job failed (`physlm status`, the local
executor)."""

from pathlib import Path


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
