"""Training tokens/s and MFU at the GPT-2 small shape, physlm vs HF transformers, one by one.

Pairs as in bench/bench_train_cpu.py (the same builders, parameter counts asserted equal):
physlm's gpt2 layout vs GPT2LMHeadModel, its llama layout vs LlamaForCausalLM, HF with
attn_implementation="sdpa". Every contestant runs bench/train_step.py's step: forward under
torch.autocast(bfloat16) with fp32 weights, cross-entropy on the fp32 logits outside the model,
backward, torch AdamW (fused on CUDA). Contestants: physlm eager (plain causal); physlm eager +
doc mask (the trainer's default GPU path: doc ids and restarting positions, attention="auto",
which picks flex on CUDA without flash_attn); physlm compiled and compiled + doc mask
(nn.Module.compile in place; on CPU in trainer.determinism's deterministic-kernels mode, as
`train.compile: true` runs there); HF eager and HF compiled. The backend that ran is recorded
for the eager physlm contestants (a compiled model would trace the recorder).

Every eager contestant (both pairs, both contexts) runs before any compiled one: each compile
is a cold inductor build (about a minute at this shape), so the compiled ones, context 512
first, take what time is left before the proof's deadline; a contestant that would need more
than is left is listed as not started. tokens/s is the median over the timed steps after warmup
(compilation happens in warmup); MFU = flops_per_token * tokens/s / peak
(trainer.engine.peak_flops: 989e12 dense bf16 for H100/H200), flops_per_token = 6N + 12 L d T
(GPT.flops_per_token), the same for both of a pair.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import torch
from backends_ran import recording, summary
from bench_train_cpu import hf_model, n_params, packed_docs, physlm_config
from context import Context, guarded
from torch import Tensor, nn
from train_step import phased_step

from trainer.determinism import deterministic_kernels
from trainer.engine import peak_flops
from trainer.model import GPT

EAGER = ("physlm eager", "physlm eager + doc mask", "HF eager")
COMPILED = ("physlm compiled", "HF compiled", "physlm compiled + doc mask")
GPU = dict(layers=12, heads=12, d_model=768, vocab=50304, contexts={512: 32, 1024: 16},
           warmup=3, steps=10, doc_len=256, compile_backend="inductor", eager=EAGER,
           compiled=COMPILED,
           # seconds a contestant needs at least (the first flex use compiles flex; each
           # compiled contestant is a cold inductor build): none starts with less left
           needs={"eager": 20.0, "compiled": 90.0})
# CPU: inductor's C++ compile of even a toy model takes minutes on 2 cores; aot_eager traces
# the same graphs through dynamo and autograd (graph breaks and guards show) without codegen.
# One context and the compiled contestant with the most to trace keep CI's run short.
SMOKE = dict(layers=2, heads=2, d_model=64, vocab=512, contexts={32: 2}, warmup=1, steps=2,
             doc_len=12, compile_backend="aot_eager", eager=EAGER,
             compiled=("physlm compiled + doc mask",), needs={"eager": 1.0, "compiled": 5.0})


def contestant(name: str, pair: str, shape: argparse.Namespace, config, device: torch.device,
               compile_backend: str) -> tuple[nn.Module, object]:
    """The model of one contestant, on device, and how it computes logits from the batch."""
    torch.manual_seed(0)
    if name.startswith("HF"):
        model = hf_model(shape, pair, config.ffn_dim)
        forward = lambda m, b: m(input_ids=b["ids"], use_cache=False).logits  # noqa: E731
    else:
        model = GPT(config)
        forward = ((lambda m, b: m(b["ids"], position_ids=b["pos"], doc_ids=b["docs"]))
                   if "doc mask" in name else (lambda m, b: m(b["ids"])))
    model = model.to(device).train()
    if "compiled" in name:
        # a fresh start per compiled contestant: no recompilation against earlier models'
        # guards, and static shapes (a context change would otherwise turn dynamic)
        torch._dynamo.reset()
        model.compile(backend=compile_backend, dynamic=False)
    return model, forward


def measure(name: str, pair: str, shape: argparse.Namespace, batch: dict[str, Tensor],
            s: dict, device: torch.device) -> dict:
    """One contestant's row fields: parameters, tokens/s (median timed step), backend ran."""
    config = physlm_config(shape, pair)
    model, forward = contestant(name, pair, shape, config, device, s["compile_backend"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1,
                                  fused=device.type == "cuda")

    def step() -> float:
        return sum(phased_step(lambda: forward(model, batch), batch["targets"], optimizer,
                               torch.bfloat16))

    compiled, physlm = "compiled" in name, name.startswith("physlm")
    # as the trainer's compiled runs on CPU step in deterministic mode, so do physlm's rows
    with deterministic_kernels(compiled and physlm and device.type == "cpu"):
        with contextlib.nullcontext([]) if compiled else recording() as calls:
            step()  # the first warmup step, its attention calls recorded
        for _ in range(s["warmup"] - 1):
            step()
        seconds = statistics.median(step() for _ in range(s["steps"]))
    ran = ("HF sdpa" if not physlm else "not recorded (compiled)" if compiled
           else summary(calls))
    return {"params": n_params(model), "attention ran": ran,
            "tokens/s": batch["ids"].numel() / seconds}


def planned(s: dict) -> list[tuple[int, str, str]]:
    """(context, pair, contestant) in running order: every eager one, then the compiled ones,
    context by context (the shortest first)."""
    contexts, pairs = sorted(s["contexts"]), ("gpt2", "llama")
    return ([(c, p, n) for c in contexts for p in pairs for n in s["eager"]]
            + [(c, p, n) for c in contexts for n in s["compiled"] for p in pairs])


def batch_for(s: dict, length: int, device: torch.device) -> dict[str, Tensor]:
    """Random tokens [B, T] and their next tokens, packed-document ids and positions [B, T]."""
    micro_batch = s["contexts"][length]
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, s["vocab"], (micro_batch, length + 1), generator=gen)
    docs, pos = packed_docs(micro_batch, length, s["doc_len"], gen)
    batch = {"ids": tokens[:, :-1], "targets": tokens[:, 1:], "docs": docs, "pos": pos}
    return {k: v.to(device) for k, v in batch.items()}


def add_ratios(rows: list[dict]) -> None:
    """Each row's tokens/s against its pair's HF eager and HF compiled rows at its context."""
    for peer_name in ("HF eager", "HF compiled"):
        for row in rows:
            peer = next((r for r in rows if r["pair"] == row["pair"] and r["ctx"] == row["ctx"]
                         and r["contestant"] == peer_name and "tokens/s" in r), None)
            if peer and "tokens/s" in row:
                row[f"vs {peer_name}"] = row["tokens/s"] / peer["tokens/s"]


def run(ctx: Context) -> dict:
    s = SMOKE if ctx.smoke else GPU
    peak = peak_flops(ctx.device)
    result = {"precision": "torch.autocast(bfloat16), fp32 weights and AdamW",
              "shape": f"{s['layers']} layers x {s['heads']} heads x {s['d_model']} wide, "
                       f"vocab {s['vocab']}",
              "compile": f"nn.Module.compile(backend={s['compile_backend']!r})"
                         + ("; physlm's in deterministic-kernels mode, as train.compile "
                            "trains on CPU" if ctx.device.type == "cpu" else ""),
              "peak_flops": peak, "warmup_steps": s["warmup"], "timed_steps": s["steps"],
              "rows": []}
    rows, batches, flops = result["rows"], {}, {}
    for length, pair, name in planned(s):
        row = {"ctx": length, "batch": s["contexts"][length], "pair": pair, "contestant": name}
        rows.append(row)
        needs = s["needs"]["compiled" if "compiled" in name else "eager"]
        if ctx.left() < needs:
            row["not started"] = (f"{max(ctx.left(), 0):.0f} s left before the deadline; "
                                  f"it needs ~{needs:.0f} s")
            continue
        shape = argparse.Namespace(layers=s["layers"], heads=s["heads"], d_model=s["d_model"],
                                   vocab=s["vocab"], ctx=length, rope_theta=10000.0)
        if length not in batches:
            batches[length] = batch_for(s, length, ctx.device)
        if (length, pair) not in flops:  # both of a pair: the same N
            flops[length, pair] = GPT(physlm_config(shape, pair)).flops_per_token()
        guarded(row, measure, name, pair, shape, batches[length], s, ctx.device)
        if "tokens/s" in row:
            row["MFU"] = None if peak is None else flops[length, pair] * row["tokens/s"] / peak
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        ctx.publish(result)
    order = [*s["eager"], *s["compiled"]]
    rows.sort(key=lambda r: (r["ctx"], r["pair"], order.index(r["contestant"])))
    add_ratios(rows)
    return result
