"""Which physlm models have a HF transformers class that computes the same function, and the
config that class gets. No torch and no transformers here: refusing a model is cheap.

Three layouts map exactly:

- gpt2: pos=learned, norm=layernorm, mlp=gelu -> GPT2LMHeadModel (exact GELU, LayerNorm eps 1e-5;
  a model without biases exports zero biases, the same function);
- gpt_neox: pos=rope, norm=layernorm, mlp=gelu (physlm's default, the papers' GPT_rot) ->
  GPTNeoXForCausalLM with sequential residuals (use_parallel_residual false: attention, then the
  MLP on its output, as physlm's blocks), rotary_pct = `rope.fraction` (NeoX's partial rotary
  is physlm's: the first channels of each head rotate, paired within them), exact GELU,
  LayerNorm eps 1e-5; attention biases where physlm has them, the MLP's and norms' always
  (zeros where physlm has none);
- llama: pos=rope, norm=rmsnorm, mlp=swiglu -> LlamaForCausalLM (RMSNorm eps 1e-5, as many
  key/value heads as heads, biases where physlm has them; every channel rotates).

All with a tied or an untied head. Both HF rotary classes pair channel i with i + rotated/2, as
physlm's Rotary does. Anything else (another encoding, another mix of norm and MLP, Canon
layers, a block option turned on, a rope option the layout has no key for) is refused in one
line naming the fields at fault and what maps. Dropout is a training setting (physlm's
RUN_TIME_KEYS), not part of the function: the exported configs carry 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NoReturn

from trainer.errors import TrainError
from trainer.model.config import ModelConfig
from trainer.model.positional_options import RopeOptions
from trainer.model.registry import block_options

NORM_EPS = 1e-5  # physlm's LayerNorm and RMSNorm


class ExportRefused(TrainError):
    """A model that export maps to no HF transformers class."""


@dataclass(frozen=True)
class Layout:
    name: str  # HF's model_type
    hf_class: str
    pos: str
    norm: str
    mlp: str

    def describe(self) -> str:
        return f"pos={self.pos}+norm={self.norm}+mlp={self.mlp} -> {self.hf_class}"


GPT2 = Layout("gpt2", "GPT2LMHeadModel", "learned", "layernorm", "gelu")
NEOX = Layout("gpt_neox", "GPTNeoXForCausalLM", "rope", "layernorm", "gelu")
LLAMA = Layout("llama", "LlamaForCausalLM", "rope", "rmsnorm", "swiglu")
LAYOUTS = (GPT2, NEOX, LLAMA)
WHAT_MAPS = ("export maps " + ", ".join(layout.describe() for layout in LAYOUTS[:-1])
             + f" and {LAYOUTS[-1].describe()}")
BLOCK_KEYS = ("norm", "mlp")  # what sets layouts of one encoding apart
ROPE_KEYS = {NEOX.name: ("theta", "fraction"), LLAMA.name: ("theta",)}  # the rope options mapped


def layout_for(config: ModelConfig) -> Layout:
    """The layout whose HF class computes `config`'s function; ExportRefused naming the fields
    at fault otherwise."""
    same_pos = [layout for layout in LAYOUTS if layout.pos == config.pos]
    if not same_pos:
        _refuse(f"model.pos={config.pos!r}")
    layout = _nearest(config, same_pos)
    if config.canon:
        _refuse(f"model.canon={config.canon!r} (Canon layers: no HF class has them)")
    if config.head_bias:
        _refuse("model.head_bias=True (no HF class has a bias on its output head)")
    switched_on = [f"model.{name}" for name, option in block_options().items()
                   if getattr(config, name, None) not in (None, option.options())]
    if switched_on:
        _refuse(f"{', '.join(switched_on)} (a block option, on)")
    if layout.pos == "rope":
        mapped = ROPE_KEYS[layout.name]
        other = [f"model.rope.{f.name}={getattr(config.rope, f.name)!r}"
                 for f in dataclasses.fields(config.rope) if f.name not in mapped
                 and getattr(config.rope, f.name) != getattr(RopeOptions(), f.name)]
        if other:  # Llama's rotary turns every channel; any later rope option: not mapped yet
            _refuse(f"{', '.join(other)} ({layout.hf_class} maps rope with "
                    f"{' and '.join(mapped)} alone)")
    return layout


def _nearest(config: ModelConfig, same_pos: list[Layout]) -> Layout:
    """The layout of `same_pos` that `config` is; ExportRefused naming the norm and MLP keys
    that set it apart from the nearest of them (those of every one as near, on a tie)."""
    apart = {layout: [key for key in BLOCK_KEYS if getattr(config, key) != getattr(layout, key)]
             for layout in same_pos}
    fewest = min(len(keys) for keys in apart.values())
    if fewest == 0:
        return next(layout for layout, keys in apart.items() if not keys)
    at_fault = {key for keys in apart.values() if len(keys) == fewest for key in keys}
    named = [f"model.{key}={getattr(config, key)!r}" for key in BLOCK_KEYS if key in at_fault]
    _refuse(f"{' and '.join(named)} with model.pos={config.pos!r}")


def _refuse(fault: str) -> NoReturn:
    raise ExportRefused(f"{fault}: not exportable to HF transformers; {WHAT_MAPS}")


def hf_config(config: ModelConfig, layout: Layout, eos_id: int, pad_id: int | None) -> dict:
    """The keys of the HF config (`transformers.AutoConfig.for_model(layout.name, **keys)`)."""
    common = {"architectures": [layout.hf_class], "vocab_size": config.vocab_size,
              "tie_word_embeddings": config.tie_embeddings,
              "initializer_range": config.init_std, "bos_token_id": None,
              "eos_token_id": eos_id, "pad_token_id": pad_id}
    if layout is GPT2:
        return common | {
            "n_embd": config.d_model, "n_layer": config.n_layer, "n_head": config.n_head,
            "n_inner": config.ffn_dim, "n_positions": config.ctx,
            "activation_function": "gelu",  # exact, as F.gelu; not GPT-2's tanh gelu_new
            "layer_norm_epsilon": NORM_EPS,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    shape = {"hidden_size": config.d_model, "num_hidden_layers": config.n_layer,
             "num_attention_heads": config.n_head, "intermediate_size": config.ffn_dim,
             "max_position_embeddings": config.ctx, "attention_bias": config.bias,
             "attention_dropout": 0.0}
    if layout is NEOX:
        return common | shape | {
            "hidden_act": "gelu",  # exact, as F.gelu
            "layer_norm_eps": NORM_EPS, "use_parallel_residual": False,
            # NeoX's own names (transformers 5 reads them into rope_parameters)
            "rotary_pct": config.rope.fraction, "rotary_emb_base": config.rope.theta,
            "hidden_dropout": 0.0}
    return common | shape | {
        "num_key_value_heads": config.n_head, "head_dim": config.head_dim, "hidden_act": "silu",
        "rms_norm_eps": NORM_EPS, "rope_theta": config.rope.theta, "mlp_bias": config.bias}

