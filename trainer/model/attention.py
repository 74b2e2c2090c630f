"""Causal self-attention and its backends: flash_attn, FlexAttention, torch SDPA, and an explicit
reference.

Token i attends to key j iff j is not after i and, when document ids are given, both carry the
same id. What that means for one forward pass (a mask, a bias, flex's block mask, or flash's
document boundaries) is built once by `build_mask` and shared by every layer; an encoding whose
bias differs by layer adds each layer's own as that layer runs (`AttentionMask.for_layer`).

Which backend runs a pass (`pick_backend`):
- `math` always runs math; KV-cache steps (decoding) otherwise always run sdpa.
- `flash_attn` and `flex` run only encodings whose attention is rotations and ALiBi slopes
  (rope, learned, none, alibi: the registration's flash_compatible; config validation refuses
  the others). flash_attn needs CUDA and fp16/bf16; flex has no attention dropout (validation
  refuses it with dropout > 0), a backward pass on CUDA only, so on CPU it runs where no
  gradient is taken, and on CUDA a head_dim of at least 16 (inductor's flex kernel refuses
  less; any other width is padded to a power of two inside the kernel). Where the requested one
  cannot run the pass, sdpa does: the same function, with a dense mask. A requested flex that
  falls back says so once (a warning), since it can run elsewhere (forward passes on CPU, CUDA
  at another width), so validation does not refuse it.
- `auto` on CUDA: flash_attn when installed and able; else flex for packed documents (doc ids)
  when the encoding allows it, no attention dropout is on and head_dim >= 16; else sdpa (packed
  documents then take a dense [B, 1, T, T] mask). On CPU `auto` is sdpa.
On CUDA flex and its block mask are compiled (once each, lazily): eager flex is an unfused
reference, and an eager create_block_mask evaluates the mask at every [B, 1, T, T] point. The
block mask skips the blocks no query of a block may see, so packed documents cost what they
attend. On CPU both run eager.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import flex_attention as torch_flex

from trainer.model.canon import CanonInputs, make_canon
from trainer.model.config import ModelConfig
from trainer.model.kv_cache import KVCache
from trainer.model.positional import LayerBias, Positional

try:
    from flash_attn import flash_attn_func, flash_attn_varlen_func
except ImportError:  # optional: the [gpu] extra
    flash_attn_func = flash_attn_varlen_func = None

HAVE_FLASH = flash_attn_func is not None


@dataclass
class AttentionMask:
    """Which keys each query sees in one forward pass, in the form its backend takes.

    sdpa and math: `tensor` is None (plain causal), a bool mask (True: may attend) or a float bias
    added to the scores (-inf where not allowed), to which `layer_bias[layer]` is added in each
    layer when the encoding has per-layer biases. flash_attn: document boundaries of the flattened
    batch (None: one sequence per row) and ALiBi slopes. flex: the block mask (causal, within
    documents) and the score_mod adding ALiBi's bias (None: nothing added).
    """

    backend: str
    tensor: Tensor | None = None
    layer_bias: LayerBias | None = None
    cu_seqlens: Tensor | None = None
    max_seqlen: int = 0
    alibi_slopes: Tensor | None = None
    block_mask: torch_flex.BlockMask | None = None
    score_mod: Callable | None = None

    def for_layer(self, layer: int) -> AttentionMask:
        """The mask one layer applies: this one, with the layer's own bias added when there is
        one (one [B, H, Tq, Tk] tensor, made when the layer runs)."""
        if self.layer_bias is None:
            return self
        return replace(self, tensor=self.tensor + self.layer_bias[layer], layer_bias=None)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention runs in: autocast's when autocast is on, else x's."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


# inductor's CUDA flex kernel (a Triton tl.dot) takes no head_dim below this
FLEX_MIN_HEAD_DIM_CUDA = 16


def pick_backend(requested: str, flash_compatible: bool, *, device: str, dtype: torch.dtype,
                 head_dim: int, cached: bool, packed: bool, dropout: float, grad: bool) -> str:
    """The backend that runs one forward pass (the rules are in the module docstring).

    flash_compatible: the encoding's attention is rotations and ALiBi slopes only, which flex
    runs as well as flash. device: the activations' device type; dtype: the dtype attention
    computes in (`compute_dtype`); head_dim: the width of one head; cached: a KV-cache step;
    packed: doc ids are given; dropout: the attention dropout this pass applies (0 in eval);
    grad: autograd records the pass.
    """
    if requested == "math":
        return "math"
    if cached:
        return "sdpa"
    on_cuda = device == "cuda"
    flash_able = HAVE_FLASH and flash_compatible and on_cuda and dtype in (torch.float16,
                                                                         torch.bfloat16)
    if requested in ("flash_attn", "auto") and flash_able:
        return "flash_attn"
    flex_blocker = _flex_blocker(on_cuda, head_dim, grad)
    flex_able = flash_compatible and dropout == 0 and flex_blocker is None
    if flex_able and (requested == "flex" or (requested == "auto" and on_cuda and packed)):
        return "flex"
    if requested == "flex" and flex_blocker:
        _warn_flex_fallback(flex_blocker)
    return "sdpa"


def _flex_blocker(on_cuda: bool, head_dim: int, grad: bool) -> str | None:
    """Why flex cannot run a pass on this device, or None (the encoding and dropout are
    validation's to refuse)."""
    if not on_cuda and grad:
        return "PyTorch has no flex backward pass on CPU"
    if on_cuda and head_dim < FLEX_MIN_HEAD_DIM_CUDA:
        return f"inductor's CUDA flex needs head_dim >= {FLEX_MIN_HEAD_DIM_CUDA}, not {head_dim}"
    return None


@functools.cache  # once per reason: every forward pass would repeat it
def _warn_flex_fallback(reason: str) -> None:
    warnings.warn(f"attention='flex' runs sdpa instead here: {reason}", stacklevel=3)


def build_mask(backend: str, positional: Positional, q_pos: Tensor, k_pos: Tensor,
               q_doc: Tensor | None, k_doc: Tensor | None, dtype: torch.dtype) -> AttentionMask:
    """Prepare one forward pass's mask. q_pos/q_doc belong to the new tokens, k_pos/k_doc to all
    keys in order (cached then new); each is [B, T] or [1, T]. No doc ids: one document."""
    if backend == "flash_attn":
        return _flash_mask(positional, q_doc, q_pos.device)
    if backend == "flex":  # never a KV-cache step: keys are the queries
        return _flex_mask(positional, q_pos, q_doc)
    scores_dtype = torch.float32 if backend == "math" else dtype
    bias = positional.bias(q_pos, k_pos)
    layer_bias = positional.layer_bias(q_pos, k_pos, scores_dtype)
    plain = bias is None and layer_bias is None  # nothing to add to the scores
    n_q, n_k = q_pos.shape[-1], k_pos.shape[-1]
    if backend == "sdpa" and plain and q_doc is None and n_q == n_k:
        return AttentionMask("sdpa")  # is_causal=True, the fused kernels' fast path
    # query t is token n_k - n_q + t of the sequence: it sees keys up to and including itself
    allowed = (torch.arange(n_k, device=q_pos.device)
               <= torch.arange(n_k - n_q, n_k, device=q_pos.device)[:, None])  # [Tq, Tk]
    if q_doc is not None:
        allowed = allowed & (q_doc[:, None, :, None] == k_doc[:, None, None, :])  # [B, 1, Tq, Tk]
    if backend == "sdpa" and plain:
        return AttentionMask("sdpa", allowed)
    additive = torch.where(allowed, 0.0 if bias is None else bias, float("-inf"))
    return AttentionMask(backend, additive.to(scores_dtype), layer_bias)


def _flash_mask(positional: Positional, doc: Tensor | None, device: torch.device) -> AttentionMask:
    slopes = positional.alibi_slopes(device)
    if doc is None:
        return AttentionMask("flash_attn", alibi_slopes=slopes)
    # a document starts at each row's first token and wherever the id changes
    starts = torch.ones_like(doc, dtype=torch.bool)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    cu_seqlens = F.pad(starts.flatten().nonzero().flatten(), (0, 1), value=doc.numel()).int()
    longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    return AttentionMask("flash_attn", cu_seqlens=cu_seqlens, max_seqlen=longest,
                         alibi_slopes=slopes)


def _flex_mask(positional: Positional, pos: Tensor, doc: Tensor | None) -> AttentionMask:
    # compiled on CUDA, unless the model around it is already being compiled
    compiled = pos.is_cuda and not torch.compiler.is_compiling()
    build = _compiled_block_mask() if compiled else _block_mask
    block_mask = build(doc, pos.shape[-1], pos.device)
    slopes = positional.alibi_slopes(pos.device)
    score_mod = None if slopes is None else _alibi_score_mod(slopes, pos)
    return AttentionMask("flex", block_mask=block_mask, score_mod=score_mod)


def _block_mask(doc: Tensor | None, length: int, device: torch.device) -> torch_flex.BlockMask:
    """Causal, and within documents when doc ids ([B, T] or [1, T]) are given."""
    if doc is None:
        def visible(b, h, q, k):
            return q >= k
    else:
        def visible(b, h, q, k):
            return (q >= k) & (doc[b, q] == doc[b, k])
    # one row of doc ids ([1, T], or none) is shared by the batch: the mask broadcasts
    rows = None if doc is None else doc.shape[0]
    return torch_flex.create_block_mask(visible, rows, None, length, length, device=device)


@functools.cache  # compiled once, on first use, as PyTorch advises for create_block_mask
def _compiled_block_mask() -> Callable:
    return torch.compile(_block_mask)


def _alibi_score_mod(slopes: Tensor, pos: Tensor) -> Callable:
    """ALiBi's -slope[h] * (pos[q] - pos[k]) added to each score (fp32 slopes [H], pos [B, T] or
    [1, T]): the distance of positions, which restart at each document, like ALiBi.bias."""
    shared = pos.shape[0] == 1  # one row of positions for the whole batch

    def alibi(score, b, h, q, k):
        row = 0 if shared else b
        return score - slopes[h] * (pos[row, q] - pos[row, k])
    return alibi


def math_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout_p: float):
    """The reference: softmax(q k^T / sqrt(Dh) + mask) v, softmax in fp32."""
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]) + mask.tensor
    weights = F.dropout(scores.softmax(dim=-1), dropout_p)
    return weights.to(v.dtype) @ v


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout_p: float):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.tensor, dropout_p=dropout_p,
                                          is_causal=mask.tensor is None)


@functools.cache  # compiled once, on first use: importing physlm compiles nothing
def _compiled_flex() -> Callable:
    return torch.compile(torch_flex.flex_attention)


def flex_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout_p: float):
    # dropout_p is 0: pick_backend keeps flex off while attention dropout is on.
    # Eager flex is an unfused reference (on CUDA it warns so); inside a model already being
    # compiled, the surrounding graph compiles it.
    fused = q.is_cuda and not torch.compiler.is_compiling()
    run = _compiled_flex() if fused else torch_flex.flex_attention
    return run(q, k, v, score_mod=mask.score_mod, block_mask=mask.block_mask)


def flash_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout_p: float):
    batch, heads, length, head_dim = q.shape
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # flash takes [B, T, H, Dh]
    if mask.cu_seqlens is None:
        y = flash_attn_func(q, k, v, dropout_p=dropout_p, causal=True,
                            alibi_slopes=mask.alibi_slopes)
    else:  # packed documents: attend within each [cu_seqlens[i], cu_seqlens[i+1]) span
        q, k, v = (t.reshape(batch * length, heads, head_dim) for t in (q, k, v))
        cu, longest = mask.cu_seqlens, mask.max_seqlen
        y = flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, dropout_p=dropout_p,
                                   causal=True, alibi_slopes=mask.alibi_slopes)
        y = y.view(batch, length, heads, head_dim)
    return y.transpose(1, 2)


BACKENDS = {"math": math_attention, "sdpa": sdpa_attention, "flash_attn": flash_attention,
            "flex": flex_attention}


def linear_chunks(x: Tensor, linear: nn.Module, n: int) -> list[Tensor]:
    """`linear(x).chunk(n, dim=-1)`, computed as n matmuls on slices of the fused weight: each
    output is contiguous, so the backward pass needs no activation-sized concatenation (the
    parameters, and so the checkpoints, stay fused)."""
    if type(linear) is not nn.Linear:  # a wrapped layer (LoRA) adds its term only when called
        return list(linear(x).chunk(n, dim=-1))
    biases = linear.bias.chunk(n) if linear.bias is not None else (None,) * n
    return [F.linear(x, w, b) for w, b in zip(linear.weight.chunk(n), biases)]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, positional: Positional):
        super().__init__()
        if config.attention == "flash_attn" and not HAVE_FLASH:
            raise ValueError("attention='flash_attn': flash_attn is not importable (install the "
                             "[gpu] extra on a CUDA machine) - use attention=auto to fall back")
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.resid_drop = nn.Dropout(config.dropout)
        # a bound method, not a submodule: GPT owns the positional module, registered once
        self.rotate = positional.rotate
        self.canon_b = make_canon(config, "B")

    def forward(self, x: Tensor, pos: Tensor, mask: AttentionMask, cache: KVCache | None = None,
                layer: int = 0, canon: CanonInputs | None = None) -> Tensor:
        batch, length, width = x.shape
        qkv = linear_chunks(x, self.qkv, 3)  # each [B, T, C]
        if self.canon_b is not None:  # before the rotation, as Part 4.1 places it
            qkv = self.canon_b(qkv, canon, layer)
        q, k, v = (t.view(batch, length, self.n_head, -1).transpose(1, 2)  # each [B, H, T, Dh]
                   for t in qkv)
        q, k = self.rotate(q, k, pos, pos)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        y = BACKENDS[mask.backend](q, k, v, mask.for_layer(layer),
                                   self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(batch, length, width)))
