"""The GPT stack: embeddings, pre-norm blocks, tied or untied head.

A block may be attention-only (`model.mlp: none`: no MLP and no norm before it) and the norms
may be identities (`model.norm: none`), for the mechanism sandboxes' small models.

A block runs the hooks of the block options that are on (registry.py: none by default, and then
no parameters and no work) on its normed input before attention and before the MLP, and the
Canon layers of `model.canon` at their sites (canon.py; none by default, and then no parameters
and no work).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model.attention import (
    AttentionMask,
    CausalSelfAttention,
    build_mask,
    compute_dtype,
    linear_chunks,
    pick_backend,
)
from trainer.model.canon import CanonInputs, canon_inputs, make_canon
from trainer.model.config import ModelConfig, complete
from trainer.model.kv_cache import KVCache
from trainer.model.positional import Positional
from trainer.model.registry import block_options, encodings


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm == "none":  # the sandboxes' norm-free models: identity, no parameters
        return nn.Identity()
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=1e-5)
    return nn.LayerNorm(config.d_model, bias=config.bias)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.ffn_dim, bias=config.bias)
        self.proj = nn.Linear(config.ffn_dim, config.d_model, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)
        self.canon_d = make_canon(config, "D")

    def forward(self, x: Tensor, canon: CanonInputs | None = None, layer: int = 0) -> Tensor:
        h = self.fc(x)  # [B, T, F]
        if self.canon_d is not None:
            (h,) = self.canon_d([h], canon, layer)
        return self.drop(self.proj(F.gelu(h)))


class SwiGLU(nn.Module):
    """Gated MLP: silu(x W_gate) * (x W_up), then down; gate and up share one weight."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 2 * config.ffn_dim, bias=config.bias)
        self.proj = nn.Linear(config.ffn_dim, config.d_model, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)
        self.canon_d = make_canon(config, "D")

    def forward(self, x: Tensor, canon: CanonInputs | None = None, layer: int = 0) -> Tensor:
        gate, up = linear_chunks(x, self.fc, 2)  # each [B, T, F]
        if self.canon_d is not None:
            gate, up = self.canon_d([gate, up], canon, layer)
        return self.drop(self.proj(F.silu(gate) * up))


class BlockHook(nn.Module):
    """A block option's module in one block, with identity answers; an option overrides the
    hooks it uses. Each takes the normed input x [B, T, C] of the new tokens, their positions
    and document ids ([B, T] or [1, T]; doc None: one document), and while decoding the KV
    cache, where an option keeps what it needs across steps (`cache.state`) under its layer.
    GPT's init redraws a hook's nn.Linear and nn.Embedding weights like every other; a weight
    the option sets up itself is best an nn.Parameter or another module. These are the points
    where Part 4.1's Canon-A and Canon-C run (built in: `model.canon`, canon.py). An
    attention-only block (mlp=none) has no MLP, so before_mlp does not run there."""

    def before_attention(self, x: Tensor, pos: Tensor, doc: Tensor | None,
                         cache: KVCache | None, layer: int) -> Tensor:
        return x

    def before_mlp(self, x: Tensor, pos: Tensor, doc: Tensor | None, cache: KVCache | None,
                   layer: int) -> Tensor:
        return x


def block_hooks(config: ModelConfig, layer: int) -> dict[str, BlockHook]:
    """The modules of the block options that are on, by name, for block `layer`."""
    built = {name: option.load()(config, layer) for name, option in block_options().items()}
    return {name: hook for name, hook in built.items() if hook is not None}


class Block(nn.Module):
    def __init__(self, config: ModelConfig, positional: Positional, layer: int):
        super().__init__()
        self.norm1 = make_norm(config)
        self.attn = CausalSelfAttention(config, positional)
        # attention-only blocks (mlp=none) have no MLP and no norm before it; norm2 is made
        # first, as before the option: parameter order is optimizer state order in checkpoints
        attention_only = config.mlp == "none"
        self.norm2 = None if attention_only else make_norm(config)
        self.mlp = (None if attention_only
                    else SwiGLU(config) if config.mlp == "swiglu" else MLP(config))
        self.hooks = nn.ModuleDict(block_hooks(config, layer))  # empty: no parameters
        self.canon_a, self.canon_c = make_canon(config, "A"), make_canon(config, "C")

    def forward(self, x: Tensor, pos: Tensor, doc: Tensor | None, mask: AttentionMask,
                cache: KVCache | None, layer: int, canon: CanonInputs | None = None) -> Tensor:
        h = self.norm1(x)
        if self.canon_a is not None:
            (h,) = self.canon_a([h], canon, layer)
        for hook in self.hooks.values():
            h = hook.before_attention(h, pos, doc, cache, layer)
        x = x + self.attn(h, pos, mask, cache, layer, canon)
        if self.mlp is None:
            return x
        h = self.norm2(x)
        if self.canon_c is not None:
            (h,) = self.canon_c([h], canon, layer)
        for hook in self.hooks.values():
            h = hook.before_mlp(h, pos, doc, cache, layer)
        return x + self.mlp(h, canon, layer)


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        config = complete(config)  # with the groups of plug-ins registered since it was made
        config.validate()
        if config.vocab_size < 1:
            raise ValueError(f"vocab_size={config.vocab_size!r}: must be >= 1 (set it from the "
                             "corpus's tokenizer)")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        encoding = encodings()[config.pos]
        self.positional = encoding.load()(config)
        self.flash_compatible = encoding.flash_compatible
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, self.positional, layer)
                                    for layer in range(config.n_layer))
        self.norm = make_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=config.head_bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by 1/sqrt(2 n_layer),
        # so the stream's variance does not grow with depth
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=config.init_std / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None,
                doc_ids: Tensor | None = None, cache: KVCache | None = None,
                last_only: bool = False) -> Tensor:
        """Logits [B, T, V] in fp32 for input_ids [B, T] ([B, 1, V] with last_only: decoding
        needs the last position's, and the head is a quarter of a small model's matmuls).

        position_ids [B, T]: default 0..T-1 after the cached tokens, shared by the batch.
        doc_ids [B, T]: tokens attend only within their document (one contiguous run of equal
        ids per document). With a cache, the new tokens' keys are appended to it and the new
        tokens attend to everything cached.
        """
        offset = 0 if cache is None else cache.length
        pos = position_ids
        if pos is None:
            pos = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)[None]
        x = self.drop(self.positional.embed(self.tok_emb(input_ids), pos))

        k_pos, k_doc = pos, doc_ids
        if cache is not None:
            k_pos, k_doc = cache.extend(pos, 0 if doc_ids is None else doc_ids)
            doc_ids = k_doc[:, offset:]
        backend = pick_backend(self.config.attention, self.flash_compatible, device=x.device.type,
                               dtype=compute_dtype(x), head_dim=self.config.head_dim,
                               cached=cache is not None, packed=doc_ids is not None,
                               grad=torch.is_grad_enabled(),
                               dropout=self.config.dropout if self.training else 0.0)
        mask = build_mask(backend, self.positional, pos, k_pos, doc_ids, k_doc, compute_dtype(x))
        canon = None
        if self.config.canon:  # shared by every site of every layer
            canon = canon_inputs(self.config.canon_kernel, input_ids.shape[0], doc_ids, cache)

        for layer, block in enumerate(self.blocks):
            x = block(x, pos, doc_ids, mask, cache, layer, canon)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x)).float()

    def num_parameters(self, non_embedding: bool = True) -> int:
        """Parameter count. non_embedding drops lookup tables (token embedding when untied,
        learned positions, relative bias tables), which cost no matmul; the tied token table
        still counts, as the lm head."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= sum(m.weight.numel() for m in self.modules()
                     if isinstance(m, nn.Embedding) and m.weight is not self.lm_head.weight)
        return n

    def flops_per_token(self) -> float:
        """Training flops per token (PaLM / nanoGPT): 6N for the matmuls forward and backward,
        plus 12 * n_layer * d_model * ctx for attention over a full context."""
        c = self.config
        return 6 * self.num_parameters() + 12 * c.n_layer * c.d_model * c.ctx

    def configure_optimizer_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups: decay matrices (linears, token embedding); not biases, norms or the
        positional tables."""
        positional = {id(p) for p in self.positional.parameters()}
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2 and id(p) not in positional]
        keep = [p for p in params if p.dim() < 2 or id(p) in positional]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": keep, "weight_decay": 0.0}]
        return [group for group in groups if group["params"]]  # LoRA freezes every bias/norm
