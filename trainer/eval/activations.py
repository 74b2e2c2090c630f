"""Hidden states of a frozen GPT at chosen tokens, per layer: the features probes train on.

Layer 0 is the embeddings entering block 0, layer l the residual stream after block l. Forward
hooks on the blocks read them, so the model's forward stays as it is; the forward stops after
the deepest layer asked for (later blocks and the head's logits are never needed).
"""

import numpy as np
import torch
from torch import Tensor

from trainer.model import GPT


class _Done(Exception):
    """Raised by the deepest layer's hook: the rest of the forward pass is not needed."""


@torch.inference_mode()
def extract_features(model: GPT, token_lists: list[list[int]], positions: list[list[int]],
                     batch_size: int, layers: list[int]) -> np.ndarray:
    """Features [rows, len(layers), d_model] (float32): for each token list (one document,
    positions from 0) and each of its `positions`, the hidden state at that token in each of
    `layers`; rows run document by document, each document's positions in the order given.
    Batches of `batch_size` documents, no gradient; the model runs in eval mode and gets its
    previous mode back."""
    n_layer = model.config.n_layer
    if not layers or not all(0 <= layer <= n_layer for layer in layers):
        raise ValueError(f"layers={layers}: need layers in [0, {n_layer}]")
    if len(token_lists) != len(positions) or not all(
            0 <= p < len(t) for t, ps in zip(token_lists, positions) for p in ps):
        raise ValueError("every position must index a token of its own token list")
    starts = np.cumsum([0] + [len(p) for p in positions])
    features = np.empty((int(starts[-1]), len(layers), model.config.d_model), dtype=np.float32)
    deepest = max(layers)
    captured: dict[int, Tensor] = {}
    where: list[Tensor] = []  # the batch's (row, token) pairs to read, set per batch

    def keep(layer: int, x: Tensor) -> None:  # x [B, T, d_model]
        captured[layer] = x[where[0], where[1]].float()  # [positions in batch, d_model]
        if layer == deepest:
            raise _Done

    hooks = [model.blocks[layer - 1].register_forward_hook(
        lambda _module, _args, out, layer=layer: keep(layer, out)) for layer in layers if layer]
    if 0 in layers:
        hooks.append(model.blocks[0].register_forward_pre_hook(
            lambda _module, args: keep(0, args[0])))
    training = model.training
    model.eval()
    device = model.tok_emb.weight.device
    # similar lengths share a batch (less padding); only tokens up to the last position matter
    ends = [max(p, default=-1) + 1 for p in positions]
    order = [i for i in sorted(range(len(token_lists)), key=ends.__getitem__) if ends[i]]
    try:
        for first in range(0, len(order), batch_size):
            batch = order[first : first + batch_size]
            width = ends[batch[-1]]
            # right padding: causal attention keeps every real token blind to the pads after it,
            # and each row's positions run 0, 1, ... as a document's do
            ids = torch.tensor([token_lists[i][: ends[i]] + [0] * (width - ends[i])
                                for i in batch], device=device)
            where[:] = [torch.tensor([b for b, i in enumerate(batch) for _ in positions[i]],
                                     device=device),
                        torch.tensor([p for i in batch for p in positions[i]], device=device)]
            try:
                model(ids)
            except _Done:
                pass
            block = torch.stack([captured[layer] for layer in layers], 1).cpu().numpy()
            at = 0
            for i in batch:  # back to the documents' own order
                n = len(positions[i])
                features[starts[i] : starts[i] + n] = block[at : at + n]
                at += n
    finally:
        for hook in hooks:
            hook.remove()
        model.train(training)
    return features
