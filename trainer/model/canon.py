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
and full passes on CPU in float32 or float64 run `CanonConv`, canon_cpu.py's two compiled loops
over all of a site's parts at once, on torch's own OpenMP threads (one pass over the activations
forward; backward, the input's and the taps' gradients in one pass). KV-cache steps, compiled
graphs (whose compiler fuses the sum itself), other devices and dtypes run the plain sum with a
mask per tap (`_masked_sum`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model.config import ModelConfig
from trainer.model.kv_cache import KVCache


@dataclass
class CanonInputs:
    """What every Canon site of one forward pass shares: `same[j - 1]` [B or 1, T, 1] (bool) says
    whether the token j places back is in each new token's document (None: one document, and
    no cached tokens before); the KV cache while decoding; CanonConv's reach, worked out at the
    pass's first site."""

    same: list[Tensor] | None
    cache: KVCache | None
    kernel: int
    _reach: dict[tuple[int, int], Tensor] = field(default_factory=dict)

    def reach(self, x: Tensor) -> Tensor:
        """[B * T] (int64): how many tokens before each token of x [B, T, C] are of its own row
        and document, at most K-1."""
        batch, length, _ = x.shape
        if (batch, length) not in self._reach:
            # [T, K-1]: lag j's token is in the row; then, in the document too
            reads = torch.arange(length)[:, None] >= torch.arange(1, self.kernel)
            if self.same is not None:
                reads = reads & torch.cat(self.same, -1).cpu()
            # the lags a token reads run 1..reach: the first lag it does not read ends them
            reach = reads.long().cumprod(-1).sum(-1)  # [B or 1, T] or [T]
            self._reach[batch, length] = reach.expand(batch, length).reshape(-1).contiguous()
        return self._reach[batch, length]


def canon_inputs(kernel: int, batch: int, doc: Tensor | None, cache: KVCache | None
                 ) -> CanonInputs:
    """The shared inputs of a pass over `batch` rows of new tokens of document ids `doc` ([B or
    1, T], None: one document); with a cache, its `extend` has already recorded them."""
    if doc is None:
        return CanonInputs(None, cache, kernel)
    length, back = doc.shape[1], kernel - 1
    earlier = torch.full((doc.shape[0], back), -1, dtype=doc.dtype, device=doc.device)
    if cache is not None:  # the cached tokens just before the new ones, right-aligned
        start = cache.length - length
        seen = cache.doc[:, max(0, start - back):start]
        earlier = torch.cat((earlier.expand(seen.shape[0], -1)[:, seen.shape[1]:], seen), 1)
    docs = torch.cat((earlier, doc.expand(earlier.shape[0], -1)), 1)  # [B, K-1+T]
    now = docs[:, back:]
    same = [(docs[:, back - j:back - j + length] == now)[..., None] for j in range(1, kernel)]
    return CanonInputs(same, cache, kernel)


class CanonConv(torch.autograd.Function):
    """One site's convolution on CPU: z_n = sum_j w[:, K-1-j] * x_(n-j) + extra * x_n for each
    part x [B, T, C_i] of its input, w [C, K] (or the module's weight, [C, 1, K]) split by the
    parts' widths, over the taps that read their own row and document (j <= reach[n], reach
    [B * T])."""

    @staticmethod
    def forward(ctx, w: Tensor, reach: Tensor, extra: float, *xs: Tensor) -> tuple[Tensor, ...]:
        from trainer.model import canon_cpu  # numba: loaded by a Canon model's first pass

        dtype = torch.promote_types(xs[0].dtype, w.dtype)  # what x * w would be
        flats = [x.detach().contiguous().view(-1, x.shape[-1]).to(dtype) for x in xs]  # [N, C_i]
        weight = w.detach().view(w.shape[0], -1).to(dtype).contiguous()  # [C, K]
        ctx.save_for_backward(reach, weight, *flats)
        ctx.extra, ctx.dtypes, ctx.shape = extra, (xs[0].dtype, w.dtype), w.shape
        zs = canon_cpu.forward(flats, weight, extra, reach)
        return tuple(z.view(x.shape) for z, x in zip(zs, xs))

    @staticmethod
    def backward(ctx, *dzs: Tensor) -> tuple[Tensor | None, ...]:
        from trainer.model import canon_cpu

        reach, weight, *flats = ctx.saved_tensors
        dxs, dw = canon_cpu.backward(
            [dz.contiguous().view(x.shape).to(x.dtype) for dz, x in zip(dzs, flats)],
            flats, weight, ctx.extra, reach)  # [N, C_i] each, and [C, K]
        return (dw.view(ctx.shape).to(ctx.dtypes[1]), None, None,
                *(dx.view(dz.shape).to(ctx.dtypes[0]) for dx, dz in zip(dxs, dzs)))


class Canon(nn.Conv1d):
    """One site's convolution of `width` channels in one block."""

    def __init__(self, width: int, config: ModelConfig, site: str):
        super().__init__(width, width, config.canon_kernel, groups=width, bias=False)
        self.site = site
        self.residual = config.canon_residual
        self.activation = config.canon_activation

    def forward(self, parts: list[Tensor], inputs: CanonInputs, layer: int) -> list[Tensor]:
        """Each part [B, T, C_i] (their widths sum to the site's) after the site's Canon."""
        # without an activation the residual is one more unit on the current token's tap: a
        # pass over the activations less, forward and backward
        folded = self.residual and not self.activation
        extra = 1.0 if folded else 0.0
        x, w = parts[0], self.weight  # [C, 1, K]
        if (inputs.cache is None and not torch.compiler.is_compiling() and x.device.type == "cpu"
                and torch.promote_types(x.dtype, w.dtype) in (torch.float32, torch.float64)):
            ys = CanonConv.apply(w, inputs.reach(x), extra, *parts)
        else:
            weights = w[:, 0].split([part.shape[-1] for part in parts])  # [C_i, K] each
            ys = [_masked_sum(part, w_i, inputs, (layer, f"canon_{self.site}.{i}"), extra)
                  for i, (part, w_i) in enumerate(zip(parts, weights))]
        if self.activation:
            ys = [F.silu(y) for y in ys]
        if self.residual and not folded:
            ys = [part + y for part, y in zip(parts, ys)]
        return list(ys)


def _masked_sum(x: Tensor, w: Tensor, inputs: CanonInputs, key: tuple[int, str], extra: float
                ) -> Tensor:
    """CanonConv's function as plain tensor ops, each tap masked by `inputs.same`; with a KV
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
