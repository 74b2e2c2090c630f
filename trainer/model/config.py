"""The GPT family's shape and options: a plain dataclass, plus the groups plug-ins register.

ModelConfig's fields are what every model has, with the built-in encodings' option groups
(`rope`, `relative`, `pos_only`). An encoding or block option registered by a plug-in adds its
group as a field of the class `model_schema()` assembles, the way the experiment's `eval` schema
gets one group per task; experiment files are read against it. A config made before a plug-in
registered lacks its group, which reads as its defaults (for a block option: off), and GPT
completes it (`complete`). No torch here (see registry.py). Saved configs of earlier versions
are read through `upgrade_model_dict`, and a checkpoint fits a config when `model_difference`
finds nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

from trainer.model.errors import ModelConfigError, require
from trainer.model.positional_options import RelativeOptions, RopeOptions
from trainer.model.registry import block_options, encodings, option_groups

NORMS = ("layernorm", "rmsnorm", "none")  # none: identity (the sandboxes' norm-free models)
CANON_SITES = "ABCD"
CANON_KERNELS = (2, 3, 4)
CANON_OPTIONS = ("canon_kernel", "canon_residual", "canon_activation")  # read only with a site
MLPS = ("gelu", "swiglu", "none")  # none: attention-only blocks
ATTENTION_BACKENDS = ("auto", "flash_attn", "flex", "sdpa", "math")
# how the model runs, not the function its weights compute: free to change on resume
RUN_TIME_KEYS = ("attention", "dropout", "init_std")
# flat keys of versions before the encodings owned their options: (group, key) they now are
LEGACY_KEYS = {"rope_theta": [("rope", "theta")],
               "relative_buckets": [("relative", "buckets"), ("pos_only", "buckets")],
               "relative_max_distance": [("relative", "max_distance"),
                                         ("pos_only", "max_distance")]}


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
    norm: str = "layernorm"  # layernorm | rmsnorm | none (identity: no parameters)
    mlp: str = "gelu"  # gelu | swiglu | none (attention-only blocks: no MLP, no second norm)
    tie_embeddings: bool = True
    # a bias on the output head's logits (zeros at init, no weight decay), whatever `bias` says:
    # the Markov sandbox's model (Makkuva et al.'s code) has one, and its unigram solution is
    # that bias alone; no HF layout has it, so export refuses it
    head_bias: bool = False
    # a registered encoding: learned | rope | alibi | relative | none, or Part 1's content-free
    # pos_only (per-layer relative-position tables) | uniform (head h: mean of 2^h - 1 tokens)
    pos: str = "rope"
    attention: str = "auto"  # auto | flash_attn | flex | sdpa | math
    init_std: float = 0.02
    # Part 4.1's Canon layers (canon.py): a causal depthwise convolution at each site named,
    # A: the normed input before attention, B: q/k/v before the rotation, C: the normed input
    # before the MLP, D: the MLP's pre-activation; "" is off: no parameters, no work
    canon: str = ""
    canon_kernel: int = 4  # tokens each convolution reads, the current one included
    canon_residual: bool = True  # the site's input plus the convolution, not the convolution
    canon_activation: bool = False  # SiLU after the convolution
    # the built-in encodings' options, each read only when that encoding is chosen
    rope: RopeOptions = field(default_factory=RopeOptions)
    relative: RelativeOptions = field(default_factory=RelativeOptions)
    pos_only: RelativeOptions = field(default_factory=RelativeOptions)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def ffn_dim(self) -> int:
        """Hidden width of the MLP: d_ff, or the default for the MLP kind when d_ff is 0; 0 for
        attention-only blocks."""
        if self.mlp == "none":
            return 0
        if self.d_ff:
            return self.d_ff
        if self.mlp == "swiglu":
            # 8/3 keeps a gated MLP's three matrices at the parameter count of gelu's two
            return max(64, 64 * round(8 * self.d_model / 3 / 64))
        return 4 * self.d_model

    def validate(self) -> None:
        """Raise ModelConfigError naming the field (a group's as `group.key`) and its value for
        anything the types allow but the model cannot be built from. Of the encodings' options,
        only those of the encoding in use are checked."""
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
        require(set(self.canon) <= set(CANON_SITES) and len(set(self.canon)) == len(self.canon),
                "canon", self.canon, f"must be distinct letters of {CANON_SITES!r} (\"\": off)")
        mlp_sites = sorted(set(self.canon) & set("CD"))
        require(self.mlp != "none" or not mlp_sites, "canon", self.canon,
                f"site(s) {''.join(mlp_sites)} sit in the MLP, which mlp=none leaves out")
        require(self.canon_kernel in CANON_KERNELS, "canon_kernel", self.canon_kernel,
                f"must be one of {CANON_KERNELS}")
        known = encodings()
        require(self.pos in known, "pos", self.pos, f"must be one of {tuple(known)}")
        require(self.attention in ATTENTION_BACKENDS, "attention", self.attention,
                f"must be one of {ATTENTION_BACKENDS}")
        if self.attention in ("flash_attn", "flex"):  # both take rotations and ALiBi slopes only
            require(known[self.pos].flash_compatible, "attention", self.attention,
                    f"{self.attention} cannot run pos={self.pos!r}; use sdpa or auto")
        require(self.attention != "flex" or self.dropout == 0, "attention", self.attention,
                f"flex has no attention dropout (dropout={self.dropout}); use sdpa or auto")
        checked = [self.pos] if known[self.pos].options else []
        # a group this config lacks (made before its plug-in registered) is at its defaults
        for group in [g for g in checked + list(block_options()) if hasattr(self, g)]:
            options = getattr(self, group)
            try:
                options.validate(self)
            except ModelConfigError as exc:  # the options' own keys are in their group
                if exc.key in {f.name for f in dataclasses.fields(options)}:
                    raise ModelConfigError(f"{group}.{exc.key}", exc.value, exc.reason) from None
                raise


def model_schema() -> type[ModelConfig]:
    """ModelConfig with a field per registered group (`model.<name>`, its options dataclass):
    ModelConfig itself while no plug-in adds a group; the schema experiment files are read
    against."""
    own = {f.name for f in dataclasses.fields(ModelConfig)}
    added = tuple((name, options) for name, options in option_groups().items()
                  if name not in own)
    return _model_schema(added) if added else ModelConfig


@functools.cache  # one class per set of groups: configs of the same groups share it
def _model_schema(groups: tuple[tuple[str, type], ...]) -> type[ModelConfig]:
    fields = [(name, options, field(default_factory=options)) for name, options in groups]
    return dataclasses.make_dataclass("ModelConfig", fields, bases=(ModelConfig,),
                                      namespace={"__module__": __name__})


def complete(config: ModelConfig) -> ModelConfig:
    """`config` with every group registered now, those it lacks at their defaults."""
    if isinstance(config, model_schema()):
        return config
    return model_config_from_dict(dataclasses.asdict(config))


def upgrade_model_dict(saved: dict) -> dict:
    """A model config dict saved by any version (checkpoint meta, weights.pt, a run's
    config.yaml `model` group) in today's layout: legacy flat keys moved into their encoding's
    group, keys and groups that did not exist yet filled with their defaults (for a block
    option: off). Keys this version does not know are kept, for the caller to refuse."""
    upgraded = {key: dict(value) if isinstance(value, dict) else value
                for key, value in saved.items() if key not in LEGACY_KEYS}
    for key, places in LEGACY_KEYS.items():
        if key in saved:
            for group, option in places:
                upgraded.setdefault(group, {}).setdefault(option, saved[key])
    for key, default in dataclasses.asdict(model_schema()()).items():
        if isinstance(default, dict):
            upgraded[key] = default | upgraded.get(key, {})
        else:
            upgraded.setdefault(key, default)
    return upgraded


def model_config_from_dict(saved: dict) -> ModelConfig:
    """The validated ModelConfig a saved dict (any version's) describes; ModelConfigError
    naming a key this version does not know or a value it refuses."""
    upgraded = upgrade_model_dict(saved)
    schema = model_schema()
    known = _dotted(dataclasses.asdict(schema()), set())
    for key, value in _dotted(upgraded, set()).items():
        require(key in known, key, value,
                "unknown model key (an option of a plug-in that is not loaded?)")
    groups = option_groups()
    config = schema(**{key: groups[key](**value) if key in groups else value
                       for key, value in upgraded.items()})
    config.validate()
    return config


def model_difference(saved: dict, current: dict) -> tuple[str, object, object] | None:
    """The first key (dotted: `rope.theta`, `n_layer`) whose value differs between two saved
    model configs in what defines the function the weights compute, as (key, saved's value,
    current's), or None when the weights fit both. Run-time keys, the options of encodings
    not in use and Canon's options while neither has a Canon site are not compared; both sides
    are upgraded first, so a group or key missing from an older config compares at its
    defaults (Canon off)."""
    saved, current = upgrade_model_dict(saved), upgrade_model_dict(current)
    ignored = set(RUN_TIME_KEYS) | {name for name in encodings()
                                    if name not in (saved["pos"], current["pos"])}
    if not (saved["canon"] or current["canon"]):
        ignored |= set(CANON_OPTIONS)
    flat_saved, flat_current = _dotted(saved, ignored), _dotted(current, ignored)
    for key in list(flat_saved) + [k for k in flat_current if k not in flat_saved]:
        if flat_saved.get(key) != flat_current.get(key):
            return key, flat_saved.get(key), flat_current.get(key)
    return None


def _dotted(config: dict, ignored: set[str]) -> dict[str, object]:
    """{key: value} with each group's options as `group.option`, groups after the plain keys."""
    plain = {key: value for key, value in config.items()
             if key not in ignored and not isinstance(value, dict)}
    return plain | {f"{group}.{key}": value
                    for group, options in config.items()
                    if group not in ignored and isinstance(options, dict)
                    for key, value in options.items()}
