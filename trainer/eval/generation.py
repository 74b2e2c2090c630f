"""Batched generation with a KV cache: greedy or sampled, stopping at EOS.

Prompts of different lengths are left-padded into one batch. Pads form their own document
(doc id 0, real tokens 1), so no real token ever attends to a pad, and each row's positions
start at 0 at its first real token: a row decodes exactly as it would alone.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from trainer.model import GPT
from trainer.model.attention import compute_dtype
from trainer.model.kv_cache import KVCache


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """The model in eval mode under torch.inference_mode, its own mode given back after: how
    the evaluation tasks run their teacher-forced passes."""
    training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(training)


@torch.inference_mode()
def generate(model: GPT, prompts: list[list[int]], max_new_tokens: int, eos_id: int | None = None,
             temperature: float = 0.0, top_k: int | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None) -> list[list[int]]:
    """Continue each prompt by up to max_new_tokens tokens; return only the new tokens per row,
    cut before the first eos_id. temperature 0 is greedy; otherwise sampling from
    softmax(logits / temperature), restricted to the top_k tokens when given. use_cache=False
    recomputes the whole sequence at every step (the reference the cache must match).
    The model runs in eval mode and gets its previous mode back."""
    _check_arguments(model, prompts, max_new_tokens, temperature, top_k)
    training = model.training
    model.eval()
    try:
        return _generate(model, prompts, max_new_tokens, eos_id, temperature, top_k, use_cache,
                         generator)
    finally:
        model.train(training)


def _check_arguments(model: GPT, prompts: list[list[int]], max_new_tokens: int,
                     temperature: float, top_k: int | None) -> None:
    if not prompts or not all(prompts):
        raise ValueError("generate needs at least one prompt, and every prompt a token")
    if max_new_tokens < 0 or temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"max_new_tokens={max_new_tokens}, temperature={temperature}, "
                         f"top_k={top_k}: need max_new_tokens >= 0, temperature >= 0, top_k >= 1")
    limit = model.positional.max_positions
    longest = max(map(len, prompts))
    if limit is not None and longest + max_new_tokens > limit:
        raise ValueError(f"prompt of {longest} tokens + max_new_tokens={max_new_tokens} exceeds "
                         f"the {limit} positions of pos={model.config.pos!r}")


def _generate(model: GPT, prompts: list[list[int]], max_new_tokens: int, eos_id: int | None,
              temperature: float, top_k: int | None, use_cache: bool,
              generator: torch.Generator | None) -> list[list[int]]:
    device = model.tok_emb.weight.device
    ids, pos, doc = left_padded(prompts, device)
    width = ids.shape[1]
    cache = None
    if use_cache:
        c = model.config
        cache = KVCache(c.n_layer, len(prompts), c.n_head, width + max_new_tokens, c.head_dim,
                        compute_dtype(model.tok_emb.weight), device)
    logits = model(ids, pos, doc, cache, last_only=True)[:, -1]
    next_pos, real = pos[:, -1:] + 1, doc[:, -1:]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    steps: list[Tensor] = []
    while len(steps) < max_new_tokens:
        token = _pick(logits, temperature, top_k, generator)
        steps.append(token)
        if eos_id is not None:
            done |= token == eos_id
        if len(steps) == max_new_tokens or done.all():
            break
        if cache is not None:
            logits = model(token[:, None], next_pos, real, cache, last_only=True)[:, -1]
        else:
            ids, pos = torch.cat((ids, token[:, None]), 1), torch.cat((pos, next_pos), 1)
            doc = torch.cat((doc, real), 1)
            logits = model(ids, pos, doc, last_only=True)[:, -1]
        next_pos = next_pos + 1

    rows = torch.stack(steps, 1).tolist() if steps else [[] for _ in prompts]
    return [row[: row.index(eos_id)] if eos_id in row else row for row in rows]


def left_padded(sequences: list[list[int]], device: torch.device
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Token ids, position ids and doc ids [B, T] of sequences left-padded to one width T: pads
    are doc 0 and the sequence doc 1, and positions start at 0 at each first real token."""
    width = max(map(len, sequences))
    ids = torch.tensor([[0] * (width - len(s)) + s for s in sequences], device=device)
    pads = torch.tensor([width - len(s) for s in sequences], device=device)[:, None]
    column = torch.arange(width, device=device)
    return ids, (column - pads).clamp(min=0), (column >= pads).long()


@torch.inference_mode()
def continuation_logprobs(model: GPT, contexts: list[list[int]],
                          continuations: list[list[int]]) -> list[float]:
    """log p(continuation | context) per row, summed over the continuation's tokens: one
    teacher-forced forward pass over the batch (how a forced choice between answers is scored).
    The model runs in eval mode and gets its previous mode back."""
    if not all(contexts) or not all(continuations) or len(contexts) != len(continuations):
        raise ValueError("continuation_logprobs needs one non-empty continuation per non-empty "
                         "context")
    training = model.training
    model.eval()
    try:
        sequences = [c + x for c, x in zip(contexts, continuations)]
        ids, pos, doc = left_padded(sequences, model.tok_emb.weight.device)
        logprobs = model(ids, pos, doc)[:, :-1].log_softmax(-1)  # [B, T-1, V]: predicts ids[1:]
        picked = logprobs.gather(-1, ids[:, 1:, None])[..., 0]  # [B, T-1]
        return [picked[i, -len(x):].sum().item() for i, x in enumerate(continuations)]
    finally:
        model.train(training)


def _pick(logits: Tensor, temperature: float, top_k: int | None,
          generator: torch.Generator | None) -> Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]
