"""Mechanism probes of a GPT ("Birth of a Transformer", Bietti et al. 2023): attention maps, the
induction-head scores read off them, and the associative-memory probes read off the weights.

Attention maps are each layer's softmax(q k^T / sqrt(Dh) + mask), recomputed from the layer's own
modules (its qkv projection, Canon-B, the encoding's rotation and biases) on the input a forward
pass hands it (a pre-hook), so any backend the pass runs gives the same maps.

Scores, the weight a head puts on given keys (sums and counts, so that batches add up):
- previous token: from each position t >= 1 on t - 1;
- induction: from a query position t on the positions right after the earlier occurrences of
  its token (what an induction head copies from; all of them, since each holds what followed).
A head attending uniformly scores `uniform_weight` of the same keys (chance).

Memory probes (recall@1 of an association, from the weight matrices alone; the norms a block
applies are applied to the vectors, none is the identity; with several heads the products sum
the heads' scores, as the official probes' whole-matrix products do):
- output: token v through layer 2's value and output maps and the head, argmax == v
  (official wo1);
- induction key: layer 2's query of trigger a against the key of trigger b as layer 1's value
  and output maps wrote it, argmax over the triggers == a (official wk1);
- previous token: layer 1's query of learned position t against the keys of positions
  0..n-2, argmax == t - 1 (official wk0; learned positions only).
"""

import inspect
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model import GPT
from trainer.model.attention import build_mask, linear_chunks


def attention_maps(model: GPT, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """The logits [B, T, V] and attention weights [L, B, H, T, T] (fp32) of `tokens` [B, T], one
    document per row from position 0."""
    maps: list[Tensor] = []
    handles = [block.attn.register_forward_pre_hook(_capturer(model, maps), with_kwargs=True)
               for block in model.blocks]
    try:
        with torch.no_grad():
            logits = model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return logits, torch.stack(maps)


def _capturer(model: GPT, maps: list[Tensor]):
    def capture(attn: nn.Module, args: tuple, kwargs: dict) -> None:
        bound = inspect.signature(attn.forward).bind(*args, **kwargs).arguments
        maps.append(_weights(model, attn, bound["x"], bound["pos"], bound.get("layer", 0),
                             bound.get("canon")))
    return capture


def _weights(model: GPT, attn: nn.Module, x: Tensor, pos: Tensor, layer: int, canon) -> Tensor:
    batch, length, _ = x.shape
    qkv = linear_chunks(x, attn.qkv, 3)  # each [B, T, C]
    if attn.canon_b is not None:
        qkv = attn.canon_b(qkv, canon, layer)
    q, k = (t.view(batch, length, attn.n_head, -1).transpose(1, 2) for t in qkv[:2])  # [B,H,T,Dh]
    q, k = attn.rotate(q, k, pos, pos)
    mask = build_mask("math", model.positional, pos, pos, None, None, torch.float32)
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1])  # [B, H, T, T]
    return (scores + mask.for_layer(layer).tensor).softmax(dim=-1)


def previous_keys(tokens: Tensor) -> Tensor:
    """[B, T, T] bool: query t >= 1 and key t - 1 (a previous-token head's)."""
    batch, length = tokens.shape
    index = torch.arange(length, device=tokens.device)
    keys = index[None, :] == index[:, None] - 1  # [T, T]
    return keys.expand(batch, length, length)


def induction_keys(tokens: Tensor, queries: Tensor | None = None) -> Tensor:
    """[B, T, T] bool: for each query position t (queries [B, T] bool; None: every position) the
    positions right after the earlier occurrences of tokens[t] (where an induction head reads
    what followed it)."""
    length = tokens.shape[1]
    index = torch.arange(length, device=tokens.device)
    # key j follows an occurrence at j - 1 < t of token t
    same = tokens[:, :, None] == tokens[:, None, :]  # [B, T (query), T (earlier)]
    earlier = same & (index[None, :] < index[:, None])
    keys = F.pad(earlier[:, :, :-1], (1, 0))  # occurrence i -> key i + 1
    return keys if queries is None else keys & queries[:, :, None]


def attention_to(maps: Tensor, keys: Tensor) -> tuple[Tensor, int]:
    """The weight [L, H] each head puts on `keys` ([B, T, T] bool), summed over the queries
    that have a key, and the number of those queries."""
    weight = (maps * keys[None, :, None]).sum(dim=-1)  # [L, B, H, T]
    return weight.sum(dim=(1, 3)), int(keys.any(dim=-1).sum())


def uniform_weight(keys: Tensor) -> tuple[float, int]:
    """What heads attending uniformly put on `keys` ([B, T, T] bool, causal), summed over the
    queries that have a key (their number beside it): the score's chance."""
    positions = torch.arange(1, keys.shape[1] + 1, device=keys.device)  # query t sees t + 1
    share = keys.sum(dim=-1) / positions  # [B, T]
    return float(share.sum()), int(keys.any(dim=-1).sum())


def memory_probes(model: GPT, outputs: list[int], triggers: list[int], positions: int
                  ) -> dict[str, float | None]:
    """Recall of the three memories (module docstring): `output` over the output tokens,
    `induction_key` over the triggers, `previous_token` over positions 0..positions-1; None
    where the model cannot hold one (one layer; positions not learned)."""
    with torch.no_grad():
        learned = getattr(model.positional, "table", None)
        probes = {"output": None, "induction_key": None,
                  "previous_token": None if learned is None else
                  _previous_token_memory(model, learned.weight[:positions])}
        if len(model.blocks) >= 2:
            probes["output"] = _output_memory(model, outputs)
            probes["induction_key"] = _induction_key_memory(model, triggers)
    return probes


def _qkv(model: GPT, layer: int, x: Tensor) -> list[Tensor]:
    """Block `layer`'s query, key and value of the vectors x [N, C] (its norm applied)."""
    block = model.blocks[layer]
    return linear_chunks(block.norm1(x), block.attn.qkv, 3)


def _written(model: GPT, layer: int, x: Tensor) -> Tensor:
    """What block `layer`'s attention writes into the stream [N, C] when it attends to x alone:
    W_O W_V x."""
    return model.blocks[layer].attn.proj(_qkv(model, layer, x)[2])


def _recall(scores: Tensor, truth: Tensor) -> float:
    return float((scores.argmax(dim=-1) == truth).float().mean())


def _output_memory(model: GPT, outputs: list[int]) -> float | None:
    if not outputs:
        return None
    ids = torch.tensor(outputs, device=model.lm_head.weight.device)
    logits = model.lm_head(model.norm(_written(model, 1, model.tok_emb(ids))))  # [N, V]
    return _recall(logits, ids)


def _induction_key_memory(model: GPT, triggers: list[int]) -> float | None:
    if not triggers:
        return None
    ids = torch.tensor(triggers, device=model.lm_head.weight.device)
    embedded = model.tok_emb(ids)  # [K, C]
    keys = _qkv(model, 1, _written(model, 0, embedded))[1]  # [K, C]
    queries = _qkv(model, 1, embedded)[0]  # [K, C]
    return _recall(queries @ keys.T, torch.arange(len(ids), device=ids.device))


def _previous_token_memory(model: GPT, table: Tensor) -> float | None:
    if len(table) < 2:
        return None
    queries, keys = _qkv(model, 0, table[1:])[0], _qkv(model, 0, table[:-1])[1]  # [n-1, C]
    return _recall(queries @ keys.T, torch.arange(len(table) - 1, device=table.device))
