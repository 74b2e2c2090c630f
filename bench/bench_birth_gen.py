"""birth generation speed: physlm's birth corpus vs the official sampler of "Birth of a
Transformer" (facebookresearch/transformer-birth, `ihead_data.Dataset.gen_seq`), side by side in
one process run.

    python bench/bench_birth_gen.py --official /tmp/official/transformer-birth --rounds 3

The official checkout's `data/meta.pkl` holds the counts physlm ships (equal count for count).
Per round, alternating the contestants' order from one round to the next:
- official: `gen_seq` in this process, on one core, for --official-samples sequences of 256
  (+1) tokens with the paper's settings (K 5 fixed triggers, uniform outputs); CPU seconds by
  time.process_time;
- physlm end to end: the whole `physlm gen configs/corpus/birth.yaml samples=<n> --workers 1
  --no-progress` command as a subprocess, from its start to its exit (interpreter start and
  imports, every training shard: tokens, loss masks, JSON, tar members, sha256; the eval set,
  vocab.json, datasheet, manifest); CPU seconds of the child;
- physlm fixed cost: the same command with samples=1, so the marginal rate
  (n - 1) / (whole - fixed) is the training stream's alone.
Rates are training tokens per CPU second (wall seconds beside them); medians over rounds. Then
the official sampler's defects, each confirmed by running it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from cpu_pressure import print_run_footer
from gen_command import ROOT, timed_gen

SEQ_LEN, TRIGGERS = 256, 5
TARGET = 1_000_000  # tokens/s per core, the whole command (issue 24)


@contextlib.contextmanager
def official_checkout(checkout: str) -> Iterator[object]:
    """The official `ihead_data` module, importable and run from its checkout (it reads
    data/meta.pkl relative to the working directory)."""
    here = os.getcwd()
    sys.path.insert(0, checkout)
    os.chdir(checkout)
    try:
        import ihead_data
        yield ihead_data
    finally:
        os.chdir(here)
        sys.path.remove(checkout)


def official(module, samples: int, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds of `samples` official sequences."""
    dataset = module.Dataset(module.DataArgs(k=TRIGGERS, seq_length=SEQ_LEN,
                                             fixed_special_toks=True))
    rng = np.random.default_rng([seed, 0])
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(samples):
        dataset.gen_seq(rng)
    return time.perf_counter() - wall, time.process_time() - cpu


def physlm_gen(samples: int, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole gen command."""
    wall, cpu, manifest = timed_gen(ROOT / "configs/corpus/birth.yaml",
                                    [f"samples={samples}", f"seq_len={SEQ_LEN}",
                                     f"triggers={TRIGGERS}"], out)
    if manifest["tokens"] != samples * SEQ_LEN:
        raise RuntimeError(f"the corpus holds {manifest['tokens']} tokens, not "
                           f"{samples * SEQ_LEN}")
    return wall, cpu


def defects(module) -> dict[str, str]:
    """The official sampler's defects, each shown by running it."""
    found = {}
    with contextlib.chdir(tempfile.gettempdir()):
        try:
            module.Dataset(module.DataArgs(k=TRIGGERS))
        except FileNotFoundError as exc:
            found["cwd"] = (f"Dataset() outside its checkout: FileNotFoundError ({exc.filename}): "
                            "the counts are read relative to the working directory")
    # held-out outputs with no_repeat: the trigger is removed from the pool before the pool is
    # cut at 48, so the cut moves by one and a held-out id (48, 'j') becomes a training output
    dataset = module.Dataset(module.DataArgs(k=TRIGGERS, seq_length=64, no_repeat=True,
                                             fixed_special_toks=True), train_test="train")
    rng = np.random.default_rng(0)
    leaked = [{(int(a), int(b)) for a, b in zip(seq, seq[1:])
               if a in dataset.idxs and b >= dataset.n_train_toks}
              for seq, _ in (dataset.gen_seq(rng) for _ in range(1000))]
    pairs = sorted(set().union(*leaked))
    found["held_out_leak"] = (f"train_test='train' with no_repeat: {sum(map(bool, leaked))} of "
                              "1000 sequences have a trigger followed by a held-out id (>= "
                              f"{dataset.n_train_toks}); (trigger, output) pairs: {pairs}")
    return found


def run(module, rounds: int, ours: int, theirs: int, scratch: Path) -> dict[str, list]:
    times: dict[str, list[tuple[float, float]]] = {"official": [], "whole": [], "fixed": []}
    for r in range(rounds):
        steps = [("official", lambda seed=r: official(module, theirs, seed)),
                 ("whole", lambda: physlm_gen(ours, scratch / "birth")),
                 ("fixed", lambda: physlm_gen(1, scratch / "birth"))]
        for name, step in (steps if r % 2 == 0 else steps[::-1]):
            times[name].append(step())
            print(f"  round {r + 1} {name}: {times[name][-1][1]:.2f} CPU s", file=sys.stderr,
                  flush=True)
    return times


def print_rates(times: dict[str, list], ours: int, theirs: int) -> None:
    print("| seconds | official tokens/s | physlm whole command tokens/s | physlm fixed cost s "
          "| physlm marginal tokens/s | whole / official | marginal / official "
          f"| target (>= {TARGET:,} whole) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for which, label in ((1, "CPU"), (0, "wall")):
        official_s, whole_s, fixed_s = (statistics.median(t[which] for t in times[name])
                                        for name in ("official", "whole", "fixed"))
        off = theirs * (SEQ_LEN + 1) / official_s  # it draws seq_length + 1 tokens
        whole = ours * SEQ_LEN / whole_s
        marginal = (ours - 1) * SEQ_LEN / (whole_s - fixed_s)
        met = "met" if whole >= TARGET else "not met"
        print(f"| {label} | {off:,.0f} | {whole:,.0f} | {fixed_s:.2f} | {marginal:,.0f} "
              f"| {whole / off:,.0f}x | {marginal / off:,.0f}x | {met} |")
    print(f"\nphyslm {ours:,} sequences ({ours * SEQ_LEN:,} tokens), official {theirs:,}; "
          f"T {SEQ_LEN}, K {TRIGGERS} fixed triggers, uniform outputs; "
          f"{len(times['whole'])} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", required=True, help="transformer-birth checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=100_000, help="physlm sequences")
    ap.add_argument("--official-samples", type=int, default=300)
    args = ap.parse_args()
    with official_checkout(args.official) as module, \
            tempfile.TemporaryDirectory(prefix="bench_birth_") as scratch:
        times = run(module, args.rounds, args.samples, args.official_samples, Path(scratch))
        print_rates(times, args.samples, args.official_samples)
        print("\nThe official sampler's defects, confirmed by running it:\n")
        print(json.dumps(defects(module), indent=1))
    print()
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
