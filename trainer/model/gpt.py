"""The GPT stack: embeddings, pre-norm blocks, tied or untied head."""

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
from trainer.model.kv_cache import KVCache
from trainer.model.positional import POSITIONAL, Positional


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
        backend = pick_backend(self.config.attention, self.positional, x, cache is not None)
        mask = build_mask(backend, self.positional, pos, k_pos, doc_ids, k_doc, compute_dtype(x))

        for layer, block in enumerate(self.blocks):
            x = block(x, pos, mask, cache, layer)
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
