"""Where a CPU training step's time goes, against the machine's fp32 matmul peak.

    python bench/cpu_profile.py [--profile-steps 5] [bench_train_cpu.py options]

Builds the contestants of bench_train_cpu.py (same shapes, batch and step) and, in one process:
1. measures the machine's fp32 matmul peak: the best GFLOP/s of an N x N sgemm (--peak-size);
2. for each contestant, after the warmup, times --profile-steps steps phase by phase (forward
   with the loss, backward, optimizer) and profiles them with torch.profiler, attributing
   each op's own time (self CPU time) to one category: matmul (mm, addmm, bmm), attention
   (SDPA's kernels and what they call), cross-entropy (log_softmax, nll_loss), optimizer (all
   inside AdamW.step), and the rest (elementwise ops, norms, copies, and in a compiled model
   inductor's fused kernels);
3. prints the step's achieved GFLOP/s (model.flops_per_token() x tokens/s, the count MFU uses)
   as a share of the peak, and the most any change outside the matmuls could give: the step's
   speedup if everything but its matmuls took no time (1 / matmul share).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from bench_train_cpu import Contestant, build, packed_docs, step
from bench_train_cpu import parse_args as bench_args
from cpu_pressure import cpu_stall_us
from torch import Tensor
from torch.autograd.profiler_util import FunctionEvent

MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
CATEGORIES = ("matmul", "attention", "cross-entropy", "optimizer", "other")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile-steps", type=int, default=5, help="profiled steps per contestant")
    p.add_argument("--peak-size", type=int, default=2048, help="N of the N x N sgemm")
    own, rest = p.parse_known_args(argv)
    return own, bench_args(rest)


def sgemm_peak(n: int, repeats: int = 10) -> float:
    """GFLOP/s of the fastest of `repeats` fp32 [n, n] @ [n, n] products."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # the first call allocates and warms up
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(work) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def category(event: FunctionEvent) -> str:
    """The category an op's own time goes to: its own name, or an enclosing op's."""
    if event.name in MATMUL:
        return "matmul"
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    if any(name.startswith("Optimizer.step") for name in names):
        return "optimizer"
    if any("scaled_dot_product" in name for name in names):
        return "attention"
    if any("log_softmax" in name or "nll_loss" in name for name in names):
        return "cross-entropy"
    return "other"


def quiet_phases(c: Contestant, targets: Tensor, steps: int,
                 limit: float) -> tuple[list[tuple[float, float, float]], int]:
    """Phase times of `steps` quiet steps (some task waited for a CPU less than `limit` of the
    step), trying at most 4 x steps; and how many steps it took. Too few quiet: all of them."""
    quiet, every = [], []
    while len(quiet) < steps and len(every) < 4 * steps:
        stalled = cpu_stall_us()
        phases = step(c, targets)
        every.append(phases)
        share = 0.0 if stalled is None else (cpu_stall_us() - stalled) / 1e6 / sum(phases)
        if share < limit:
            quiet.append(phases)
    return (quiet if len(quiet) == steps else every), len(every)


def profile(c: Contestant, targets: Tensor, steps: int) -> dict[str, float]:
    """Seconds per step by category (the ops' own time under the profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(c, targets)
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    for event in prof.events():
        seconds[category(event)] += event.self_cpu_time_total / 1e6 / steps
    return seconds


def main(argv: list[str] | None = None) -> None:
    own, args = parse_args(argv)
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.ctx + 1), generator=gen)
    ids, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    docs, pos = packed_docs(args.micro_batch, args.ctx, args.doc_len, gen)
    # before the models are built: compiling starts inductor's worker processes
    peak = sgemm_peak(own.peak_size)
    contestants = build(args, ids, docs, pos)
    per_step = args.micro_batch * args.ctx
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch "
          f"{args.micro_batch} x {args.ctx}, fp32; sgemm peak ({own.peak_size}^2): "
          f"{peak:,.1f} GFLOP/s")
    print()
    print("| pair | contestant | step ms (quiet/tried) | forward+loss / backward / optimizer ms "
          "| matmul | attention | cross-entropy | optimizer | other | step GFLOP/s (% peak) "
          "| speedup if all but matmul took no time |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in contestants:
        flops_per_token = next(o.model for o in contestants
                               if o.pair == c.pair and o.name == "physlm").flops_per_token()
        for _ in range(args.warmup):
            step(c, targets)
        phases, tried = quiet_phases(c, targets, own.profile_steps, args.quiet)
        forward, backward, optimizer = (statistics.median(p[i] for p in phases)
                                        for i in range(3))
        seconds_per_step = forward + backward + optimizer
        seconds = profile(c, targets, own.profile_steps)
        total = sum(seconds.values())
        shares = " | ".join(f"{seconds[k] / total:.0%}" for k in CATEGORIES)
        achieved = flops_per_token * per_step / seconds_per_step / 1e9
        print(f"| {c.pair} | {c.name} | {seconds_per_step * 1e3:.0f} ({len(phases)}/{tried}) "
              f"| {forward * 1e3:.0f} / {backward * 1e3:.0f} / {optimizer * 1e3:.0f} "
              f"| {shares} | {achieved:.1f} ({achieved / peak:.0%}) "
              f"| {total / seconds['matmul']:.2f}x |",
              flush=True)
    print()
    print("Category shares are of the profiled ops' own time; step ms and phases are medians "
          f"of {own.profile_steps} unprofiled quiet steps (CPU stall share < {args.quiet}; all "
          "tried steps when fewer were quiet). " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
