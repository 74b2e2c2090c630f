"""Part 4.1 generation speed: physlm's depo, brevo and mano corpora vs the official generators,
side by side in one process run.

    python bench/bench_p41_gen.py --official /tmp/physlm4 --rounds 3

(the checkout: see official_p41_peer.py). Per case (the paper's largest training settings:
depo1 N 375, depo2 N 125, brevo1 N 110, brevo2 N 50, mano L 10), alternating the contestants'
order from one round to the next:
- official: its training sampler (official_p41_peer.py), in this process, on one core, for
  --official-samples[case] samples;
- physlm end to end: the whole `physlm gen <config> samples=<n> --workers 1` command as a
  subprocess, timed from its start to its exit: interpreter start and imports, every training
  shard (documents, token ids, loss masks, tar members, sha256), the eval sets, vocab.json,
  datasheet and manifest; samples/s counts the training samples only;
- physlm fixed cost: the same command with samples=1 (start-up, eval sets, manifest), so the
  marginal rate (n - 1) / (whole - fixed) is the rate of the training stream alone.
Rates are samples per second; the tables report medians over rounds, and CPU seconds beside the
wall ones (the machine may be shared: CPU rates are the steadier). Then the official scripts'
defects, each confirmed by running it (official_p41_peer.defects).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import official_p41_peer as peer
from cpu_pressure import print_run_footer
from gen_command import ROOT, alternating_rounds, parse_cases, timed_gen

TARGET_FACTOR = 20
# case -> (corpus config, its size keys, physlm training samples, official samples)
CASES: dict[str, tuple[str, tuple[str, ...], int, int]] = {
    "depo1": ("depo1.yaml", ("max_n=375", "max_k=8"), 20_000, 100),
    "depo2": ("depo2.yaml", ("max_n=125", "max_k=16"), 40_000, 300),
    "brevo1": ("brevo1.yaml", ("max_n=110",), 40_000, 300),
    "brevo2": ("brevo2.yaml", ("max_n=50",), 40_000, 300),
    "mano": ("mano.yaml", ("max_ops=10",), 1_000_000, 5_000),
}


def physlm_gen(case: str, samples: int, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole gen command."""
    config, sizes, _, _ = CASES[case]
    wall, cpu, manifest = timed_gen(ROOT / "configs/corpus" / config,
                                    [*sizes, f"samples={samples}"], scratch / case)
    if manifest["records"] != samples:
        raise RuntimeError(f"{case}: the corpus holds {manifest['records']} samples, not "
                           f"{samples}")
    return wall, cpu


def official(case: str, checkout: str, samples: int, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds of `samples` official training samples."""
    return tuple(peer.sample(case, checkout, samples, seed)["seconds"])


def run_case(case: str, checkout: str, rounds: int, scale: float, scratch: Path
             ) -> dict[str, list[tuple[float, float]]]:
    _, _, ours, theirs = CASES[case]
    ours, theirs = max(2, round(ours * scale)), max(1, round(theirs * scale))
    times = alternating_rounds(case, rounds, [
        ("official", lambda r: official(case, checkout, theirs, r)),
        ("whole", lambda r: physlm_gen(case, ours, scratch)),
        ("fixed", lambda r: physlm_gen(case, 1, scratch))])
    return {**times, "sizes": [(ours, theirs)]}


def _median(pairs: list[tuple[float, float]], which: int) -> float:
    return statistics.median(p[which] for p in pairs)


def print_rates(results: dict[str, dict]) -> None:
    print("| case | official samples/s | physlm whole command samples/s | physlm fixed cost s "
          "| physlm marginal samples/s | whole / official | marginal / official "
          f"| target (>= {TARGET_FACTOR}x, whole) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for which, label in ((0, "wall"), (1, "CPU")):
        for case, t in results.items():
            ours, theirs = t["sizes"][0]
            off = theirs / _median(t["official"], which)
            whole_s, fixed_s = _median(t["whole"], which), _median(t["fixed"], which)
            whole = ours / whole_s
            marginal = (ours - 1) / (whole_s - fixed_s) if whole_s > fixed_s else float("inf")
            met = "met" if whole >= TARGET_FACTOR * off else "not met"
            print(f"| {case} ({label}) | {off:,.1f} | {whole:,.1f} | {fixed_s:.2f} "
                  f"| {marginal:,.1f} | {whole / off:.1f}x | {marginal / off:.1f}x | {met} |")
    print()
    for case, t in results.items():
        ours, theirs = t["sizes"][0]
        print(f"{case}: physlm {ours:,} samples ({' '.join(CASES[case][1])}), official "
              f"{theirs:,}, {len(t['whole'])} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", required=True, help="PhysicsLM4 checkout (see "
                                                      "official_p41_peer.py)")
    args, cases = parse_cases(ap, CASES)
    with tempfile.TemporaryDirectory(prefix="bench_p41_") as scratch:
        results = {case: run_case(case, args.official, args.rounds, args.scale, Path(scratch))
                   for case in cases}
    print_rates(results)
    print("\nThe official scripts' defects, confirmed by running them:\n")
    print(json.dumps(peer.defects(args.official), indent=1))
    print()
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
