"""The CUDA-only tests (`pytest -m cuda`), in a subprocess; their counts from pytest's summary.

Only the test files that use the marker are collected: a module elsewhere that imports a
package the GPU image lacks (and the proof brings no wheel for) cannot stop the CUDA tests.
On CPU (--cpu-smoke) the same command runs and the CUDA tests skip: that proves the selection
and the command, not the GPU code."""

import re
import subprocess
import sys

from context import ROOT, Context

MARK = "pytest.mark.cuda"


def marked_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if MARK in p.read_text())


def run(ctx: Context) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
               *marked_files()]
    # 5 minutes at most, and never past the proof's deadline
    limit = min(300.0, ctx.left())
    if limit < 20:
        raise RuntimeError(f"not started: {max(limit, 0):.0f} s left before the deadline")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    if done.returncode not in (0, 5):  # 5: nothing selected
        failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        raise RuntimeError(f"pytest exit {done.returncode}: {summary}; {failures[:20]} "
                           f"{done.stderr[-2000:]}")
    return {"command": " ".join(["python", *command[1:]]), "summary": summary,
            **{key: counts.get(key, 0) for key in ("passed", "failed", "skipped", "deselected")}}
