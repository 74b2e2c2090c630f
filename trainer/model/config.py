"""The GPT family's shape and options, one plain dataclass."""

import math
from dataclasses import dataclass

from corpus_gen.core.errors import ConfigError
from trainer.model.positional import POSITIONAL

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
ATTENTION_BACKENDS = ("auto", "flash_attn", "sdpa", "math")


@dataclass
class ModelConfig:
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    d_ff: int = 0  # 0: 4 * d_model for gelu, the multiple of 64 nearest 8/3 * d_model for swiglu
    vocab_size: int = 0  # set from the corpus's tokenizer; GPT refuses 0
    ctx: int = 512
    dropout: float = 0.0
    bias: bool = False  # biases in Linears and LayerNorms
    norm: str = "layernorm"  # layernorm | rmsnorm
    mlp: str = "gelu"  # gelu | swiglu
    tie_embeddings: bool = True
    pos: str = "rope"  # a name in POSITIONAL: learned | rope | alibi | relative | none
    attention: str = "auto"  # auto | flash_attn | sdpa | math
    rope_theta: float = 10000.0
    relative_buckets: int = 32
    relative_max_distance: int = 128
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def ffn_dim(self) -> int:
        """Hidden width of the MLP: d_ff, or the default for the MLP kind when d_ff is 0."""
        if self.d_ff:
            return self.d_ff
        if self.mlp == "swiglu":
            # 8/3 keeps a gated MLP's three matrices at the parameter count of gelu's two
            return max(64, 64 * round(8 * self.d_model / 3 / 64))
        return 4 * self.d_model

    def validate(self) -> None:
        """Raise ModelConfigError naming the field and its value for anything the types allow but
        the model cannot be built from."""
        for name in ("n_layer", "n_head", "d_model", "ctx"):
            _require(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        for name in ("d_ff", "vocab_size"):
            _require(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")
        _require(self.d_model % self.n_head == 0, "d_model", self.d_model,
                 f"must be divisible by n_head={self.n_head}")
        _require(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "must be in [0, 1)")
        _require(0 < self.init_std < math.inf, "init_std", self.init_std, "must be > 0 and finite")
        _require(self.norm in NORMS, "norm", self.norm, f"must be one of {NORMS}")
        _require(self.mlp in MLPS, "mlp", self.mlp, f"must be one of {MLPS}")
        _require(self.pos in POSITIONAL, "pos", self.pos, f"must be one of {tuple(POSITIONAL)}")
        _require(self.attention in ATTENTION_BACKENDS, "attention", self.attention,
                 f"must be one of {ATTENTION_BACKENDS}")
        if self.pos == "rope":
            _require(self.head_dim % 2 == 0, "d_model", self.d_model,
                     f"rope needs an even head dim; d_model / n_head = {self.head_dim}")
            _require(0 < self.rope_theta < math.inf, "rope_theta", self.rope_theta,
                     "must be > 0 and finite")
        if self.pos == "relative":
            _require(self.relative_buckets >= 2, "relative_buckets", self.relative_buckets,
                     "must be >= 2")
            _require(self.relative_max_distance > self.relative_buckets // 2,
                     "relative_max_distance", self.relative_max_distance,
                     f"must exceed relative_buckets // 2 = {self.relative_buckets // 2}")
        if self.attention == "flash_attn":
            _require(POSITIONAL[self.pos].flash_compatible, "attention", self.attention,
                     f"flash_attn cannot run pos={self.pos!r}; use sdpa or auto")


class ModelConfigError(ConfigError, ValueError):
    """A field out of range: a ConfigError so experiment loading reports it like any config key
    (with the `model.` prefix and its file), a ValueError for code that builds a GPT directly."""


def _require(condition: bool, field: str, value: object, reason: str) -> None:
    if not condition:
        raise ModelConfigError(field, value, reason)
