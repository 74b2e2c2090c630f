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
and full passes run `CanonConv`: the batch's rows as one sequence through one depthwise
convolution call (oneDNN's channels-last kernel on CPU: one pass over the activations where K
shifted multiply-adds make K), the few outputs whose taps reach into the previous row or
document recomputed over their own document; backward, the input's gradient is the same
convolution on the flipped taps and the taps' gradient one chunked accumulation over K-token
windows (`_lagged_dot`). KV-cache steps and compiled graphs (whose compiler fuses the sum
itself, and where the boundary tokens' count would be a dynamic shape) run the plain sum with
a mask per tap (`_masked_sum`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model.config import ModelConfig
from trainer.model.kv_cache import KVCache


@dataclass
class Crossing:
    """Where CanonConv's one convolution over a pass's B * T flattened tokens is wrong, by flat
    token index, each tap as (token, lag: the token `lag` places back, tap K-1-lag of w):
    `index`, `read` (= index - lag) and `tap` [n], each tap that reads across a boundary (the
    row before, or another document); `token` [U], each token with such a tap, and `own_token`,
    `own_read`, `own_tap` [m], every tap of those tokens that reads their own document (their
    sums are recomputed); `pair_token`, `pair_read`, `pair_tap` and `pair_sign` [P], the terms
    the taps' gradient, summed over the tokens from K-1 on (`_lagged_dot`), must add (+1: the
    first K-1 tokens' taps within x) or take back (-1: crossing taps of the tokens it sums)."""

    index: Tensor
    read: Tensor
    tap: Tensor
    token: Tensor
    own_token: Tensor
    own_read: Tensor
    own_tap: Tensor
    pair_token: Tensor
    pair_read: Tensor
    pair_tap: Tensor
    pair_sign: Tensor


def _tap_lists(mask: Tensor, back: int) -> tuple[Tensor, Tensor, Tensor]:
    """The taps where mask [N, K] (token, lag) holds: their tokens, the tokens they read and
    their columns in w."""
    token, lag = mask.nonzero(as_tuple=True)
    return token, token - lag, back - lag


@dataclass
class CanonInputs:
    """What every Canon site of one forward pass shares: `same[j - 1]` [B or 1, T, 1] (bool) says
    whether the token j places back is in each new token's document (None: one document, and
    no cached tokens before); the KV cache while decoding; the pass's Crossing, worked out at
    its first site."""

    same: list[Tensor] | None
    cache: KVCache | None
    kernel: int
    _crossing: dict[tuple[int, int], Crossing] = field(default_factory=dict)

    def crossing(self, x: Tensor) -> Crossing:
        """The Crossing of the tokens of x [B, T, C]."""
        batch, length, _ = x.shape
        if (batch, length) not in self._crossing:
            back = self.kernel - 1
            lags = torch.arange(self.kernel, device=x.device)  # [K]
            reads = torch.arange(length, device=x.device)[:, None] >= lags  # [T, K]: in the row
            if self.same is not None:
                reads = reads & torch.cat((torch.ones_like(self.same[0]), *self.same), -1)
            reads = reads.expand(batch, length, self.kernel).reshape(-1, self.kernel)  # [N, K]
            flat = torch.arange(batch * length, device=x.device)[:, None]
            crosses = ~reads & (flat >= lags)  # [N, K]; before token 0: the zero padding
            index, read, tap = _tap_lists(crosses, back)
            crossed = crosses.any(-1, keepdim=True)  # [N, 1]
            head = flat < back  # [N, 1]: tokens whose window starts before x
            pairs = [_tap_lists(reads & head, back), _tap_lists(crosses & ~head, back)]
            sign = torch.cat([torch.full((len(p[0]), 1), s, device=x.device)
                              for p, s in zip(pairs, (1.0, -1.0))])
            self._crossing[batch, length] = Crossing(
                index, read, tap, crossed[:, 0].nonzero()[:, 0], *_tap_lists(reads & crossed, back),
                *(torch.cat(parts) for parts in zip(*pairs)), sign)
        return self._crossing[batch, length]


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
    """z_n = sum_j w[:, K-1-j] * x_(n-j) + extra * x_n over the taps of x [B, T, C] that read
    their own row and document, for w [C, K]. The B rows run as one sequence of B * T tokens:
    one convolution call (`_correlate`), whose outputs at the tokens of `crossing` are then
    recomputed from their own taps alone (so no output depends on another document's tokens,
    bit for bit); backward, the gradients the crossing taps sent are taken back."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, crossing: Crossing, extra: float) -> Tensor:
        dtype = torch.promote_types(x.dtype, w.dtype)  # what x * w would be
        flat = x.contiguous().view(-1, x.shape[-1]).to(dtype)  # [N, C]; a fresh activation: a view
        taps = w.detach().to(dtype, copy=True)  # [C, K]
        taps[:, -1] += extra
        z = _correlate(flat, taps, 0)  # [N, C]
        if crossing.token.numel():  # those tokens' sums again, over their own document alone
            own = flat.index_select(0, crossing.own_read) * _rows(taps, crossing.own_tap)
            z.index_fill_(0, crossing.token, 0).index_add_(0, crossing.own_token, own)
        ctx.save_for_backward(flat, taps)
        ctx.crossing, ctx.shape, ctx.dtypes = crossing, x.shape, (x.dtype, w.dtype)
        return z.view(x.shape)

    @staticmethod
    def backward(ctx, dz: Tensor) -> tuple[Tensor, Tensor, None, None]:
        flat, taps = ctx.saved_tensors
        c = ctx.crossing
        dz = dz.contiguous().view(flat.shape)
        dx = _correlate(dz, taps.flip(1), taps.shape[1] - 1)  # [N, C]: n + j's tap j sends to n
        dx.index_add_(0, c.read, dz.index_select(0, c.index) * _rows(taps, c.tap), alpha=-1)
        dw = _lagged_dot(dz, flat, taps.shape[1])  # [K, C]
        dw.index_add_(0, c.pair_tap, dz.index_select(0, c.pair_token)
                      * flat.index_select(0, c.pair_read) * c.pair_sign)
        return dx.view(ctx.shape).to(ctx.dtypes[0]), dw.t().to(ctx.dtypes[1]), None, None


def _rows(taps: Tensor, tap: Tensor) -> Tensor:
    """Column tap[i] of taps [C, K] as row i: [len(tap), C] (selected from a contiguous
    transpose: index_select's strided path is slower than the tiny copy)."""
    return taps.t().contiguous().index_select(0, tap)


def _correlate(x: Tensor, taps: Tensor, start: int) -> Tensor:
    """out_m = sum_k taps[:, k] * x_(m+k-K+1) (zero outside x) for m in start..start+N-1, x
    [N, C]: [N, C], a view. x is, without a copy, a channels-last image [1, C, 1, N], for
    which oneDNN's depthwise kernel is one pass over the activations on CPU (per-tap slices take
    K); its output [1, C, 1, N+K-1] is channels-last too (the view fails if not)."""
    length, (width, kernel) = x.shape[0], taps.shape
    image = x[None].permute(0, 2, 1).unsqueeze(2)  # [1, C, 1, N]
    out = F.conv2d(image, taps.view(width, 1, 1, kernel), padding=(0, kernel - 1),
                   groups=width)  # [1, C, 1, N+K-1]
    return out.permute(0, 2, 3, 1).view(-1, width)[start:start + length]


_CHUNK = 1 << 18  # elements of the accumulator: it stays in cache while every window is added


def _lagged_dot(dz: Tensor, x: Tensor, kernel: int) -> Tensor:
    """[K, C]: row k = sum_(n >= K-1) dz_n * x_(n+k-K+1) for dz, x [N, C]: the taps'
    gradient over the tokens whose window lies in x (Crossing's pairs add the first K-1).
    dz_n times x's K-token window ending at n, accumulated chunk by chunk into one buffer of
    windows: the two activations are read once, with no product written out."""
    width, dtype = x.shape[1], torch.promote_types(x.dtype, torch.float32)
    if x.shape[0] < kernel:
        return x.new_zeros(kernel, width, dtype=dtype)
    windows = x.unfold(0, kernel, 1).transpose(1, 2)  # [N-K+1, K, C], a view
    dz = dz[kernel - 1:, None]  # [N-K+1, 1, C]
    rows = max(1, min(dz.shape[0], _CHUNK // (kernel * width)))
    acc = dz[:rows].to(dtype) * windows[:rows]  # [rows, K, C]: the first chunk
    for start in range(rows, dz.shape[0], rows):
        part = dz[start:start + rows]
        acc[:part.shape[0]].addcmul_(part, windows[start:start + rows])
    return acc.sum(0)


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
            y = CanonConv.apply(x, w, inputs.crossing(x), 1.0 if folded else 0.0)
        else:
            y = _masked_sum(x, w, inputs, key, 1.0 if folded else 0.0)
        if self.activation:
            y = F.silu(y)
        return x + y if self.residual and not folded else y


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
