"""k-hop generation speed: physlm's khop corpora vs the official task (hop-induction-heads,
Sanford, Hsu, Telgarsky), side by side in one process run.

    python bench/bench_khop_gen.py --official /tmp/official/hop-induction-heads --rounds 3

Per case, alternating the contestants' order from one round to the next:
- official: `InductionHopsFullSequenceTask.get_batch` (src/tasks.py: Python loops over
  characters, numpy's RandomState, torch tensors on CPU, one thread; it needs `bidict`) in this
  process, batches of 32 as its train.py draws them; "paper" is its paper setting (seq_len 100,
  4 letters, k 0..16), "small" its defaults (seq_len 50, 5 letters, k 0..3);
- physlm end to end: the whole `physlm gen configs/corpus/khop.yaml samples=<n> --workers 1`
  command as a subprocess, from its start to its exit: interpreter start, imports, every
  training shard (with its targets), the eval set, manifest; the same document length as the
  official input (the hop token and seq_len - 2 letters);
- physlm fixed cost: the same command with samples=1, so the marginal rate of the training
  stream alone is (n - 1) L / (whole - fixed).
Rates are tokens per CPU second (and wall), medians over rounds. Then the official task's
defects, each confirmed by running it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from cpu_pressure import print_run_footer
from gen_command import ROOT, alternating_rounds, parse_cases, print_token_rates, timed_gen

TARGET = 1_000_000  # tokens per second per core, the whole command
BATCH = 32  # the official train.py's batch
# case -> (official task kwargs, physlm overrides, physlm sequences)
CASES = {"paper": ({"seq_len": 100, "char_tokens": 4, "max_hops": 16},
                   ["seq_len=98", "alphabet=4", "max_hops=16"], 100_000),
         "small": ({"seq_len": 50, "char_tokens": 5, "max_hops": 3},
                   ["seq_len=48", "alphabet=5", "max_hops=3"], 100_000)}


def doc_tokens(case: str) -> int:
    """Tokens a document (an official input row): the hop token and seq_len - 2 letters."""
    return CASES[case][0]["seq_len"] - 1


def physlm_gen(case: str, samples: int, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole gen command."""
    wall, cpu, manifest = timed_gen(ROOT / "configs/corpus/khop.yaml",
                                    [*CASES[case][1], f"samples={samples}"], scratch / case)
    if manifest["tokens"] != samples * doc_tokens(case):
        raise RuntimeError(f"{case}: {manifest['tokens']} tokens, not "
                           f"{samples * doc_tokens(case)}")
    return wall, cpu


def official_task(checkout: str, seed: int | None, **kwargs):
    """The official task (src/tasks.py) with its own RandomState (None: its default, none)."""
    sys.path.insert(0, str(Path(checkout) / "src"))
    try:
        from tasks import InductionHopsFullSequenceTask
    finally:
        sys.path.pop(0)
    rng = None if seed is None else np.random.RandomState(seed)
    return InductionHopsFullSequenceTask(rng=rng, **kwargs)


def official(case: str, checkout: str, tokens: int, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds for `tokens` official training tokens (batches of 32)."""
    task = official_task(checkout, seed, **CASES[case][0])
    cpu, began = time.process_time(), time.perf_counter()
    for _ in range(-(-tokens // (BATCH * doc_tokens(case)))):
        task.get_batch(BATCH)
    return time.perf_counter() - began, time.process_time() - cpu


def defects(checkout: str) -> dict[str, str]:
    """The official task's defects, each shown by running it."""
    found = {}
    task = official_task(checkout, 0, seq_len=100, char_tokens=4, max_hops=16)
    inputs, _, _, _, hop_strings, _ = task.get_batch(1, metadata=True)
    found["letters dropped"] = (
        f"each sequence draws {len(hop_strings[0][0])} letters and {task.max_hops + 1} hop "
        f"strings, then keeps {inputs.shape[1] - 1} letters of each: the last 2 are drawn and "
        "walked for nothing")
    spent = {}
    for hops in (1, 16):  # the same k = 0 sequences, more hop strings computed
        small = official_task(checkout, 0, seq_len=100, char_tokens=4, max_hops=hops)
        began = time.process_time()
        small.get_batch(128, hops=0)
        spent[hops] = time.process_time() - began
    found["every hop computed"] = (
        "every sequence walks all max_hops + 1 hop strings whatever its k: k = 0 batches cost "
        f"{spent[16] / spent[1]:.2f}x as much with max_hops 16 as with 1")
    _, targets = task.get_batch(256)
    wrong = (targets != task.token_map[task.BLANK_CHAR]).float()  # answering "_" everywhere
    found["per-hop error denominator"] = (
        "train.py divides the wrong positions of a hop count by sequences x seq_len "
        f"({task.seq_len}) where a row has {targets.shape[1]} positions, the blank (always "
        "right) among them: a model wrong at every letter scores "
        f"{wrong.sum().item() / 256 / task.seq_len:.3f}, not {wrong[:, 1:].mean().item():.3f}")
    crowded = official_task(checkout, 0, seq_len=100, char_tokens=4, max_hops=49)
    hop_tokens = crowded.induction_token_map.inv
    clashes = [f"{k} ({hop_tokens[k]!r})" for k in range(50)
               if crowded.token_map[hop_tokens[k]] != k]
    found["hop tokens collide"] = (
        "the hop tokens are chr(48 + k): k >= 10 are punctuation, and with max_hops 49 the "
        f"tokens of k = {', '.join(clashes)} are the blank's or a letter's and take its id, "
        "silently")
    try:
        official_task(checkout, None, seq_len=10).get_batch(1)
    except AttributeError as exc:
        found["no default generator"] = f"rng=None (the default) fails on the first draw: {exc}"
    return found


def run_case(case: str, checkout: str, rounds: int, scale: float, scratch: Path) -> dict:
    ours = max(2, round(CASES[case][2] * scale))
    theirs = max(BATCH * doc_tokens(case), round(ours * doc_tokens(case) / 100))
    times = alternating_rounds(case, rounds, [
        ("official", lambda r: official(case, checkout, theirs, r)),
        ("whole", lambda r: physlm_gen(case, ours, scratch)),
        ("fixed", lambda r: physlm_gen(case, 1, scratch))])
    per_batch = BATCH * doc_tokens(case)
    return {**times, "sizes": (ours * doc_tokens(case), -(-theirs // per_batch) * per_batch)}


def print_sizes(results: dict[str, dict]) -> None:
    for case, t in results.items():
        ours, theirs = t["sizes"]
        print(f"{case}: physlm {ours:,} tokens (khop.yaml {' '.join(CASES[case][1])}), official "
              f"{theirs:,} ({CASES[case][0]}), {len(t['whole'])} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", required=True, help="the hop-induction-heads checkout")
    args, cases = parse_cases(ap, CASES)
    import torch

    torch.set_num_threads(1)  # one core, as the gen command's one worker
    with tempfile.TemporaryDirectory(prefix="bench_khop_") as scratch:
        results = {case: run_case(case, args.official, args.rounds, args.scale, Path(scratch))
                   for case in cases}
    print_token_rates(results, {case: doc_tokens(case) for case in results}, TARGET)
    print()
    print_sizes(results)
    print("\nThe official task's defects, confirmed by running it:\n")
    print(json.dumps(defects(args.official), indent=1))
    print()
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
