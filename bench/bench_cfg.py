"""CFG sampling, membership and next-token distribution: physlm vs the official Lano-cfg code of
facebookresearch/PhysicsLM4, side by side in one process run.

    python bench/bench_cfg.py --rounds 5 --official /tmp/physlm4

(--official: a PhysicsLM4 checkout or its data-synthetic-pretrain/Lano-cfg folder; the
environment variable PHYSLM4_CHECKOUT stands in for it; without either only physlm is timed.)

One thread everywhere (OMP/OpenBLAS/MKL/numba thread counts set to 1 before numpy loads, and
inherited by the official child process). Grammar cfg3f (physlm's `load_grammar("cfg3f")`, the
official `configs/cfg3f.json`: the same table).

1. Sampling, strings/s and tokens/s (terminals, no BOS) on one core:
   - physlm sampler: `sample(grammar, key, index)` in batches of 512 strings (BATCH), the
     training stream's key, as `corpus_gen.cfg.family.batches` draws them;
   - physlm `family.batches`: the same draw plus what the corpus writer consumes (unit ids with
     BOS, one JSON meta of rule choices per string);
   - official: `generate_onedata_pure(random.Random(round))` per string, in a child process
     (official_cfg_peer.py; its import of torch would otherwise burden physlm's garbage
     collections), --official-samples strings per round (rates are per second either way).
   Rounds alternate the order. Every official string of the first round goes through physlm's
   membership DP (all must be members).
2. Membership DP: physlm `membership(grammar, terminals)` over --parse-strings strings of the
   held-out stream (cfg_test's key), per round; and, side by side on the --official-strings
   strings of that set whose lengths are nearest --length, physlm's membership and `parse`
   (membership plus one derivation) against the official `solve_dp_noneq_fast` (which decides
   membership, builds one parse and counts parses). The official DP runs once per string (it
   takes seconds); physlm's figure per string is the median over rounds. Agreement: the same
   strings and --mutants single-token mutations of each (a position's token replaced by another
   terminal, drawn at random; half of them ones physlm rejects, half ones it still accepts) go
   through both DPs.
3. The true next-token distribution along a whole string: physlm `next_token_distribution`
   (float64, spans scaled by token_scale ** length) against the official
   `solve_dp_prob_highprecision` (Decimal, 100 digits), seconds per string on the same member
   strings; agreement: the largest absolute difference over every row and column, and P(string)
   (physlm `root_probability`, official inside chart) relative difference.
physlm's numba kernels are compiled (or loaded from numba's disk cache) by a warm-up call on a
short string before any timing; that first call's seconds are printed apart, never counted.
Every figure is given per CPU second of the timed process (time.process_time; the official's
measured inside its child, its import and grammar load excluded) and per wall second beside it:
on a shared machine the wall clock also counts other jobs' turns on the cores.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from cpu_pressure import cpu_stall_us, print_run_footer  # noqa: E402
from official_cfg_peer import ENV  # noqa: E402

from corpus_gen.cfg import family  # noqa: E402
from corpus_gen.cfg.grammar import Grammar, load_grammar  # noqa: E402
from corpus_gen.cfg.parse import (  # noqa: E402
    membership,
    next_token_distribution,
    parse,
    root_probability,
)
from corpus_gen.cfg.sample import sample  # noqa: E402
from corpus_gen.core.config import load_config  # noqa: E402
from corpus_gen.core.records import BATCH  # noqa: E402
from corpus_gen.core.registry import schemas  # noqa: E402
from corpus_gen.core.seeding import derive_key  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(__file__).resolve().parent / "official_cfg_peer.py"
SAMPLER, BATCHES, OFFICIAL = ("physlm sampler (batches of 512)",
                              "physlm family.batches (ids + metas)", "official")
TARGET_SAMPLING = 5.0  # ours / official strings per second
TARGET_MEMBERSHIP = 100.0  # physlm membership strings per second per core


Seconds = tuple[float, float]  # (wall, CPU of this process)


def now() -> Seconds:
    return time.perf_counter(), time.process_time()


def since(began: Seconds) -> Seconds:
    return time.perf_counter() - began[0], time.process_time() - began[1]


def median2(values: list[Seconds]) -> Seconds:
    """Medians of wall and CPU, each on its own."""
    return statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)


def run_peer(checkout: str, task: str, scratch: Path, strings: list[list[int]] | None = None,
             n: int = 0, seed: int = 0) -> dict:
    """official_cfg_peer.py's result, run in a child process ("seconds": (wall, CPU))."""
    cmd = [sys.executable, str(PEER), "--checkout", checkout, task, "--seed", str(seed),
           "--strings", str(n), "--output", str(scratch / "peer_out.json")]
    if strings is not None:
        (scratch / "peer_in.json").write_text(json.dumps(strings))
        cmd += ["--input", str(scratch / "peer_in.json")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads((scratch / "peer_out.json").read_text())


def time_sampler(grammar: Grammar, key: int, start: int, batches: int) -> tuple[Seconds, int, int]:
    """Seconds, strings and tokens of `batches` batches of the sampler from string `start`."""
    strings = tokens = 0
    began = now()
    for b in range(batches):
        lo = start + b * BATCH
        drawn = sample(grammar, key, np.arange(lo, lo + BATCH))
        strings += len(drawn)
        tokens += len(drawn.terminals)
    return since(began), strings, tokens


def time_family_batches(config, start: int, batches: int) -> tuple[Seconds, int, int]:
    strings = tokens = 0
    began = now()
    for batch in family.batches(config, start, start + batches * BATCH):
        strings += len(batch.metas)
        tokens += len(batch.ids) - len(batch.metas)  # without the BOS of each string
    return since(began), strings, tokens


def median_seconds(fn, rounds: int) -> Seconds:
    times = []
    for _ in range(rounds):
        began = now()
        fn()
        times.append(since(began))
    return median2(times)


def mutants(grammar: Grammar, strings: list[list[int]], per_string: int, seed: int
            ) -> list[list[int]]:
    """Single-token mutations of each string (a position's token replaced by another terminal),
    drawn in random order; half of each string's (rounded up) are ones physlm's DP rejects, the
    rest ones it still accepts (~10% of cfg3f's mutations stay in the language), so that both
    verdicts are put to the official DP."""
    rng = random.Random(seed)
    result = []
    for string in strings:
        edits = [(p, r) for p in range(len(string)) for r in range(1, grammar.terminals)]
        rng.shuffle(edits)
        wanted = {False: (per_string + 1) // 2, True: per_string // 2}
        for p, r in edits:
            if not any(wanted.values()):
                break
            mutated = list(string)
            mutated[p] = (mutated[p] + r) % grammar.terminals
            verdict = membership(grammar, mutated).member
            if wanted[verdict]:
                wanted[verdict] -= 1
                result.append(mutated)
    return result


def nearest(strings: list[np.ndarray], length: int, count: int) -> list[int]:
    """Indices of the `count` strings whose lengths are nearest `length` (ties: first)."""
    order = sorted(range(len(strings)), key=lambda i: (abs(len(strings[i]) - length), i))
    return sorted(order[:count])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=100, help="physlm batches of 512 per round")
    ap.add_argument("--official-samples", type=int, default=2000,
                    help="official strings sampled per round")
    ap.add_argument("--parse-strings", type=int, default=200,
                    help="held-out strings for physlm's membership rate")
    ap.add_argument("--official-strings", type=int, default=4,
                    help="strings (nearest --length) for the side-by-side DPs")
    ap.add_argument("--length", type=int, default=250)
    ap.add_argument("--mutants", type=int, default=4,
                    help="single-token mutations per side-by-side string (half rejected by "
                         "physlm, half still accepted)")
    ap.add_argument("--official", default=os.environ.get(ENV),
                    help=f"PhysicsLM4 checkout or its Lano-cfg folder (default: ${ENV})")
    args = ap.parse_args()
    stall0, wall0 = cpu_stall_us(), time.perf_counter()

    config = load_config(ROOT / "configs/corpus/cfg3f.yaml", [], schemas())
    grammar = load_grammar("cfg3f")
    assert config.load_grammar() == grammar
    train_key = derive_key(config.seed, "cfg", "train")
    test_key = derive_key(config.seed, "cfg", "test")

    # warm-up: numpy paths and the numba kernels (compiled, or loaded from numba's disk cache)
    began = time.perf_counter()
    short = sample(grammar, test_key, np.arange(10 ** 6, 10 ** 6 + 64))
    warm = min(range(len(short)), key=lambda i: len(short.string(i)))
    membership(grammar, short.string(warm))
    next_token_distribution(grammar, short.string(warm))
    parse(grammar, short.string(warm))
    first_call = time.perf_counter() - began
    time_sampler(grammar, train_key, 0, 2)
    time_family_batches(config, 0, 2)

    with tempfile.TemporaryDirectory(prefix="bench_cfg_") as scratch_name:
        scratch = Path(scratch_name)

        # 1. sampling: (strings/s, tokens/s) per CPU second and per wall second
        rates: dict[str, list[tuple[float, float, float, float]]] = {}
        official_strings: list[list[int]] = []
        official_lengths: list[int] = []
        for round_ in range(args.rounds):
            contestants = [SAMPLER, BATCHES] + ([OFFICIAL] if args.official else [])
            for who in contestants if round_ % 2 == 0 else contestants[::-1]:
                start = (round_ + 1) * args.batches * BATCH
                if who == SAMPLER:
                    seconds, strings, tokens = time_sampler(grammar, train_key, start,
                                                            args.batches)
                elif who == BATCHES:
                    seconds, strings, tokens = time_family_batches(config, start, args.batches)
                else:
                    peer = run_peer(args.official, "sample", scratch, n=args.official_samples,
                                    seed=round_)
                    seconds, strings, tokens = (peer["seconds"], len(peer["strings"]),
                                                peer["tokens"])
                    official_lengths += [len(s) for s in peer["strings"]]
                    if round_ == 0:
                        official_strings = peer["strings"]
                wall, cpu = seconds
                rates.setdefault(who, []).append((strings / cpu, tokens / cpu,
                                                  strings / wall, tokens / wall))
            print(f"sampling round {round_ + 1} (strings per CPU s): " + ", ".join(
                f"{k} {v[-1][0]:,.0f}" for k, v in rates.items()), file=sys.stderr)
        drawn = sample(grammar, train_key, np.arange(args.batches * BATCH))
        ours_lengths = np.diff(drawn.offsets).tolist()
        accepted = sum(membership(grammar, s).member for s in official_strings)

        # 2. membership: physlm's rate over held-out strings
        held = sample(grammar, test_key, np.arange(args.parse_strings))
        held_strings = [held.string(i) for i in range(len(held))]
        held_tokens = sum(map(len, held_strings))
        member_seconds = []
        for _ in range(args.rounds):
            began = now()
            verdicts = [membership(grammar, s).member for s in held_strings]
            member_seconds.append(since(began))
            assert all(verdicts), "a sampled string was rejected by physlm's membership DP"
        print(f"membership: {len(held_strings) / median2(member_seconds)[1]:,.1f} strings per "
              "CPU s", file=sys.stderr)

        # side by side: strings of typical length, and single-token mutations of them
        chosen = [held_strings[i] for i in nearest(held_strings, args.length,
                                                   args.official_strings)]
        members = [s.tolist() for s in chosen]
        mutated = mutants(grammar, members, args.mutants, seed=1)
        ours_member_s = [median_seconds(lambda s=s: membership(grammar, s), args.rounds)
                         for s in chosen]
        ours_parse_s = [median_seconds(lambda s=s: parse(grammar, s), args.rounds)
                        for s in chosen]
        ours_next_s = [median_seconds(lambda s=s: next_token_distribution(grammar, s),
                                      args.rounds) for s in chosen]
        ours_mutant = [membership(grammar, s).member for s in mutated]
        ours_mutant_s = [median_seconds(lambda s=s: membership(grammar, s), args.rounds)
                         for s in mutated]
        peer_member = peer_next = None
        if args.official:
            peer_member = run_peer(args.official, "membership", scratch, members + mutated)
            print("official membership (CPU s): " + ", ".join(
                f"{t[1]:.1f}" for t in peer_member["seconds"]), file=sys.stderr)
            peer_next = run_peer(args.official, "next-token", scratch, members)
            print("official next-token (CPU s): " + ", ".join(
                f"{t[1]:.1f}" for t in peer_next["seconds"]), file=sys.stderr)

    report(args, first_call, rates, ours_lengths, official_lengths, official_strings, accepted,
           held_strings, held_tokens, member_seconds, chosen, ours_member_s, ours_parse_s,
           ours_next_s, mutated, ours_mutant, ours_mutant_s, peer_member, peer_next, grammar)
    stall = cpu_stall_us()
    if stall is not None and stall0 is not None:
        share = (stall - stall0) / 1e6 / (time.perf_counter() - wall0)
        print(f"\nCPU stall share over the run (PSI: time some task waited for a core / wall "
              f"time): {share:.2f}")
    print()
    print_run_footer(threads=1)


def report(args, first_call, rates, ours_lengths, official_lengths, official_strings, accepted,
           held_strings, held_tokens, member_seconds, chosen, ours_member_s, ours_parse_s,
           ours_next_s, mutated, ours_mutant, ours_mutant_s, peer_member, peer_next,
           grammar) -> None:
    print(f"cfg3f, one core, medians of {args.rounds} rounds; Python "
          f"{platform.python_version()}, numpy {np.__version__}. Rates per CPU second of the "
          "timed process (wall-clock in parentheses: the machine is shared)")
    print(f"physlm numba warm-up (first call in the process: compile or disk-cache load, "
          f"excluded from every figure): {first_call:.2f} s\n")
    print("### Sampling\n")
    print("| what | strings/s | tokens/s | strings/s (wall) | mean length | rounds |")
    print("|---|---:|---:|---:|---:|---:|")
    lengths = {SAMPLER: ours_lengths, BATCHES: ours_lengths, OFFICIAL: official_lengths}
    med = {}
    for who, values in rates.items():
        med[who] = [statistics.median(v[k] for v in values) for k in range(4)]
        print(f"| {who} | {med[who][0]:,.0f} | {med[who][1]:,.0f} | {med[who][2]:,.0f} "
              f"| {statistics.mean(lengths[who]):.1f} | {len(values)} |")
    if OFFICIAL in med:
        theirs = med[OFFICIAL]
        print(f"\n| ratio to official | strings/s | tokens/s | strings/s (wall) "
              f"| target (>= {TARGET_SAMPLING:g}x strings/s) |")
        print("|---|---:|---:|---:|---|")
        for who in (SAMPLER, BATCHES):
            ratio = med[who][0] / theirs[0]
            print(f"| {who} | {ratio:.1f}x | {med[who][1] / theirs[1]:.1f}x "
                  f"| {med[who][2] / theirs[2]:.1f}x "
                  f"| {'met' if ratio >= TARGET_SAMPLING else 'not met'} |")
        print(f"\nlengths: physlm {len(ours_lengths):,} strings min {min(ours_lengths)} median "
              f"{statistics.median(ours_lengths):g} max {max(ours_lengths)}; official "
              f"{len(official_lengths):,} strings min {min(official_lengths)} median "
              f"{statistics.median(official_lengths):g} max {max(official_lengths)}")
        print(f"official strings (round 1) accepted by physlm's membership DP: "
              f"{accepted}/{len(official_strings)}")

    wall, cpu = median2(member_seconds)
    n = len(held_strings)
    rate = n / cpu
    print("\n### Membership DP\n")
    print(f"physlm `membership` over {n} held-out strings (mean length {held_tokens / n:.1f}): "
          f"**{rate:,.1f} strings/s** ({n / wall:,.1f} wall; {held_tokens / cpu:,.0f} tokens/s), "
          f"target >= {TARGET_MEMBERSHIP:g}: {'met' if rate >= TARGET_MEMBERSHIP else 'not met'}"
          "\n")
    print("CPU seconds (wall in parentheses):\n")
    print("| string | length | physlm membership, ms | physlm parse, ms | official "
          "solve_dp_noneq_fast, s | official / physlm membership |")
    print("|---:|---:|---:|---:|---:|---:|")
    k = len(chosen)
    for i, s in enumerate(chosen):
        ours, parsed = ours_member_s[i], ours_parse_s[i]
        print(f"| {i} | {len(s)} | {1e3 * ours[1]:.2f} ({1e3 * ours[0]:.2f}) "
              f"| {1e3 * parsed[1]:.2f} ({1e3 * parsed[0]:.2f}) ", end="")
        if peer_member:
            theirs = peer_member["seconds"][i]
            print(f"| {theirs[1]:.2f} ({theirs[0]:.2f}) | {theirs[1] / ours[1]:,.0f}x |")
        else:
            print("| - | - |")
    ours_med, parse_med = median2(ours_member_s), median2(ours_parse_s)
    if peer_member:
        theirs_med = median2(peer_member["seconds"][:k])
        print(f"| median | | {1e3 * ours_med[1]:.2f} ({1e3 * ours_med[0]:.2f}) "
              f"| {1e3 * parse_med[1]:.2f} ({1e3 * parse_med[0]:.2f}) "
              f"| {theirs_med[1]:.2f} ({theirs_med[0]:.2f}) "
              f"| {theirs_med[1] / ours_med[1]:,.0f}x |")
        peer_mutant = peer_member["member"][k:]
        agree_mutants = sum(a == b for a, b in zip(ours_mutant, peer_mutant))
        print(f"\nagreement: members accepted by the official DP {sum(peer_member['member'][:k])}"
              f"/{k}; {len(mutated)} single-token mutants: same verdict {agree_mutants}/"
              f"{len(mutated)} (members among them: physlm {sum(ours_mutant)}, official "
              f"{sum(peer_mutant)}); mutants' CPU seconds, median: physlm "
              f"{1e3 * median2(ours_mutant_s)[1]:.2f} ms, official "
              f"{median2(peer_member['seconds'][k:])[1]:.2f} s")
        for s, a, b in zip(mutated, ours_mutant, peer_mutant):
            if a != b:
                print(f"DISAGREEMENT: physlm {a}, official {b}: {s}")

    print("\n### Next-token distribution along a whole string\n")
    print("CPU seconds (wall in parentheses):\n")
    print("| string | length | physlm next_token_distribution, ms | official "
          "solve_dp_prob_highprecision, s | official / physlm | max abs difference "
          "| P(string) relative difference |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for i, s in enumerate(chosen):
        dist = next_token_distribution(grammar, s)
        assert np.allclose(dist.sum(axis=1), 1.0)
        ours = ours_next_s[i]
        if not peer_next:
            print(f"| {i} | {len(s)} | {1e3 * ours[1]:.2f} ({1e3 * ours[0]:.2f}) | | | | |")
            continue
        theirs = np.array(peer_next["probs"][i])
        mine = np.concatenate([dist[:, -1:], dist[:, :-1]], axis=1)  # EOS first, as theirs
        diff = float(np.abs(mine - theirs).max()) if mine.shape == theirs.shape else np.inf
        worst = max(worst, diff)
        p_ours, p_theirs = root_probability(grammar, s), peer_next["string_probability"][i]
        rel = abs(p_ours - p_theirs) / p_theirs
        t = peer_next["seconds"][i]
        print(f"| {i} | {len(s)} | {1e3 * ours[1]:.2f} ({1e3 * ours[0]:.2f}) "
              f"| {t[1]:.2f} ({t[0]:.2f}) | {t[1] / ours[1]:,.0f}x | {diff:.1e} | {rel:.1e} |")
    if peer_next:
        theirs_med, ours_med = median2(peer_next["seconds"]), median2(ours_next_s)
        print(f"| median | | {1e3 * ours_med[1]:.2f} ({1e3 * ours_med[0]:.2f}) "
              f"| {theirs_med[1]:.2f} ({theirs_med[0]:.2f}) "
              f"| {theirs_med[1] / ours_med[1]:,.0f}x | | |")
        print(f"\nlargest absolute difference of any probability: {worst:.1e} "
              f"({'within' if worst <= 1e-9 else 'NOT within'} 1e-9)")


if __name__ == "__main__":
    main()
