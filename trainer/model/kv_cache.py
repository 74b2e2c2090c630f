"""The KV cache of incremental decoding: every layer's keys and values, preallocated."""

import torch
from torch import Tensor


class KVCache:
    """Keys and values of every token seen so far, per layer, in preallocated buffers, with the
    tokens' positions and document ids (shared by all layers), and what block options keep
    across steps (a causal convolution: its last inputs) in `state`, by (layer, option name)."""

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        self.k = torch.zeros(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(batch, max_len, dtype=torch.long, device=device)
        self.doc = torch.zeros_like(self.pos)
        self.length = 0
        self.state: dict[tuple[int, str], Tensor] = {}

    def extend(self, pos: Tensor, doc: Tensor) -> tuple[Tensor, Tensor]:
        """Record the positions and doc ids ([B or 1, T]) of T new tokens; return those of all
        tokens so far. The layers then store the new tokens' keys and values with `update`."""
        start, end = self.length, self.length + pos.shape[-1]
        if end > self.pos.shape[1]:
            raise ValueError(f"KV cache holds {self.pos.shape[1]} tokens, {end} needed")
        self.pos[:, start:end] = pos
        self.doc[:, start:end] = doc
        self.length = end
        return self.pos[:, :end], self.doc[:, :end]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store one layer's keys and values ([B, H, T, Dh]) of the tokens just recorded by
        `extend`; return that layer's keys and values of all tokens so far."""
        start = self.length - k.shape[2]
        self.k[layer, :, :, start:self.length] = k
        self.v[layer, :, :, start:self.length] = v
        return self.k[layer, :, :, :self.length], self.v[layer, :, :, :self.length]
