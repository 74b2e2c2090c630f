"""What every section of the proof gets: the mode, a scratch folder, the device, the clock it
must finish by, and where to publish rows as they finish."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository


@dataclass(frozen=True)
class Context:
    smoke: bool  # toy sizes on CPU (--cpu-smoke)
    work: Path  # scratch, removed at the end
    device: torch.device
    started: float  # time.perf_counter() when the proof began
    deadline: float  # seconds after `started` past which nothing new should start
    # the section's fields so far (its "rows" included): proof.py rewrites results.json/md, so
    # a command cut off mid-section keeps the rows that finished
    publish: Callable[[dict], None] = lambda fields: None

    def left(self) -> float:
        """Seconds left before the deadline (negative past it)."""
        return self.deadline - (time.perf_counter() - self.started)


def one_line(exc: BaseException) -> str:
    """An exception as one line for a row of the JSON (its traceback goes to stderr)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:500]}"


def guarded(row: dict, work: Callable[..., dict], *args: object) -> dict:
    """`row` with `work(*args)`'s fields, or with {"error": one line} when it raises: one
    failing contestant or backend costs its row, not the section's other rows."""
    try:
        row.update(work(*args))
    except Exception as exc:  # any failure belongs in the row
        traceback.print_exc()
        row["error"] = one_line(exc)
    return row
