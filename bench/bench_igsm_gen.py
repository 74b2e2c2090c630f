"""iGSM generation speed, physlm vs the official generator, side by side in one process run.

    python bench/bench_igsm_gen.py --rounds 3 --official /tmp/igsm_official

Per preset (`med`: configs/corpus/igsm_med_pq.yaml, `hard`: igsm_hard_pq.yaml), alternating the
contestants' order from one round to the next:
- physlm end to end: `generate_corpus` with one worker, i.e. `physlm gen <config>
  problems=<--problems> --workers 1` (tokenizer sample and training, the training shards with
  text, tokenization, tar writing and checksums, the eval sets: 500-row test, train-template and
  out-of-distribution op sets, and the manifest); problems/s counts the training problems only;
- physlm shard stage: the first training shard (`records_per_shard` problems) built again:
  problems, text, SentencePiece tokenization, tar members, sha256;
- official: facebookresearch/iGSM's `IdGen(max_op, max_edge, perm_level=5, detail_level=0)
  .gen_prob(range(23), "pq")`, one new IdGen per problem as in its README, problem + question +
  solution text (its GPT-2 tokenization stubbed out; see official_igsm_peer.py), for
  --official-problems problems (it is ~50x slower; rates are per second either way).
Rates are problems per second on one core; the tables report medians over rounds.

Then the op-count histograms: the official `n_op` of every official problem generated above,
and physlm's record `op` over --hist-problems training problems, beside the exact "light" law
min(U, U') on [1, max_op] both draw their op targets from. Both count operations the same way
(each solution sentence costs its arithmetic operations, at least 1); the solution-sentence
counts of both are shown too.
--plot FILE.png draws the histograms (needs matplotlib).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from official_igsm_peer import PRESETS, run_official_igsm

from corpus_gen.core.config import CorpusConfig, load_config
from corpus_gen.core.generate import Task, _build_shard, generate_corpus
from corpus_gen.core.registry import get_family, schemas

ROOT = Path(__file__).resolve().parent.parent
DIFFICULTIES = ("med", "hard")
ISSUE_OFFICIAL = {"med": 25.0, "hard": 16.0}  # the issue's figures for the official generator
TARGET_FACTOR = 50


def config_for(difficulty: str, problems: int) -> CorpusConfig:
    return load_config(ROOT / f"configs/corpus/igsm_{difficulty}_pq.yaml",
                       [f"problems={problems}"], schemas())


def physlm_end_to_end(config: CorpusConfig, scratch: Path) -> tuple[float, float, int, int]:
    """(whole gen seconds, training problems, first-shard rebuild seconds, its problems)."""
    out = scratch / "gen"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    manifest = generate_corpus(config, out, workers=1, progress=False, log=lambda *_: None)
    whole = time.perf_counter() - began
    first = manifest["shards"][0]
    task = Task(config, str(out), "bench", first["name"] + ".bench", first["start"],
                first["stop"])
    began = time.perf_counter()
    _build_shard(task)
    shard = time.perf_counter() - began
    shutil.rmtree(out, ignore_errors=True)
    return whole, manifest["records"], shard, first["stop"] - first["start"]


def physlm_histograms(config: CorpusConfig, problems: int) -> dict[str, Counter[int]]:
    """physlm's training records: op and solution steps."""
    ops: Counter[int] = Counter()
    steps: Counter[int] = Counter()
    for record in get_family("igsm").records(config, 0, problems):
        ops[record.meta["op"]] += 1
        steps[len(record.meta["steps"])] += 1
    return {"op": ops, "steps": steps}


def light_law(max_op: int) -> dict[int, float]:
    """P(min(U, U') = k), U, U' uniform on [1, max_op]."""
    return {k: (2 * (max_op - k) + 1) / max_op**2 for k in range(1, max_op + 1)}


def share(counter: Counter[int], key: int) -> str:
    total = sum(counter.values())
    if not counter[key]:
        return "-"
    return f"{100 * counter[key] / total:.1f}" if counter[key] >= total / 2000 else "<0.1"


def mean(counter: Counter[int]) -> float:
    return sum(k * v for k, v in counter.items()) / sum(counter.values())


def print_histograms(difficulty: str, official: dict[str, Counter[int]],
                     ours: dict[str, Counter[int]]) -> None:
    max_op = PRESETS[difficulty][0]
    law = light_law(max_op)
    n_off, n_ours = sum(official["op"].values()), sum(ours["op"].values())
    keys = sorted(set(official["op"]) | set(ours["op"]) | set(law))
    print(f"\n{difficulty}: op-count histogram, % of problems (official: {n_off:,} problems, "
          f"physlm: {n_ours:,})\n")
    print("| op | light law | official `n_op` | physlm `op` |")
    print("|---:|---:|---:|---:|")
    for k in keys:
        print(f"| {k} | {100 * law[k]:.1f} |" if k in law else f"| {k} | - |", end="")
        print(f" {share(official['op'], k)} | {share(ours['op'], k)} |")
    print(f"| mean | {sum(k * p for k, p in law.items()):.2f} | {mean(official['op']):.2f} "
          f"| {mean(ours['op']):.2f} |")
    steps = sorted(set(official["steps"]) | set(ours["steps"]))
    print(f"\n{difficulty}: solution sentences per problem, % of problems\n")
    print("| sentences | official | physlm |")
    print("|---:|---:|---:|")
    for k in steps:
        print(f"| {k} | {share(official['steps'], k)} | {share(ours['steps'], k)} |")
    print(f"| mean | {mean(official['steps']):.2f} | {mean(ours['steps']):.2f} |")


def plot(path: str, hists: dict[str, tuple[dict[str, Counter[int]], dict[str, Counter[int]]]]
         ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(hists), figsize=(6 * len(hists), 7), squeeze=False)
    for col, (difficulty, (official, ours)) in enumerate(hists.items()):
        law = light_law(PRESETS[difficulty][0])
        for row, (title, series) in enumerate((
            ("op count", [("official n_op", official["op"]), ("physlm op", ours["op"])]),
            ("solution sentences", [("official", official["steps"]),
                                    ("physlm", ours["steps"])]),
        )):
            ax = axes[row][col]
            width = 0.8 / len(series)
            for n, (label, counter) in enumerate(series):
                total = sum(counter.values())
                keys = sorted(counter)
                ax.bar([k - 0.4 + width * (n + 0.5) for k in keys],
                       [100 * counter[k] / total for k in keys], width, label=label)
            if row == 0:
                ax.plot(list(law), [100 * p for p in law.values()], "k.-", label="light law")
            ax.set_title(f"{difficulty}: {title}")
            ax.set_ylabel("% of problems")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def machine_load() -> str:
    load = os.getloadavg()
    return f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=100000,
                        help="physlm training problems per gen run (the configs' default)")
    parser.add_argument("--official-problems", type=int, default=500,
                        help="official problems per round and preset")
    parser.add_argument("--hist-problems", type=int, default=10000,
                        help="physlm problems for the histograms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--difficulties", default="med,hard")
    parser.add_argument("--official", help="checkout of facebookresearch/iGSM (optional)")
    parser.add_argument("--plot", help="write the histograms to this PNG (needs matplotlib)")
    args = parser.parse_args()
    difficulties = [d for d in args.difficulties.split(",") if d]

    print(f"start: {machine_load()}", file=sys.stderr)
    rows: list[tuple[str, str, float, int]] = []
    hists: dict[str, tuple[dict[str, Counter[int]], dict[str, Counter[int]]]] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        for difficulty in difficulties:
            config = config_for(difficulty, args.problems)
            rates: dict[str, list[float]] = {}
            official: dict[str, Counter[int]] = {"op": Counter(), "steps": Counter()}

            def ours(config: CorpusConfig = config, rates: dict = rates) -> None:
                whole, problems, shard, shard_problems = physlm_end_to_end(config, scratch)
                rates.setdefault("physlm end to end (gen command)", []).append(problems / whole)
                rates.setdefault("physlm shard stage (first shard)", []).append(
                    shard_problems / shard)

            def theirs(difficulty: str = difficulty, rates: dict = rates,
                       official: dict = official, seed: int = 0) -> None:
                peer = run_official_igsm(args.official, args.official_problems, difficulty,
                                         seed=seed)
                rates.setdefault("official (text + solution)", []).append(
                    peer["problems"] / peer["seconds"])
                official["op"].update(peer["ops"])
                official["steps"].update(peer["steps"])

            for round_ in range(args.rounds):
                order = [ours, theirs] if round_ % 2 == 0 else [theirs, ours]
                for contestant in order:
                    if contestant is theirs:
                        if args.official:
                            theirs(seed=round_)
                    else:
                        contestant()
                print(f"{difficulty} round {round_ + 1}: "
                      + ", ".join(f"{k} {v[-1]:,.1f}/s" for k, v in rates.items())
                      + f"; {machine_load()}", file=sys.stderr)
            for name, values in rates.items():
                rows.append((difficulty, name, statistics.median(values), len(values)))
            if args.official:
                hists[difficulty] = (official, physlm_histograms(
                    config_for(difficulty, args.hist_problems), args.hist_problems))
    print(f"end: {machine_load()}", file=sys.stderr)

    print(f"iGSM generation, physlm {args.problems:,} problems per gen run, official "
          f"{args.official_problems:,} per round, one core, median of {args.rounds} rounds\n")
    print("| preset | what | problems/s | rounds |")
    print("|---|---|---:|---:|")
    for difficulty, name, rate, count in rows:
        print(f"| {difficulty} | {name} | {rate:,.1f} | {count} |")
    official_rates = {d: r for d, n, r, _ in rows if n.startswith("official")}
    if official_rates:
        print(f"\n| preset | physlm end to end / official | physlm shard stage / official "
              f"| end to end / issue's official figure | target (>= {TARGET_FACTOR}x) |")
        print("|---|---:|---:|---:|---|")
        for difficulty, theirs_rate in official_rates.items():
            mine = {n: r for d, n, r, _ in rows if d == difficulty}
            whole = mine["physlm end to end (gen command)"]
            shard = mine["physlm shard stage (first shard)"]
            issue = ISSUE_OFFICIAL[difficulty]
            print(f"| {difficulty} | {whole / theirs_rate:.1f}x | {shard / theirs_rate:.1f}x "
                  f"| {whole / issue:.1f}x ({issue:g}/s) "
                  f"| {'met' if whole >= TARGET_FACTOR * theirs_rate else 'not met'} here, "
                  f"{'met' if whole >= TARGET_FACTOR * issue else 'not met'} vs "
                  f"{TARGET_FACTOR * issue:,.0f}/s |")
    for difficulty, (official, ours) in hists.items():
        print_histograms(difficulty, official, ours)
    if args.plot and hists:
        plot(args.plot, hists)
        print(f"\nhistograms plotted to {args.plot}")


if __name__ == "__main__":
    main()
