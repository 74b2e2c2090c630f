"""What the generator benchmarks share: the whole `physlm gen` command timed as a subprocess, the
contestants' rounds in alternating order, and the token-rate table of the whole command, its
fixed cost and its marginal rate against an official sampler."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_cases(ap: argparse.ArgumentParser, cases: dict) -> tuple[argparse.Namespace, list]:
    """`ap`'s arguments with --rounds, --cases (of `cases`) and --scale added, and the cases
    chosen."""
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(cases), help="comma-separated, of "
                                                             + ", ".join(cases))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every size")
    args = ap.parse_args()
    chosen = args.cases.split(",")
    unknown = sorted(set(chosen) - set(cases))
    if unknown:
        ap.error(f"--cases: unknown {unknown}; known: {list(cases)}")
    return args, chosen


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_gen(config: Path, overrides: list[str], out: Path) -> tuple[float, float, dict]:
    """(wall, CPU) seconds of `physlm gen config *overrides --workers 1` into `out` (removed
    before and after), and the corpus's manifest."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "launch.cli", "gen", str(config), *overrides, "--out",
               str(out), "--workers", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cpu, began = children_cpu(), time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - began, children_cpu() - cpu
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return wall, cpu, manifest


def alternating_rounds(case: str, rounds: int,
                       steps: list[tuple[str, Callable[[int], tuple[float, float]]]]
                       ) -> dict[str, list[tuple[float, float]]]:
    """Each step's (wall, CPU) seconds per round, the steps' order reversed every other round
    so that neither always runs first; step(r) runs round r."""
    times: dict[str, list] = {name: [] for name, _ in steps}
    for r in range(rounds):
        for name, step in (steps if r % 2 == 0 else steps[::-1]):
            times[name].append(step(r))
            print(f"  {case} round {r + 1} {name}: {times[name][-1][1]:.2f} CPU s",
                  file=sys.stderr, flush=True)
    return times


def print_token_rates(results: dict[str, dict], doc_tokens: dict[str, int], target: int) -> None:
    """The table of each case's rates: results[case] holds the rounds' "official", "whole" and
    "fixed" (wall, CPU) seconds and `sizes` (physlm's tokens, the official's); the marginal
    rate leaves out the fixed command's one document of doc_tokens[case]."""
    print("| case | official tokens/s | physlm whole command tokens/s | physlm fixed cost s "
          "| physlm marginal tokens/s | whole / official | marginal / official "
          f"| target (>= {target:,}/s, whole) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for which, label in ((1, "CPU"), (0, "wall")):
        for case, t in results.items():
            ours, theirs = t["sizes"]
            median = {name: statistics.median(x[which] for x in t[name])
                      for name in ("official", "whole", "fixed")}
            off, whole = theirs / median["official"], ours / median["whole"]
            spent = median["whole"] - median["fixed"]
            marginal = (ours - doc_tokens[case]) / spent if spent > 0 else float("inf")
            print(f"| {case} ({label}) | {off:,.0f} | {whole:,.0f} | {median['fixed']:.2f} "
                  f"| {marginal:,.0f} | {whole / off:.1f}x | {marginal / off:.1f}x "
                  f"| {'met' if whole >= target else 'not met'} |")
