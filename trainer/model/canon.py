"""Canon layers (Physics of Language Models Part 4.1): a causal depthwise convolution over the
last `canon_kernel` tokens, channel by channel, without bias, added to its input (residual).

Token t's output at a site of weight w [C, 1, K] (nn.Conv1d's layout and initialization; tap
K-1 reads the token itself, tap K-1-j the token j places back) is

    y_t = x_t + act(sum_j w[:, 0, K-1-j] * x_(t-j)),   j = 0..K-1,

where a token before the sequence start, or of another packed document, reads as zero: no site
mixes documents. While decoding, each site keeps its last K-1 inputs in the KV cache
(`cache.state[(layer, "canon_<site>.<part>")]`), so a step computes what the full pass does.

A site whose input comes as several tensors (B: q, k and v; D of a gated MLP: gate and up) is one
convolution over their concatenated channels, run part by part on slices of its weight: the
convolution is depthwise, so that is the same function without an activation-sized concat.

Two implementations of one function (bench/bench_canon_cpu.py measured the choice): training
and full passes run `ShiftedSum`, K in-place multiply-adds of shifted slices forward and
backward (a third of the passes over the activations autograd makes of the same sum; F.conv1d's
depthwise backward is slower still on CPU), where a tap that reaches into the previous packed
document is taken back at the few tokens where it does. KV-cache steps and compiled graphs (whose
compiler fuses the sum itself, and where those tokens' count would be a dynamic shape) run the
plain sum with a mask per tap (`_masked_sum`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model.config import ModelConfig
from trainer.model.kv_cache import KVCache


@dataclass
class CanonInputs:
    """What every Canon site of one forward pass shares: `same[j - 1]` [B or 1, T, 1] (bool) says
    whether the token j places back is in each new token's document (None: one document, and
    no cached tokens before); `crossing[j - 1]` [n_j], the indices in the flattened [B * T]
    tokens of those j places or more into their row whose tap j would read the previous
    document (None: none anywhere, or a compiled or cached pass, which use `same`); the KV
    cache while decoding."""

    same: list[Tensor] | None
    crossing: list[Tensor] | None
    cache: KVCache | None


def canon_inputs(kernel: int, batch: int, doc: Tensor | None, cache: KVCache | None
                 ) -> CanonInputs:
    """The shared inputs of a pass over `batch` rows of new tokens of document ids `doc` ([B or
    1, T], None: one document); with a cache, its `extend` has already recorded them."""
    if doc is None:
        return CanonInputs(None, None, cache)
    length, back = doc.shape[1], kernel - 1
    earlier = torch.full((doc.shape[0], back), -1, dtype=doc.dtype, device=doc.device)
    if cache is not None:  # the cached tokens just before the new ones, right-aligned
        start = cache.length - length
        seen = cache.doc[:, max(0, start - back):start]
        earlier = torch.cat((earlier.expand(seen.shape[0], -1)[:, seen.shape[1]:], seen), 1)
    docs = torch.cat((earlier, doc.expand(earlier.shape[0], -1)), 1)  # [B, K-1+T]
    now = docs[:, back:]
    same = [(docs[:, back - j:back - j + length] == now)[..., None] for j in range(1, kernel)]
    if cache is not None or torch.compiler.is_compiling():
        return CanonInputs(same, None, cache)
    return CanonInputs(same, [_crossing(same[j - 1], j, batch) for j in range(1, kernel)], cache)


def _crossing(same: Tensor, j: int, batch: int) -> Tensor:
    """The flat indices of the tokens t >= j whose tap j reads another document (those before j
    ShiftedSum gives no tap j at all)."""
    rows, tokens = (~same[:, j:, 0]).expand(batch, -1).nonzero(as_tuple=True)
    return rows * same.shape[1] + tokens + j


class ShiftedSum(torch.autograd.Function):
    """z_t = sum_j w[:, K-1-j] * x_(t-j) + extra * x_t over the tokens of each row (none before
    its start), for x [B, T, C] and w [C, K]; tap j of the tokens in `crossing[j - 1]` is taken
    back. Forward and backward are in-place multiply-adds on shifted slices."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, crossing: list[Tensor] | None, extra: float
                ) -> Tensor:
        x = x.contiguous()  # a no-op at every site: each input is a fresh activation
        back, flat_x = w.shape[1] - 1, x.view(-1, x.shape[-1])
        z = x * (w[:, back] + extra)
        for j in range(1, back + 1):
            z[:, j:].addcmul_(x[:, :-j], w[:, back - j])
            if crossing is not None:
                taken = flat_x.index_select(0, crossing[j - 1] - j) * w[:, back - j]
                z.view(-1, z.shape[-1]).index_add_(0, crossing[j - 1], taken, alpha=-1)
        ctx.save_for_backward(x, w)
        ctx.crossing, ctx.extra = crossing, extra
        return z

    @staticmethod
    def backward(ctx, dz: Tensor) -> tuple[Tensor, Tensor, None, None]:
        x, w = ctx.saved_tensors
        dz = dz.contiguous()  # once, for the passes below and the flat indexing
        back, width = w.shape[1] - 1, w.shape[0]
        dx = dz * (w[:, back] + ctx.extra)
        dw = torch.empty_like(w)
        dw[:, back] = _dot(dz, x)
        for j in range(1, back + 1):
            dx[:, :-j].addcmul_(dz[:, j:], w[:, back - j])
            dw[:, back - j] = _dot(dz[:, j:], x[:, :-j])
            if ctx.crossing is not None:
                crossing = ctx.crossing[j - 1]
                taken = dz.view(-1, width).index_select(0, crossing)  # [n_j, C]
                dx.view(-1, width).index_add_(0, crossing - j, taken * w[:, back - j], alpha=-1)
                dw[:, back - j] -= (taken * x.view(-1, width).index_select(0, crossing - j)).sum(0)
        return dx, dw, None, None


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """sum over rows and tokens of a * b, per channel: [B, T, C] -> [C]."""
    return torch.linalg.vecdot(a, b, dim=1).sum(0)


class Canon(nn.Conv1d):
    """One site's convolution of `width` channels in one block."""

    def __init__(self, width: int, config: ModelConfig, site: str):
        super().__init__(width, width, config.canon_kernel, groups=width, bias=False)
        self.site = site
        self.residual = config.canon_residual
        self.activation = config.canon_activation

    def forward(self, parts: list[Tensor], inputs: CanonInputs, layer: int) -> list[Tensor]:
        """Each part [B, T, C_i] (their widths sum to the site's) after the site's Canon."""
        weights = self.weight[:, 0].split([part.shape[-1] for part in parts])  # [C_i, K] each
        return [self._convolve(part, w, inputs, (layer, f"canon_{self.site}.{i}"))
                for i, (part, w) in enumerate(zip(parts, weights))]

    def _convolve(self, x: Tensor, w: Tensor, inputs: CanonInputs, key: tuple[int, str]
                  ) -> Tensor:
        # without an activation the residual is one more unit on the current token's tap: a
        # pass over the activations less, forward and backward
        folded = self.residual and not self.activation
        if inputs.cache is None and not torch.compiler.is_compiling():
            y = ShiftedSum.apply(x, w, inputs.crossing, 1.0 if folded else 0.0)
        else:
            y = _masked_sum(x, w, inputs, key, 1.0 if folded else 0.0)
        if self.activation:
            y = F.silu(y)
        return x + y if self.residual and not folded else y


def _masked_sum(x: Tensor, w: Tensor, inputs: CanonInputs, key: tuple[int, str], extra: float
                ) -> Tensor:
    """ShiftedSum's function as plain tensor ops, each tap masked by `inputs.same`; with a KV
    cache the inputs before the new tokens are its state, which it keeps up to date."""
    batch, length, width = x.shape
    back = w.shape[1] - 1
    cache = inputs.cache
    earlier = x.new_zeros(batch, back, width)  # before the sequence: nothing
    if cache is not None:
        earlier = cache.state.get(key, earlier)
    xs = torch.cat((earlier, x), 1)  # [B, K-1+T, C]
    if cache is not None:
        cache.state[key] = xs[:, -back:]
    y = x * (w[:, back] + extra)
    for j in range(1, back + 1):
        tap = xs[:, back - j:back - j + length] * w[:, back - j]
        y = y + (tap if inputs.same is None else tap * inputs.same[j - 1])
    return y


def canon_sites(config: ModelConfig) -> dict[str, int]:
    """Each site that is on, by its letter, and its width: A and C see the normed residual
    stream, B the concatenated q, k and v, D the MLP's pre-activation (gate and up when gated)."""
    mlp = (2 if config.mlp == "swiglu" else 1) * config.ffn_dim
    widths = {"A": config.d_model, "B": 3 * config.d_model, "C": config.d_model, "D": mlp}
    return {site: widths[site] for site in sorted(config.canon)}


def make_canon(config: ModelConfig, site: str) -> Canon | None:
    """The site's Canon, or None when `model.canon` leaves it off."""
    width = canon_sites(config).get(site)
    return None if width is None else Canon(width, config, site.lower())
