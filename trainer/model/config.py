"""The GPT family's shape and options, one plain dataclass (no torch: the positional encodings,
torch modules that check their own options, are looked up only when a config is validated)."""

import math
from dataclasses import dataclass

from trainer.model.errors import require

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
    # a name in POSITIONAL: learned | rope | alibi | relative | none, or Part 1's content-free
    # pos_only (per-layer relative-position tables) | uniform (head h: mean of 2^h - 1 tokens)
    pos: str = "rope"
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
            require(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        for name in ("d_ff", "vocab_size"):
            require(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")
        require(self.d_model % self.n_head == 0, "d_model", self.d_model,
                f"must be divisible by n_head={self.n_head}")
        require(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "must be in [0, 1)")
        require(0 < self.init_std < math.inf, "init_std", self.init_std, "must be > 0 and finite")
        require(self.norm in NORMS, "norm", self.norm, f"must be one of {NORMS}")
        require(self.mlp in MLPS, "mlp", self.mlp, f"must be one of {MLPS}")
        from trainer.model.positional import POSITIONAL  # imports torch; see the docstring

        require(self.pos in POSITIONAL, "pos", self.pos, f"must be one of {tuple(POSITIONAL)}")
        require(self.attention in ATTENTION_BACKENDS, "attention", self.attention,
                f"must be one of {ATTENTION_BACKENDS}")
        encoding = POSITIONAL[self.pos]
        encoding.validate(self)
        if self.attention == "flash_attn":
            require(encoding.flash_compatible, "attention", self.attention,
                    f"flash_attn cannot run pos={self.pos!r}; use sdpa or auto")
