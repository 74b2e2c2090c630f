"""The trainer's host-memory setting on CPU (trainer/host_memory.py): the quickstart model's
training step with glibc's default malloc thresholds and with the trainer's, side by side.

    python bench/bench_host_memory.py [--rounds 6] [--steps 6] [--canon ABCD]

The setting is process-wide and cannot be undone in a process, so each round starts one child
process per arm, in an order that alternates from round to round; a child builds the model of
bench_canon_cpu.py (gpt_tiny at ctx 256, micro batch 16, vocab 2,048, packed documents), takes
two untimed steps, then times --steps steps of bench/train_step.py's step and reports their
tokens/s, page faults and system CPU time per step. The table gives each arm's median over all
its timed steps and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from cpu_pressure import print_run_footer

ROOT = Path(__file__).resolve().parents[1]


def child(keep: bool, steps: int, canon: str) -> None:
    """One arm's steps, printed as one JSON line."""
    if keep:
        from trainer.host_memory import keep_freed_host_memory

        assert keep_freed_host_memory(), "not glibc: the setting does not apply here"
    from bench_canon_cpu import quickstart_shape
    from bench_train_cpu import packed_docs
    from train_step import phased_step

    from trainer.model import GPT, ModelConfig

    shape, ctx, batch = quickstart_shape()
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 2048, (batch, ctx + 1), generator=gen)
    ids, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    docs, pos = packed_docs(batch, ctx, 64, gen)
    torch.manual_seed(0)
    model = GPT(ModelConfig(**shape, vocab_size=2048, ctx=ctx, canon=canon)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False)

    def step() -> None:
        phased_step(lambda: model(ids, position_ids=pos, doc_ids=docs), targets, optimizer)

    for _ in range(2):
        step()
    rates, faults, system = [], [], []
    for _ in range(steps):
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step()
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_SELF)
        rates.append(batch * ctx / seconds)
        faults.append(after.ru_minflt - before.ru_minflt)
        system.append(after.ru_stime - before.ru_stime)
    print(json.dumps({"rates": rates, "faults": faults, "system": system}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--canon", default="", help="model.canon for both arms (default: none)")
    ap.add_argument("--child", choices=["default", "kept"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child == "kept", args.steps, args.canon)
        return
    arms: dict[str, dict[str, list[float]]] = {
        arm: {"rates": [], "faults": [], "system": []} for arm in ("default", "kept")}
    for r in range(args.rounds):
        for arm in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
            out = subprocess.run(
                [sys.executable, __file__, "--child", arm, "--steps", str(args.steps),
                 "--canon", args.canon], check=True, capture_output=True, text=True,
                cwd=ROOT).stdout
            for key, values in json.loads(out.strip().splitlines()[-1]).items():
                arms[arm][key] += values
        print(f"round {r + 1}: " + ", ".join(
            f"{arm} {statistics.median(a['rates'][-args.steps:]):,.0f} tok/s"
            for arm, a in arms.items()), flush=True)
    base = statistics.median(arms["default"]["rates"])
    print("\n| malloc thresholds | tokens/s (median) | page faults / step | system s / step "
          "| ratio |")
    print("|---|---:|---:|---:|---:|")
    for arm, a in arms.items():
        rate = statistics.median(a["rates"])
        print(f"| {'glibc default' if arm == 'default' else 'trainer (kept)'} | {rate:,.0f} "
              f"| {statistics.median(a['faults']):,.0f} | {statistics.median(a['system']):.3f} "
              f"| {rate / base:.3f} |")
    print()
    print_run_footer(torch.get_num_threads())


if __name__ == "__main__":
    main()
