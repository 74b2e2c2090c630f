"""Part 4.1 generation alone: the depo, brevo and mano families' training batches (documents,
token ids, loss masks, metas) drawn without the shard writer, samples/s on one core.

    python bench/bench_p41_draw.py --rounds 3

Per case (the paper's largest training settings, as bench_p41_gen.py), `family.document_batches`
over a fresh stream range each round, after one warm-up call that builds the per-process tables
(test-instance hashes, the lexicon's spelling table). Medians over rounds, wall and CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from bench_p41_gen import CASES as CORPORA

from corpus_gen.core.config import load_config
from corpus_gen.core.registry import get_family, schemas

ROOT = Path(__file__).resolve().parent.parent
# case -> (samples per round, target samples/s); the corpus and its sizes are bench_p41_gen's
CASES: dict[str, tuple[int, int]] = {
    "depo1": (20_000, 15_000),
    "depo2": (50_000, 50_000),
    "brevo1": (50_000, 45_000),
    "brevo2": (50_000, 65_000),
    "mano": (300_000, 600_000),
}


def draw_seconds(case: str, samples: int, start: int) -> tuple[float, float]:
    """(wall, CPU) seconds to draw `samples` training documents from stream position `start`."""
    config_file, sizes, _, _ = CORPORA[case]
    config = load_config(ROOT / "configs/corpus" / config_file,
                         [*sizes, f"samples={start + samples}"], schemas())
    family = get_family(config.family)
    wall, cpu = time.perf_counter(), time.process_time()
    count = sum(len(batch) for batch in family.document_batches(config, start, start + samples))
    seconds = time.perf_counter() - wall, time.process_time() - cpu
    if count != samples:
        raise RuntimeError(f"{case}: {count} documents, not {samples}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every sample count")
    args = ap.parse_args()
    print("| case | samples/round | wall samples/s | CPU samples/s | target | met |")
    print("|---|---:|---:|---:|---:|---|")
    for case in args.cases.split(","):
        samples, target = max(1, round(CASES[case][0] * args.scale)), CASES[case][1]
        draw_seconds(case, 1, 0)  # warm-up: per-process tables
        times = [draw_seconds(case, samples, 1 + r * samples) for r in range(args.rounds)]
        wall = samples / statistics.median(t[0] for t in times)
        cpu = samples / statistics.median(t[1] for t in times)
        print(f"| {case} | {samples:,} | {wall:,.0f} | {cpu:,.0f} | {target:,} "
              f"| {'met' if cpu >= target else 'not met'} |", flush=True)
    print(f"\nnumpy {np.__version__}; one process, one thread")


if __name__ == "__main__":
    main()
