"""QA-style generation throughput through trainer.eval.generation.generate, KV cache vs none.

physlm's llama layout at the GPT-2 small shape (random weights: speed does not depend on what
was learnt), synthetic question prompts of 16-48 tokens (bios QA questions are ~20-30), greedy,
a fixed number of new tokens (no EOS, so every configuration does the same work), in batches.
fp32 is what `physlm eval` runs (trainer.eval.runner loads fp32 weights); bf16 is
torch.autocast(bfloat16) over the same weights. The cache's answers are compared with the
recomputing path's, token for token (bf16 may flip near-ties).
"""

from __future__ import annotations

import contextlib
import time

import torch
from context import Context

from trainer.eval.generation import generate
from trainer.model import GPT, ModelConfig

GPU = dict(n_layer=12, n_head=12, d_model=768, vocab_size=50304, prompts=256, batch=64,
           new_tokens=32)
SMOKE = dict(n_layer=2, n_head=2, d_model=64, vocab_size=512, prompts=8, batch=4, new_tokens=8)


def run(ctx: Context) -> dict:
    s = dict(SMOKE if ctx.smoke else GPU)
    n_prompts, batch, new_tokens = s.pop("prompts"), s.pop("batch"), s.pop("new_tokens")
    torch.manual_seed(0)
    model = GPT(ModelConfig(pos="rope", norm="rmsnorm", mlp="swiglu", bias=False,
                            tie_embeddings=False, ctx=128, **s)).to(ctx.device).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(16, 49, (n_prompts,), generator=gen).tolist()
    prompts = [torch.randint(0, s["vocab_size"], (n,), generator=gen).tolist() for n in lengths]
    batches = [prompts[i:i + batch] for i in range(0, n_prompts, batch)]
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        answers = {}
        for use_cache in (True, False):
            autocast = (torch.autocast(ctx.device.type, dtype=dtype)
                        if dtype != torch.float32 else contextlib.nullcontext())
            with autocast:
                generate(model, batches[0], 2, use_cache=use_cache)  # warm-up: kernels, allocator
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize()
                began = time.perf_counter()
                answers[use_cache] = [a for b in batches
                                      for a in generate(model, b, new_tokens, use_cache=use_cache)]
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - began
            rows.append({"dtype": str(dtype).split(".")[-1], "KV cache": use_cache,
                         "questions/s": n_prompts / seconds,
                         "new tokens/s": sum(map(len, answers[use_cache])) / seconds})
        same = sum(a == b for a, b in zip(answers[True], answers[False]))
        rows[-2]["answers equal to no-cache"] = f"{same}/{n_prompts}"
        rows[-2]["speed-up"] = rows[-2]["questions/s"] / rows[-1]["questions/s"]
    return {"model": f"llama layout, {s['n_layer']} layers x {s['d_model']} wide, vocab "
                     f"{s['vocab_size']}", "prompts": f"{n_prompts} prompts of 16-48 tokens in "
                     f"batches of {batch}, {new_tokens} new tokens each, greedy", "rows": rows}
