"""iGSM generation speed, physlm vs the official generator, side by side in one process run.

    python bench/bench_igsm_gen.py --rounds 5 --official /tmp/igsm_official

Per preset (`med`: configs/corpus/igsm_med_pq.yaml, `hard`: igsm_hard_pq.yaml), alternating the
contestants' order from one round to the next:
- physlm end to end: `generate_corpus` with one worker, i.e. `physlm gen <config>
  problems=<--problems> --workers 1` without the interpreter's start and imports (tokenizer
  sample and training, the training shards with text, tokenization, tar writing and checksums,
  the eval sets: 500-row test, train-template and out-of-distribution op sets, and the
  manifest); problems/s counts the training problems only;
- then its parts, each timed again on its own (gen_parts.py): the shard stage (every training
  shard built again: problems, text, SentencePiece tokenization, tar members, sha256), each eval
  set, the tokenizer sample and its training;
- official: facebookresearch/iGSM's `IdGen(max_op, max_edge, perm_level=5, detail_level=0)
  .gen_prob(range(23), "pq")`, one new IdGen per problem as in its README, problem + question +
  solution text (its GPT-2 tokenization stubbed out; see official_igsm_peer.py), for
  --official-problems problems (it is ~50x slower; rates are per second either way). It runs in
  a child process: its `tools` package imports torch, whose ~150,000 objects would otherwise
  slow down every full garbage collection of the physlm contestant.
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
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from cpu_pressure import print_run_footer
from gen_parts import SAMPLE, SHARD_STAGE, TRAINING, eval_seconds, time_parts
from official_igsm_peer import PRESETS

from corpus_gen.core.config import CorpusConfig, load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family, schemas

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(__file__).resolve().parent / "official_igsm_peer.py"
ISSUE_OFFICIAL = {"med": 25.0, "hard": 16.0}  # the issue's figures for the official generator
TARGET_FACTOR = 50
WHOLE, STAGE, OFFICIAL = ("physlm end to end (gen command)", "physlm shard stage",
                          "official (text + solution)")


def config_for(difficulty: str, problems: int) -> CorpusConfig:
    return load_config(ROOT / f"configs/corpus/igsm_{difficulty}_pq.yaml",
                       [f"problems={problems}"], schemas())


def physlm_end_to_end(config: CorpusConfig, scratch: Path) -> dict[str, float]:
    """Seconds of the whole gen run ("whole") and of its parts, and its training problems."""
    out = scratch / "gen"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    manifest = generate_corpus(config, out, workers=1, progress=False, log=lambda *_: None)
    times = {"whole": time.perf_counter() - began, "problems": manifest["records"]}
    times.update(time_parts(config, out, manifest))
    shutil.rmtree(out, ignore_errors=True)
    return times


def run_official(checkout: str, problems: int, difficulty: str, seed: int) -> dict:
    """official_igsm_peer.py's result, run in a child process."""
    done = subprocess.run([sys.executable, str(PEER), "--checkout", checkout, "--problems",
                           str(problems), "--difficulty", difficulty, "--seed", str(seed)],
                          check=True, capture_output=True, text=True)
    result = json.loads(done.stdout)
    for key in ("ops", "steps"):
        result[key] = Counter({int(k): v for k, v in result[key].items()})
    return result


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


def print_rates(rows: list[tuple[str, str, float, int]]) -> None:
    print("| preset | what | problems/s | rounds |")
    print("|---|---|---:|---:|")
    for difficulty, name, rate, count in rows:
        print(f"| {difficulty} | {name} | {rate:,.1f} | {count} |")
    official_rates = {d: r for d, n, r, _ in rows if n == OFFICIAL}
    if not official_rates:
        return
    print(f"\n| preset | physlm end to end / official | physlm shard stage / official "
          f"| end to end / issue's official figure | target (>= {TARGET_FACTOR}x) |")
    print("|---|---:|---:|---:|---|")
    for difficulty, theirs in official_rates.items():
        mine = {n: r for d, n, r, _ in rows if d == difficulty}
        whole, issue = mine[WHOLE], ISSUE_OFFICIAL[difficulty]
        print(f"| {difficulty} | {whole / theirs:.1f}x | {mine[STAGE] / theirs:.1f}x "
              f"| {whole / issue:.1f}x ({issue:g}/s) "
              f"| {'met' if whole >= TARGET_FACTOR * theirs else 'not met'} here, "
              f"{'met' if whole >= TARGET_FACTOR * issue else 'not met'} vs "
              f"{TARGET_FACTOR * issue:,.0f}/s |")


def print_split(seconds: dict[str, dict[str, float]]) -> None:
    """The whole command's parts, seconds (medians over rounds)."""
    for difficulty, t in seconds.items():
        sets = [k for k in t if k.startswith("eval ")]
        print(f"\n{difficulty}: the whole command and its parts, seconds (median; each part "
              "timed again on its own)\n")
        print("| part | seconds | share of the whole |")
        print("|---|---:|---:|")
        parts = [("whole command", t["whole"]),
                 ("shard stage (all training shards)", t[SHARD_STAGE]),
                 ("tokenizer sample", t[SAMPLE]), ("tokenizer training", t[TRAINING]),
                 (f"eval sets ({len(sets)}), together", t["eval"])]
        parts += [(f"- {k[5:]}", t[k]) for k in sets]
        for name, value in parts:
            print(f"| {name} | {value:.2f} | {100 * value / t['whole']:.0f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=20000,
                        help="physlm training problems per gen run")
    parser.add_argument("--official-problems", type=int, default=500,
                        help="official problems per round and preset")
    parser.add_argument("--hist-problems", type=int, default=10000,
                        help="physlm problems for the histograms")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--difficulties", default="med,hard")
    parser.add_argument("--official", help="checkout of facebookresearch/iGSM (optional)")
    parser.add_argument("--plot", help="write the histograms to this PNG (needs matplotlib)")
    args = parser.parse_args()
    difficulties = [d for d in args.difficulties.split(",") if d]

    rows: list[tuple[str, str, float, int]] = []
    seconds: dict[str, dict[str, float]] = {}
    hists: dict[str, tuple[dict[str, Counter[int]], dict[str, Counter[int]]]] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        for difficulty in difficulties:
            config = config_for(difficulty, args.problems)
            rates: dict[str, list[float]] = {}
            parts: dict[str, list[float]] = {}
            official: dict[str, Counter[int]] = {"op": Counter(), "steps": Counter()}
            for round_ in range(args.rounds):
                contestants = ["physlm", "official"] if args.official else ["physlm"]
                for contestant in contestants if round_ % 2 == 0 else contestants[::-1]:
                    if contestant == "physlm":
                        times = physlm_end_to_end(config, scratch)
                        rates.setdefault(WHOLE, []).append(times["problems"] / times["whole"])
                        rates.setdefault(STAGE, []).append(times["problems"] / times[SHARD_STAGE])
                        times["eval"] = eval_seconds(times)
                        for part, value in times.items():
                            parts.setdefault(part, []).append(value)
                        continue
                    peer = run_official(args.official, args.official_problems, difficulty,
                                        round_)
                    rates.setdefault(OFFICIAL, []).append(peer["problems"] / peer["seconds"])
                    official["op"].update(peer["ops"])
                    official["steps"].update(peer["steps"])
                print(f"{difficulty} round {round_ + 1}: "
                      + ", ".join(f"{k} {v[-1]:,.1f}/s" for k, v in rates.items()),
                      file=sys.stderr)
            for name, values in rates.items():
                rows.append((difficulty, name, statistics.median(values), len(values)))
            seconds[difficulty] = {k: statistics.median(v) for k, v in parts.items()}
            if args.official:
                hists[difficulty] = (official, physlm_histograms(
                    config_for(difficulty, args.hist_problems), args.hist_problems))

    print(f"iGSM generation, physlm {args.problems:,} problems per gen run, official "
          f"{args.official_problems:,} per round, one core, median of {args.rounds} rounds\n")
    print_rates(rows)
    print_split(seconds)
    for difficulty, (official, ours) in hists.items():
        print_histograms(difficulty, official, ours)
    if args.plot and hists:
        plot(args.plot, hists)
        print(f"\nhistograms plotted to {args.plot}")
    print()
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
