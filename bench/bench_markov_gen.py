"""Markov generation speed: physlm's markov corpora vs the Markov repository's samplers (Makkuva
et al.), side by side in one process run.

    python bench/bench_markov_gen.py --official /tmp/official/Markov --rounds 3

Per case, alternating the contestants' order from one round to the next:
- official: its training sampler `get_batch` (src/optim/utils.py, torch on CPU, one thread, its
  default batch 16 x 1024), in this process, for --official-tokens tokens: "switching" runs
  Markov-LLM's first-order sampler with P = [[0.5, 0.5], [0.8, 0.2]], "icl" Markov-LLM-k's with
  a random table per sequence (P None) of order 2;
- physlm end to end: the whole `physlm gen <config> samples=<n> --workers 1` command as a
  subprocess (configs/corpus/markov.yaml, markov_icl.yaml), from its start to its exit:
  interpreter start, imports, references, every training shard, the eval set, manifest;
- physlm fixed cost: the same command with samples=1, so the marginal rate of the training
  stream alone is (n - 1) T / (whole - fixed).
Rates are tokens per CPU second (and wall), medians over rounds. Then the official samplers'
defects, each confirmed by running them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from cpu_pressure import print_run_footer
from gen_command import ROOT, alternating_rounds, parse_cases, print_token_rates, timed_gen

TARGET = 1_000_000  # tokens per second per core, the whole command
SEQ_LEN = 255  # both configs' documents
# case -> (corpus config, the official folder whose sampler it runs, physlm sequences)
CASES = {"switching": ("markov.yaml", "Markov-LLM", 200_000),
         "icl": ("markov_icl.yaml", "Markov-LLM-k", 200_000)}


def physlm_gen(case: str, samples: int, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole gen command."""
    wall, cpu, manifest = timed_gen(ROOT / "configs/corpus" / CASES[case][0],
                                    [f"samples={samples}"], scratch / case)
    if manifest["tokens"] != samples * SEQ_LEN:
        raise RuntimeError(f"{case}: {manifest['tokens']} tokens, not {samples * SEQ_LEN}")
    return wall, cpu


def official_module(checkout: str, folder: str):
    """The folder's src/optim/utils.py, imported under a name of its own."""
    path = Path(checkout) / folder / "src/optim/utils.py"
    spec = importlib.util.spec_from_file_location(f"official_{folder.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def official(case: str, checkout: str, tokens: int, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds for `tokens` official training tokens (batches of 16 x 1024)."""
    import torch

    module = official_module(checkout, CASES[case][1])
    generator = torch.Generator().manual_seed(seed)
    args = SimpleNamespace(initial="steady", device="cpu", dtype=torch.float32)
    P = torch.tensor([[0.5, 0.5], [0.8, 0.2]])
    cpu, began = time.process_time(), time.perf_counter()
    for _ in range(-(-tokens // (16 * 1024))):
        if case == "switching":
            module.get_batch(P, 1024, 16, generator, args)
        else:
            module.get_batch(None, 2, 1024, 16, generator, args)
    return time.perf_counter() - began, time.process_time() - cpu


def defects(checkout: str) -> dict[str, str]:
    """The official samplers' defects, each shown by running it."""
    import torch

    args = SimpleNamespace(initial="steady", device="cpu", dtype=torch.float32)
    P = torch.tensor([[0.5, 0.5], [0.8, 0.2]])  # p 0.5, q 0.8: pi_1 = p / (p + q) = 0.385
    found = {}
    for folder in ("Markov-LLM-AO", "Markov-RPE"):
        _, y = official_module(checkout, folder).get_batch(
            P, 1, 256, 4096, torch.Generator().manual_seed(0), args)
        found[f"{folder} last position"] = (
            f"the last target y[:, -1] is never sampled: {int(y[:, -1].sum())} ones in 4096 "
            f"sequences (the other positions: {y[:, -2].float().mean():.3f} ones)")
    x, _ = official_module(checkout, "Markov-LLM-k").get_batch(
        P, 1, 8, 40000, torch.Generator().manual_seed(0), args)
    found["Markov-LLM-k steady start"] = (
        f"initial=steady draws x_1 = 1 with q / (p + q) = 0.615, not pi_1 = 0.385: "
        f"measured {x[:, 0].float().mean():.3f} over 40000 sequences")
    first = official_module(checkout, "Markov-LLM")
    runs = [first.get_batch(P, 64, 64, torch.Generator().manual_seed(0), args, "cpu")[0]
            for _ in range(2)]
    found["Markov-LLM seeding"] = (
        "the transitions' torch.multinomial takes no generator: the same seed gives "
        f"{'equal' if torch.equal(*runs) else 'different'} batches")
    return found


def run_case(case: str, checkout: str, rounds: int, scale: float, scratch: Path) -> dict:
    ours = max(2, round(CASES[case][2] * scale))
    theirs = max(16 * 1024, round(ours * SEQ_LEN / 50))
    times = alternating_rounds(case, rounds, [
        ("official", lambda r: official(case, checkout, theirs, r)),
        ("whole", lambda r: physlm_gen(case, ours, scratch)),
        ("fixed", lambda r: physlm_gen(case, 1, scratch))])
    return {**times, "sizes": (ours * SEQ_LEN, -(-theirs // (16 * 1024)) * 16 * 1024)}


def print_sizes(results: dict[str, dict]) -> None:
    for case, t in results.items():
        ours, theirs = t["sizes"]
        print(f"{case}: physlm {ours:,} tokens ({CASES[case][0]}), official {theirs:,} "
              f"({CASES[case][1]}), {len(t['whole'])} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", required=True, help="the Markov repository's checkout")
    args, cases = parse_cases(ap, CASES)
    import torch

    torch.set_num_threads(1)  # one core, as the gen command's one worker
    with tempfile.TemporaryDirectory(prefix="bench_markov_") as scratch:
        results = {case: run_case(case, args.official, args.rounds, args.scale, Path(scratch))
                   for case in cases}
    print_token_rates(results, dict.fromkeys(results, SEQ_LEN), TARGET)
    print()
    print_sizes(results)
    print("\nThe official samplers' defects, confirmed by running them:\n")
    print(json.dumps(defects(args.official), indent=1))
    print()
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
