"""The GPT stack: embeddings, pre-norm blocks, tied or untied head; and its KV cache."""

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
from trainer.model.config import ModelConfig
from trainer.model.positional import POSITIONAL, Positional


class KVCache:
    """Keys and values of every token seen so far, per layer, in preallocated buffers, with the
    tokens' positions and document ids (shared by all layers)."""

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        self.k = torch.zeros(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(batch, max_len, dtype=torch.long, device=device)
        self.doc = torch.zeros_like(self.pos)
        self.length = 0

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


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=1e-5)
    return nn.LayerNorm(config.d_model, bias=config.bias)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.ffn_dim, bias=config.bias)
        self.proj = nn.Linear(config.ffn_dim, config.d_model, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class SwiGLU(nn.Module):
    """Gated MLP: silu(x W_gate) * (x W_up), then down; gate and up share one weight."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 2 * config.ffn_dim, bias=config.bias)
        self.proj = nn.Linear(config.ffn_dim, config.d_model, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = linear_chunks(x, self.fc, 2)
        return self.drop(self.proj(F.silu(gate) * up))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, positional: Positional):
        super().__init__()
        self.norm1 = make_norm(config)
        self.attn = CausalSelfAttention(config, positional)
        self.norm2 = make_norm(config)
        self.mlp = SwiGLU(config) if config.mlp == "swiglu" else MLP(config)

    def forward(self, x: Tensor, pos: Tensor, mask: AttentionMask, cache: KVCache | None,
                layer: int) -> Tensor:
        x = x + self.attn(self.norm1(x), pos, mask, cache, layer)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        if config.vocab_size < 1:
            raise ValueError(f"vocab_size={config.vocab_size!r}: must be >= 1 (set it from the "
                             "corpus's tokenizer)")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.positional = POSITIONAL[config.pos](config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, self.positional) for _ in range(config.n_layer))
        self.norm = make_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
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
                doc_ids: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        """Logits [B, T, V] in fp32 for input_ids [B, T].

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
        backend = pick_backend(self.config.attention, self.positional, x, cache is not None)
        mask = build_mask(backend, self.positional, pos, k_pos, doc_ids, k_doc, compute_dtype(x))

        for layer, block in enumerate(self.blocks):
            x = block(x, pos, mask, cache, layer)
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
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": keep, "weight_decay": 0.0}]
