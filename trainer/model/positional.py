"""Positional encodings, one small module each, registered by name in positional_options.py.

Every encoding answers the same four questions, and the default answer is "nothing" (NoPE):
`embed` adds to the token embeddings, `rotate` turns queries and keys, `bias` returns an additive
attention bias shared by every layer, `layer_bias` one that differs by layer. Positions are
explicit tensors ([B, T], or [1, T] shared by the batch) so they can restart at each packed
document and continue across KV-cache steps. An encoding's options (`model.<name>`, e.g.
`config.rope`) and whether flash_attn can run it are in its registration, which imports no torch;
a new encoding is a class and a `register_encoding` call, in one plug-in module of its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from trainer.model.config import ModelConfig
    from trainer.model.positional_options import RelativeOptions


class Positional(nn.Module):
    """The interface, with identity answers; subclasses override what they change."""

    max_positions: int | None = None  # positions must stay below this, when there is a limit

    def __init__(self, config: ModelConfig):
        super().__init__()

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive attention bias broadcastable to [B, H, Tq, Tk], the same in every layer, or
        None."""
        return None

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> LayerBias | None:
        """Additive attention biases that differ by layer, made in `dtype` as each layer asks for
        its own, or None."""
        return None

    def alibi_slopes(self, device: torch.device) -> Tensor | None:
        """Per-head ALiBi slopes (fp32) for flash_attn, which applies them itself."""
        return None


class NoPE(Positional):
    """No positional information: causal masking alone tells tokens apart."""


class Learned(Positional):
    """GPT-2: a learned vector per absolute position, added to the token embedding."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.table = nn.Embedding(config.ctx, config.d_model)
        self.max_positions = config.ctx

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        # checked here because an out-of-range index on CUDA is an opaque device assert
        if torch.compiler.is_compiling():
            # reading the span back to the host would split the compiled graph (and sync every
            # step): the check runs inside it instead. On CPU that is a RuntimeError with this
            # message, without the span; on CUDA it is itself a device-side assert, as opaque
            # as the one avoided (the message is lost and the CUDA context unusable), so there
            # an eager run (train.compile false) is the one that names the span
            inside = ((pos >= 0) & (pos < self.max_positions)).all()
            torch._assert_async(inside, f"position ids outside [0, ctx={self.max_positions}): "
                                "the range learned positions cover")
        else:
            low, high = (int(v) for v in pos.aminmax())
            if low < 0 or high >= self.max_positions:
                raise ValueError(f"position ids span [{low}, {high}]: learned positions cover "
                                 f"[0, ctx={self.max_positions})")
        return x + self.table(pos)


class Rotary(Positional):
    """RoPE (Su et al.): rotate each pair of query/key channels by position x frequency.

    Channels are paired as (i, i + rotated/2), where the first `rotated` channels of each head
    rotate (all of them unless `rope.fraction` < 1: GPT-NeoX's partial rotary, whose other
    channels carry no position). Frequencies are computed in fp32 from the
    positions rather than stored, so casting the model to bf16 cannot round them; the cos and
    sin of the last positions seen are kept, since every layer (and q and k) rotates by the same
    position tensor in a forward pass. Under torch.compile they are computed where used (a
    cache on the module would be a guard that recompiles every pass); the compiled graph
    computes the same cos and sin once for all layers.
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.rotated = config.rope.rotated(config.head_dim)
        self.theta = config.rope.theta
        self._angles: tuple[Tensor, Tensor, Tensor] | None = None  # (pos, cos, sin)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self._turn(q, *self._cos_sin(q_pos)), self._turn(k, *self._cos_sin(k_pos))

    def _cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        if torch.compiler.is_compiling():
            return self._angles_of(pos)
        if self._angles is None or self._angles[0] is not pos:  # identity: the same tensor
            self._angles = (pos, *self._angles_of(pos))
        return self._angles[1], self._angles[2]

    def _angles_of(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of position x frequency, each [B, 1, T, rotated/2] in fp32."""
        half = self.rotated // 2
        freq = self.theta ** (-torch.arange(half, device=pos.device, dtype=torch.float32) / half)
        angle = pos[:, None, :, None].float() * freq
        return angle.cos(), angle.sin()

    def _turn(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        if self.rotated == x.shape[-1]:
            return self._rotate(x, cos, sin)
        turned, kept = x.split((self.rotated, x.shape[-1] - self.rotated), dim=-1)
        return torch.cat((self._rotate(turned, cos, sin), kept), dim=-1)

    @staticmethod
    def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


def alibi_slopes(n_head: int) -> list[float]:
    """Press et al.'s geometric slopes 2^(-8/n), 2^(-16/n), ... for n a power of two; other
    head counts take the nearest lower power's slopes plus every other slope of the next one."""
    low = 2 ** math.floor(math.log2(n_head))
    slopes = [2 ** (-8 * (i + 1) / low) for i in range(low)]
    extra = [2 ** (-8 * (i + 1) / (2 * low)) for i in range(0, 2 * low, 2)]
    return slopes + extra[: n_head - low]


class ALiBi(Positional):
    """ALiBi: each head penalises attention linearly in distance, bias = -slope * (i - j)."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.slopes = alibi_slopes(config.n_head)  # a list, not a buffer: bf16 casts round buffers

    def alibi_slopes(self, device: torch.device) -> Tensor:
        return torch.tensor(self.slopes, dtype=torch.float32, device=device)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None, :, None] - k_pos[:, None, None, :]).float()  # [B, 1, Tq, Tk]
        return -self.alibi_slopes(q_pos.device)[:, None, None] * distance


class RelativeBuckets(Positional):
    """T5-style causal distance buckets, the index of the learned relative biases below.

    Distances below `buckets // 2` get one bucket each, longer ones share log-spaced buckets
    up to `max_distance`, beyond which all distances share the last.
    """

    def __init__(self, config: ModelConfig, options: RelativeOptions):
        super().__init__(config)
        self.buckets = options.buckets
        self.max_distance = options.max_distance

    def bucket(self, distance: Tensor) -> Tensor:
        exact = self.buckets // 2
        scale = (self.buckets - exact) / math.log(self.max_distance / exact)
        # clamp before the log: distances below `exact` take the other branch anyway
        far = exact + (torch.log(distance.clamp(min=exact).float() / exact) * scale).long()
        return torch.where(distance < exact, distance, far.clamp(max=self.buckets - 1))

    def distance_buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        # keys ahead of the query are masked anyway; clamping keeps their bucket index valid
        distance = (q_pos[:, :, None] - k_pos[:, None, :]).clamp(min=0)  # [B, Tq, Tk]
        return self.bucket(distance)


class RelativeBias(RelativeBuckets):
    """T5-style learned relative bias: one scalar per head and distance bucket, shared by layers,
    added to the query-key scores."""

    def __init__(self, config: ModelConfig):
        super().__init__(config, config.relative)
        self.table = nn.Embedding(self.buckets, config.n_head)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.table(self.distance_buckets(q_pos, k_pos)).permute(0, 3, 1, 2)  # [B,H,Tq,Tk]


class LayerBias:
    """Per-layer biases, indexed like a stack [L, B, H, Tq, Tk] but never built as one: the layers
    share one pass's distance buckets [B, Tq, Tk] and each looks them up in its own table when it
    runs. With packed documents (a bucket map per row) the stack would be L times the size of
    one layer's attention scores."""

    def __init__(self, tables: nn.ModuleList, buckets: Tensor, dtype: torch.dtype):
        self.tables, self.buckets, self.dtype = tables, buckets, dtype

    def __getitem__(self, layer: int) -> Tensor:
        table = self.tables[layer].weight.to(self.dtype)  # cast the [buckets, H] table, not its map
        return F.embedding(self.buckets, table).permute(0, 3, 1, 2)  # [B, H, Tq, Tk]


class PositionOnly(RelativeBuckets):
    """GPT_pos of Physics of Language Models Part 1: attention weights depend on relative
    position alone, never on token content (values still carry it).

    Each layer has its own table of one scalar per head and distance bucket (the buckets of
    `relative`), and the queries are zeroed, so the query-key term adds nothing to the scores:
    softmax(bias) mixes the values.
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config, config.pos_only)
        self.tables = nn.ModuleList(nn.Embedding(self.buckets, config.n_head)
                                    for _ in range(config.n_layer))

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(q), k  # no content in the scores

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> LayerBias:
        # int32: the map lives through the whole pass, at half the size of int64
        return LayerBias(self.tables, self.distance_buckets(q_pos, k_pos).int(), dtype)


class Uniform(Positional):
    """GPT_uni of Physics of Language Models Part 1: head h = 1..n_head averages the values of the
    last 2^h - 1 tokens, itself included (windows 1, 3, 7, 15, ...), of those the causal and
    document masks allow, so near a document start it averages what there is.

    No parameters: the bias is 0 inside a head's window and -inf outside, and the queries are
    zeroed so the query-key term adds nothing to it.
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        # 2^62 - 1 tokens: wider than any sequence, and still an int64 however many heads
        self.windows = [2 ** min(h, 62) - 1 for h in range(1, config.n_head + 1)]

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(q), k  # no content in the scores

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        # keys ahead of the query (negative distances) are masked anyway
        distance = q_pos[:, None, :, None] - k_pos[:, None, None, :]  # [B, 1, Tq, Tk]
        windows = torch.tensor(self.windows, device=q_pos.device)[:, None, None]  # [H, 1, 1]
        return torch.where(distance < windows, 0.0, float("-inf"))  # [B, H, Tq, Tk]
