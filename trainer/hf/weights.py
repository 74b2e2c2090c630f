"""physlm's state dict as the HF class of its layout names and shapes it.

physlm fuses what HF keeps apart: the attention's q, k and v in one `qkv` Linear [3C, C], and
SwiGLU's gate (first half) and up (second half) projections in one `fc` [2F, C]. GPT-2's Conv1D
layers store their weight as [in, out], the transpose of a Linear's. NeoX fuses q, k and v too,
but head by head: its `query_key_value` output rows run (head, q/k/v, channel), physlm's
(q/k/v, head, channel). GPT-2 always has biases, NeoX in its MLP and norms; a physlm model without
them exports zeros. A tied head is saved once, as the token embedding (HF ties the head to it
when it loads), an untied one under the name the class's checkpoints use. Every tensor is a
fresh contiguous copy: safetensors refuses views that share storage.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.hf.layouts import GPT2, LLAMA, NEOX, Layout
from trainer.model.config import ModelConfig


def hf_state_dict(config: ModelConfig, layout: Layout, state: dict[str, Tensor]
                  ) -> dict[str, Tensor]:
    """HF's tensors for physlm's `state` (GPT.state_dict()) of a model of `config`."""
    mapped = MAPPINGS[layout.name](config, state)
    if not config.tie_embeddings:
        mapped[UNTIED_HEAD.get(layout.name, "lm_head.weight")] = state["lm_head.weight"]
    return {name: tensor.detach().clone().contiguous() for name, tensor in mapped.items()}


def _with_bias(state: dict[str, Tensor], hf: str, physlm: str, weight: Tensor | None = None
               ) -> dict[str, Tensor]:
    """`weight` (default: physlm's as it is) as hf.weight, and physlm's bias as hf.bias (zeros,
    one per output, without one)."""
    ours = state[f"{physlm}.weight"]  # a Linear's [out, in] or a norm's [C]
    bias = state.get(f"{physlm}.bias")
    if bias is None:
        bias = torch.zeros(ours.shape[0], dtype=ours.dtype)
    return {f"{hf}.weight": ours if weight is None else weight, f"{hf}.bias": bias}


def _gpt2(config: ModelConfig, state: dict[str, Tensor]) -> dict[str, Tensor]:
    def conv1d(hf: str, physlm: str) -> dict[str, Tensor]:  # weight [out, in] -> [in, out]
        return _with_bias(state, hf, physlm, state[f"{physlm}.weight"].T)

    def norm(hf: str, physlm: str) -> dict[str, Tensor]:
        return _with_bias(state, hf, physlm)

    mapped = {"transformer.wte.weight": state["tok_emb.weight"],
              "transformer.wpe.weight": state["positional.table.weight"],
              **norm("transformer.ln_f", "norm")}
    for i in range(config.n_layer):
        hf, ours = f"transformer.h.{i}", f"blocks.{i}"
        mapped |= {**norm(f"{hf}.ln_1", f"{ours}.norm1"), **norm(f"{hf}.ln_2", f"{ours}.norm2"),
                   **conv1d(f"{hf}.attn.c_attn", f"{ours}.attn.qkv"),
                   **conv1d(f"{hf}.attn.c_proj", f"{ours}.attn.proj"),
                   **conv1d(f"{hf}.mlp.c_fc", f"{ours}.mlp.fc"),
                   **conv1d(f"{hf}.mlp.c_proj", f"{ours}.mlp.proj")}
    return mapped


def _llama(config: ModelConfig, state: dict[str, Tensor]) -> dict[str, Tensor]:
    def split(hf_names: list[str], physlm: str) -> dict[str, Tensor]:
        """The fused Linear `physlm` as len(hf_names) Linears, its output rows in order."""
        n = len(hf_names)
        parts = {f"{hf}.weight": w for hf, w in
                 zip(hf_names, state[f"{physlm}.weight"].chunk(n))}
        if config.bias:
            parts |= {f"{hf}.bias": b for hf, b in zip(hf_names, state[f"{physlm}.bias"].chunk(n))}
        return parts

    mapped = {"model.embed_tokens.weight": state["tok_emb.weight"],
              "model.norm.weight": state["norm.weight"]}
    for i in range(config.n_layer):
        hf, ours = f"model.layers.{i}", f"blocks.{i}"
        mapped |= {f"{hf}.input_layernorm.weight": state[f"{ours}.norm1.weight"],
                   f"{hf}.post_attention_layernorm.weight": state[f"{ours}.norm2.weight"],
                   **split([f"{hf}.self_attn.{p}_proj" for p in "qkv"], f"{ours}.attn.qkv"),
                   **split([f"{hf}.self_attn.o_proj"], f"{ours}.attn.proj"),
                   **split([f"{hf}.mlp.gate_proj", f"{hf}.mlp.up_proj"], f"{ours}.mlp.fc"),
                   **split([f"{hf}.mlp.down_proj"], f"{ours}.mlp.proj")}
    return mapped


def _neox(config: ModelConfig, state: dict[str, Tensor]) -> dict[str, Tensor]:
    def per_head(fused: Tensor) -> Tensor:
        """qkv's rows (q/k/v, head, channel) as NeoX's (head, q/k/v, channel): [3C, ...]."""
        return fused.unflatten(0, (3, config.n_head, config.head_dim)).transpose(0, 1).flatten(0, 2)

    def with_bias(hf: str, physlm: str) -> dict[str, Tensor]:  # norms and MLP: zeros if none
        return _with_bias(state, hf, physlm)

    mapped = {"gpt_neox.embed_in.weight": state["tok_emb.weight"],
              **with_bias("gpt_neox.final_layer_norm", "norm")}
    for i in range(config.n_layer):
        hf, ours = f"gpt_neox.layers.{i}", f"blocks.{i}"
        attention = {f"{hf}.attention.query_key_value.weight":
                     per_head(state[f"{ours}.attn.qkv.weight"]),
                     f"{hf}.attention.dense.weight": state[f"{ours}.attn.proj.weight"]}
        if config.bias:  # NeoX's attention_bias: its attention has biases only with physlm's
            attention |= {f"{hf}.attention.query_key_value.bias":
                          per_head(state[f"{ours}.attn.qkv.bias"]),
                          f"{hf}.attention.dense.bias": state[f"{ours}.attn.proj.bias"]}
        mapped |= {**with_bias(f"{hf}.input_layernorm", f"{ours}.norm1"),
                   **with_bias(f"{hf}.post_attention_layernorm", f"{ours}.norm2"), **attention,
                   **with_bias(f"{hf}.mlp.dense_h_to_4h", f"{ours}.mlp.fc"),
                   **with_bias(f"{hf}.mlp.dense_4h_to_h", f"{ours}.mlp.proj")}
    return mapped


MAPPINGS = {GPT2.name: _gpt2, NEOX.name: _neox, LLAMA.name: _llama}
# NeoX's checkpoints name the head `embed_out` (transformers 5 renames it to lm_head on loading)
UNTIED_HEAD = {NEOX.name: "embed_out.weight"}
