"""Canon's training cost on CPU: tokens/s of the quickstart's model with `model.canon: ABCD` and
without, in one process run; with `--feature norm`, the same for its RMSNorms against identity
(`model.norm: none`), the neighbour that a fused Canon-A or Canon-C would take in.

    python bench/bench_canon_cpu.py [--rounds 12] [--compile] [--feature norm]

The shape is the quickstart's: configs/model/gpt_tiny.yaml (4 layers x d_model 128 x 4 heads,
rope, rmsnorm, gelu), ctx 256 and micro batch 16 from configs/train/cpu_quick.yaml, the
quickstart corpus's vocab 2048, fp32. Each contestant runs bench/train_step.py's step (forward,
cross-entropy, backward, AdamW fused=False) with documents packed as the trainer packs them
(doc ids and restarting positions, documents of random length around --doc-len: train.doc_mask
is on by default) and, as a second pair, one document per row. --compile adds the pairs under
torch.compile (train.compile: true).

The process keeps freed host memory for reuse as the trainer does on CPU
(trainer/host_memory.py; bench_host_memory.py measures that setting on its own).

After an untimed warmup, each round times one step of every contestant in a rotating order;
only quiet steps (another task waited for a core less than --quiet of the step, Linux CPU
pressure) enter the medians. The table gives each contestant's median and, per pair, the
ratio of the model with the feature to the model without it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from bench_train_cpu import packed_docs
from cpu_pressure import cpu_stall_us, print_run_footer
from torch import Tensor, nn
from train_step import phased_step

from trainer.determinism import deterministic_kernels
from trainer.host_memory import keep_freed_host_memory

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Contestant:
    name: str  # "<pair>: <variant>"
    model: nn.Module
    inputs: dict[str, Tensor]
    compiled: bool
    optimizer: torch.optim.Optimizer
    rates: list[float] = field(default_factory=list)
    stalls: list[float] = field(default_factory=list)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--canon", default="ABCD", help="the Canon sites (--feature canon)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quiet", type=float, default=0.2)
    p.add_argument("--doc-len", type=int, default=64)
    p.add_argument("--compile", action="store_true", help="add the torch.compile pairs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feature", choices=("canon", "norm"), default="canon",
                   help="what each pair compares: Canon (--canon) against none, or the model's "
                        "RMSNorms against identity")
    return p.parse_args(argv)


def variants(args: argparse.Namespace) -> tuple[tuple[str, dict], tuple[str, dict]]:
    """Each pair's two models, without and with the feature: a name and their model keys."""
    if args.feature == "norm":
        return ("norm none", {"norm": "none"}), ("rmsnorm", {})
    return ("none", {"canon": ""}), (args.canon, {"canon": args.canon})


def quickstart_shape() -> tuple[dict, int, int]:
    """gpt_tiny's model keys, and cpu_quick's ctx and micro batch."""
    model = yaml.safe_load((ROOT / "configs/model/gpt_tiny.yaml").read_text())
    train = yaml.safe_load((ROOT / "configs/train/cpu_quick.yaml").read_text())
    return model, train["ctx"], train["micro_batch"]


def build(args: argparse.Namespace, ids: Tensor, docs: Tensor, pos: Tensor) -> list[Contestant]:
    from trainer.model import GPT, ModelConfig

    shape, ctx, _ = quickstart_shape()
    pairs = [("packed", False, {"position_ids": pos, "doc_ids": docs}), ("one doc", False, {})]
    if args.compile:
        pairs += [(f"{name}, compiled", True, inputs) for name, _, inputs in pairs]
    out = []
    for pair, compiled, inputs in pairs:
        for name, keys in variants(args):
            torch.manual_seed(args.seed)
            model = GPT(ModelConfig(**{**shape, **keys}, vocab_size=args.vocab, ctx=ctx)).train()
            if compiled:
                model.compile()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False)
            out.append(Contestant(f"{pair}: {name}", model, inputs, compiled, optimizer))
    return out


def step(c: Contestant, ids: Tensor, targets: Tensor) -> None:
    with deterministic_kernels(c.compiled):  # as train.compile: true steps on CPU
        phased_step(lambda: c.model(ids, **c.inputs), targets, c.optimizer)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    kept = keep_freed_host_memory()  # as the trainer's CPU steps run
    _, ctx, batch = quickstart_shape()
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, args.vocab, (batch, ctx + 1), generator=gen)
    ids, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    docs, pos = packed_docs(batch, ctx, args.doc_len, gen)
    contestants = build(args, ids, docs, pos)
    (without, _), (with_, _) = variants(args)
    kernel = " (Canon's kernel 4)" if args.feature == "canon" else ""
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch {batch} x {ctx}, "
          f"vocab {args.vocab}, gpt_tiny, {with_} against {without}{kernel}, fp32, freed host "
          f"memory {'kept (the trainer setting)' if kept else 'returned (not glibc)'}")
    for c in contestants:
        for _ in range(args.warmup):
            step(c, ids, targets)
    for r in range(args.rounds):
        shift = r % len(contestants)
        for c in contestants[shift:] + contestants[:shift]:
            stalled, began = cpu_stall_us(), time.perf_counter()
            step(c, ids, targets)
            seconds = time.perf_counter() - began
            c.rates.append(batch * ctx / seconds)
            c.stalls.append(0.0 if stalled is None else
                            (cpu_stall_us() - stalled) / 1e6 / seconds)
        print(f"round {r + 1}: " + ", ".join(f"{c.name} {c.rates[-1]:,.0f}"
                                             for c in contestants), flush=True)

    def median(c: Contestant) -> tuple[float, int]:
        quiet = [rate for rate, stall in zip(c.rates, c.stalls) if stall < args.quiet]
        return (statistics.median(quiet) if quiet else float("nan")), len(quiet)

    print("\n| contestant | tokens/s, median of quiet steps | quiet steps | all steps median "
          f"| {with_} / {without} |")
    print("|---|---:|---:|---:|---:|")
    for plain, featured in zip(contestants[::2], contestants[1::2]):
        base = median(plain)[0]
        for c in (plain, featured):
            rate, quiet = median(c)
            ratio = "1.000" if c is plain else f"{rate / base:.3f}"
            print(f"| {c.name} | {rate:,.0f} | {quiet}/{len(c.rates)} "
                  f"| {statistics.median(c.rates):,.0f} | {ratio} |")
    print()
    print_run_footer(torch.get_num_threads())


if __name__ == "__main__":
    main()
