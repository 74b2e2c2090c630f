"""Every attention backend against the math one, per positional encoding, on packed documents.

One tiny GPT per encoding, the same weights under each backend (`model.attention`). A batch of
packed documents (doc ids, positions restarting per document) goes forward, a cross-entropy
loss backward. Each backend, in fp32 and under bf16 autocast, is compared with the math backend
in fp32: max abs and relative difference of the logits and of the parameter gradients. The math
backend's own bf16 row is the floor a bf16 backend can reach. A backend the config refuses for
an encoding (model.validate) is listed with its reason; flash_attn runs only in bf16.

Each row records the backend that really ran (`pick_backend` falls back where the asked one
cannot run a pass). Where it fell back with gradients (flex on CPU, which has no flex backward)
the row compares the asked backend's forward alone, under no_grad, and marks its gradients as
not run. A row that raises keeps its error and the others still run.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import replace

import torch
import torch.nn.functional as F
from backends_ran import recording, summary
from bench_train_cpu import packed_docs
from context import Context, guarded, one_line
from torch import Tensor

from trainer.model import GPT, ModelConfig
from trainer.model.attention import HAVE_FLASH
from trainer.model.config import ATTENTION_BACKENDS, complete
from trainer.model.errors import ModelConfigError
from trainer.model.registry import encodings


def backends(cuda: bool) -> list[str]:
    """The backends this machine can run: all of ATTENTION_BACKENDS but auto, flash_attn only
    with CUDA and the package."""
    return [b for b in ATTENTION_BACKENDS
            if b != "auto" and (b != "flash_attn" or (cuda and HAVE_FLASH))]


def refusal(config: ModelConfig) -> str | None:
    try:
        config.validate()
    except ModelConfigError as exc:
        return str(exc)
    return None


def forward(model: GPT, batch: dict[str, Tensor], dtype: torch.dtype) -> Tensor:
    """Logits [B, T, V] of the packed batch, under bf16 autocast when dtype is bfloat16."""
    autocast = (torch.autocast(batch["ids"].device.type, dtype=dtype)
                if dtype != torch.float32 else contextlib.nullcontext())
    with autocast:
        return model(batch["ids"], position_ids=batch["pos"], doc_ids=batch["docs"])


def pass_through(model: GPT, batch: dict[str, Tensor], dtype: torch.dtype
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Logits [B, T, V] (fp32) and parameter gradients of one forward/backward."""
    model.zero_grad(set_to_none=True)
    logits = forward(model, batch, dtype)
    F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten()).backward()
    return logits.detach(), {n: p.grad.float() for n, p in model.named_parameters()
                             if p.grad is not None}


def logit_differences(logits: Tensor, ref_logits: Tensor) -> dict[str, float]:
    """Max abs difference of the logits and that over the reference's max abs value."""
    logit_abs = (logits.float() - ref_logits).abs().max().item()
    return {"logits max abs": logit_abs,
            "logits max rel": logit_abs / ref_logits.abs().max().item()}


def grad_differences(grads: dict[str, Tensor], ref_grads: dict[str, Tensor]
                     ) -> dict[str, float]:
    """The same over all parameter gradients; a gradient missing on one side is an error, not
    a zero."""
    if grads.keys() != ref_grads.keys():
        raise RuntimeError(f"gradients differ in which parameters have one: "
                           f"{sorted(grads.keys() ^ ref_grads.keys())}")
    grad_abs = max((grads[n] - ref_grads[n]).abs().max().item() for n in ref_grads)
    grad_scale = max(g.abs().max().item() for g in ref_grads.values())
    return {"grads max abs": grad_abs, "grads max rel": grad_abs / grad_scale}


def compare(reference: GPT, config: ModelConfig, batch: dict[str, Tensor], dtype: torch.dtype,
            ref_logits: Tensor, ref_grads: dict[str, Tensor]) -> dict:
    """One row's fields: reference's weights under `config` (its attention backend), the
    backend that ran, and its differences from the reference's logits and gradients."""
    model = GPT(config).to(ref_logits.device)
    model.load_state_dict(reference.state_dict())
    with recording() as calls:
        logits, grads = pass_through(model, batch, dtype)
    if summary(calls) == config.attention:
        return {"ran": config.attention, **logit_differences(logits, ref_logits),
                **grad_differences(grads, ref_grads)}
    with_grads = summary(calls)  # pick_backend fell back: the asked backend's forward alone
    with recording() as calls, torch.no_grad():
        logits = forward(model, batch, dtype)
    return {"ran": summary(calls), **logit_differences(logits, ref_logits),
            "grads": f"not run: with gradients {with_grads} ran, not {config.attention}"}


def run(ctx: Context) -> dict:
    shape = (dict(n_layer=2, n_head=4, d_model=64, ctx=64, vocab_size=256, batch=2, doc_len=12)
             if ctx.smoke else
             dict(n_layer=2, n_head=4, d_model=256, ctx=1024, vocab_size=1024, batch=4,
                  doc_len=200))
    batch_size, doc_len = shape.pop("batch"), shape.pop("doc_len")
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, shape["vocab_size"], (batch_size, shape["ctx"] + 1), generator=gen)
    docs, pos = packed_docs(batch_size, shape["ctx"], doc_len, gen)
    batch = {"ids": tokens[:, :-1], "targets": tokens[:, 1:], "docs": docs, "pos": pos}
    batch = {k: v.to(ctx.device) for k, v in batch.items()}
    result = {"reference": "math backend, fp32", "bf16": "torch.autocast(bfloat16), fp32 weights",
              "batch": f"{batch_size} x {shape['ctx']} tokens, packed documents of "
                       f"{doc_len // 2}-{3 * doc_len // 2} tokens",
              "model": dict(shape), "rows": []}
    rows = result["rows"]
    for encoding in encodings():
        config = complete(ModelConfig(pos=encoding, attention="math", dropout=0.0, **shape))
        torch.manual_seed(0)
        try:
            reference = GPT(config).to(ctx.device)
            ref_logits, ref_grads = pass_through(reference, batch, torch.float32)
        except Exception as exc:  # this encoding's rows are lost, the others still run
            traceback.print_exc()
            rows.append({"pos": encoding, "backend": "math", "dtype": "float32 (reference)",
                         "error": one_line(exc)})
            continue
        for backend in backends(ctx.device.type == "cuda"):
            other = replace(config, attention=backend)
            why = refusal(other)
            for dtype in (torch.float32, torch.bfloat16):
                row = {"pos": encoding, "backend": backend, "dtype": str(dtype).split(".")[-1]}
                if why or (backend == "flash_attn" and dtype == torch.float32):
                    rows.append({**row, "refused": why or "flash_attn runs in bf16/fp16 only"})
                    continue
                if backend == "math" and dtype == torch.float32:
                    continue  # the reference itself
                if ctx.left() <= 0:  # nothing new past the deadline: the command limit is near
                    rows.append({**row, "not started": "past the proof's deadline"})
                    continue
                rows.append(guarded(row, compare, reference, other, batch, dtype, ref_logits,
                                    ref_grads))
                ctx.publish(result)
    return result
