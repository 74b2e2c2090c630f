"""Recall generation speed: physlm's `recall` corpus against the official factual-recall
sampler (Nichani, Lee, Bietti, task.py's `FactRecall`), side by side in one process run.

    python -m pip install --target /tmp/jax "jax[cpu]"   # the official code needs JAX
    python bench/bench_recall_gen.py --official /tmp/factual-recall-iclr --jax /tmp/jax

The paper's setting (S 16, R 4, D 8, T 32, noise S + R, EOS on): a sample is T prompt tokens
and the answer, 33 tokens, in both. Per round, alternating the contestants' order:
- official: `jit(vmap(FactRecall.sample))` over `--official-samples` keys, as run.py's
  training loop draws its epochs, on one core (XLA single-threaded), arrays left in memory
  (nothing written); its compile time (paid once per batch size) is reported apart;
- physlm draws: the family's `document_batches` in this process (token ids, loss masks, metas,
  no writer): the like-for-like figure;
- physlm whole: the whole `physlm gen configs/corpus/recall.yaml samples=<n> --workers 1`
  command as a subprocess, start to exit (imports, shards with their JSON, ids, masks, tar
  members and sha256, the eval set, facts.json, manifest); fixed: the same with samples=1, so
  the marginal rate is (n - 1) / (whole - fixed).
Rates are tokens per second (33 per sample), medians over rounds, CPU seconds beside wall ones
(the whole process is pinned to one core).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from cpu_pressure import print_run_footer
from gen_command import children_cpu

from corpus_gen.core.config import load_config
from corpus_gen.core.registry import get_family, schemas

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs/corpus/recall.yaml"
SUBJECTS, RELATIONS, PER_RELATION, SEQ_LEN = 16, 4, 8, 32
TOKENS = SEQ_LEN + 1  # per sample: the prompt and the answer
TARGET = 1_000_000  # tokens/s per core, whole command (issue 24)
Times = tuple[float, float]  # wall, CPU seconds


def _timed(step: Callable[[], object], cpu: Callable[[], float] = time.process_time) -> Times:
    began_cpu, began = cpu(), time.perf_counter()
    step()
    return time.perf_counter() - began, cpu() - began_cpu


def official_sampler(checkout: str, jax_path: str) -> Callable[[int, int], None]:
    """run.py's sampler: a fact table with D answers per relation drawn per relation, and
    `jit(vmap(problem.sample))` over split keys; returns draw(samples, seed)."""
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    sys.path += [jax_path, checkout]  # appended: this environment's numpy comes first
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    from task import FactRecall

    key = jr.PRNGKey(0)
    table = jnp.array([jr.choice(jr.fold_in(key, r), jnp.arange(PER_RELATION * r,
                                                                 PER_RELATION * (r + 1)),
                                 (SUBJECTS,)) for r in range(RELATIONS)]).T
    problem = FactRecall(SUBJECTS, RELATIONS, PER_RELATION * RELATIONS, SUBJECTS + RELATIONS,
                         table, SEQ_LEN, EOS_token=True)
    sample = jax.jit(lambda k, n: jax.vmap(problem.sample)(jr.split(k, n)), static_argnums=1)

    def draw(samples: int, seed: int) -> None:
        x, y = sample(jr.PRNGKey(seed), samples)
        x.block_until_ready()
        y.block_until_ready()
    return draw


def physlm_draws(samples: int, start: int) -> None:
    config = load_config(CONFIG, [f"samples={start + samples}"], schemas())
    count = sum(len(b) for b in get_family("recall").document_batches(config, start,
                                                                      start + samples))
    if count != samples:
        raise RuntimeError(f"{count} documents, not {samples}")


def physlm_gen(samples: int, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "launch.cli", "gen", str(CONFIG), f"samples={samples}",
                    "--out", str(out), "--workers", "1", "--no-progress"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    records = json.loads((out / "manifest.json").read_text())["records"]
    shutil.rmtree(out, ignore_errors=True)
    if records != samples:
        raise RuntimeError(f"the corpus holds {records} samples, not {samples}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", required=True, help="factual-recall-iclr checkout")
    ap.add_argument("--jax", required=True, help="a folder where jax[cpu] is installed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1_000_000, help="physlm's, per round")
    ap.add_argument("--official-samples", type=int, default=300_000)
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, subprocesses too
    draw = official_sampler(args.official, args.jax)
    compile_times = _timed(lambda: draw(args.official_samples, 0))
    physlm_draws(1, 0)  # warm-up: the fact table and the metas' pieces
    n, m = args.samples, args.official_samples
    times: dict[str, list[Times]] = {k: [] for k in ("official", "draws", "whole", "fixed")}
    with tempfile.TemporaryDirectory(prefix="bench_recall_") as scratch:
        out = Path(scratch) / "c"
        for r in range(args.rounds):
            steps = [("official", partial(draw, m, r + 1), time.process_time),
                     ("draws", partial(physlm_draws, n, 1 + r * n), time.process_time),
                     ("whole", partial(physlm_gen, n, out), children_cpu),
                     ("fixed", partial(physlm_gen, 1, out), children_cpu)]
            for name, step, cpu in (steps if r % 2 == 0 else steps[::-1]):
                times[name].append(_timed(step, cpu))
                print(f"  round {r + 1} {name}: {times[name][-1][1]:.2f} CPU s", file=sys.stderr,
                      flush=True)
    print("| clock | official Mtok/s | physlm draws Mtok/s | physlm whole Mtok/s | fixed s "
          "| marginal Mtok/s | draws / official | whole / official | whole >= 1M tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for which, clock in ((1, "CPU"), (0, "wall")):
        med = {k: statistics.median(t[which] for t in v) for k, v in times.items()}
        official = m * TOKENS / med["official"] / 1e6
        draws, whole = n * TOKENS / med["draws"] / 1e6, n * TOKENS / med["whole"] / 1e6
        marginal = (n - 1) * TOKENS / (med["whole"] - med["fixed"]) / 1e6
        print(f"| {clock} | {official:.2f} | {draws:.2f} | {whole:.2f} | {med['fixed']:.2f} "
              f"| {marginal:.2f} | {draws / official:.2f}x | {whole / official:.2f}x "
              f"| {'met' if whole * 1e6 >= TARGET else 'not met'} |")
    print(f"\nofficial: {m:,} samples a round, its jit compile (first call) {compile_times[1]:.2f}"
          f" CPU s apart; physlm {n:,} samples ({n * TOKENS / 1e6:.0f}M tokens) a round; "
          f"{args.rounds} rounds")
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
