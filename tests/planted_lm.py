"""A planted language model for evaluation tests: a rule over the tokens a position sees, behind
the interface generation.py uses of a GPT."""

from types import SimpleNamespace

import torch
from torch import nn

from trainer.model import ModelConfig


class PlantedLM(nn.Module):
    """Subclasses give `next_logits(context, out)`: fill `out` [V] (zeros coming in) with the
    logits after `context`, the token ids of the position's document up to and including it.

    It has what generation.py uses of a GPT (config sizes the KV cache, positional.max_positions,
    tok_emb.weight's device and dtype, forward(ids, pos, doc, cache, last_only)) and, like a
    transformer, sees a row's earlier tokens only through what it cached: one "key" per token,
    the token id.
    """

    def __init__(self, vocab_size: int, max_positions: int | None = None):
        super().__init__()
        self.config = ModelConfig(n_layer=1, n_head=1, d_model=1, vocab_size=vocab_size)
        self.tok_emb = nn.Embedding(vocab_size, 1)
        self.positional = SimpleNamespace(max_positions=max_positions)

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                doc_ids: torch.Tensor | None = None, cache=None,
                last_only: bool = False) -> torch.Tensor:
        tokens, doc = input_ids, torch.ones_like(input_ids) if doc_ids is None else doc_ids
        if cache is not None:
            _, doc = cache.extend(position_ids, doc)
            keys = input_ids[:, None, :, None].to(cache.k.dtype)
            tokens = cache.update(0, keys, keys)[0][:, 0, :, 0].long()
        batch, new = input_ids.shape
        seen = tokens.shape[1] - new
        wanted = [seen + new - 1] if last_only else list(range(seen, seen + new))
        logits = torch.zeros(batch, len(wanted), self.config.vocab_size)
        for b in range(batch):
            for j, t in enumerate(wanted):
                self.next_logits(tokens[b, : t + 1][doc[b, : t + 1] == doc[b, t]].tolist(),
                                 logits[b, j])
        return logits
