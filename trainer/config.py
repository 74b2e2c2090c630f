"""Experiment configs: one YAML composing the corpus, model, train and eval groups.

Each group is either a name (a file under configs/<group>/) or a mapping, optionally starting
from a file with `base: <name>`; dotted overrides (`model.n_layer=8 train.lr=3e-4`) come last.
Every group is validated against its dataclass schema, and errors name key, value and file.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import configs
from corpus_gen.core.config import (
    COMMAND_LINE,
    CorpusConfig,
    build_config,
    corpus_config,
    parse_overrides,
    read_yaml,
    require,
)
from corpus_gen.core.corpus_tokenizer import refuse_tokenizer_options
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.registry import schemas
from trainer.eval.registry import eval_schema
from trainer.model.config import LEGACY_KEYS, ModelConfig, model_schema

GROUPS = ("corpus", "model", "train", "eval")
RESUME_MODES = ("auto", "reschedule", "none", "overwrite")  # train.resume: see TrainConfig
OPTIMIZERS = ("adamw", "sgd")  # train.optimizer


@dataclass
class WandbConfig:
    mode: str = "offline"  # online | offline | disabled
    project: str = "physlm"
    entity: str | None = None
    group: str | None = None  # runs of one sweep or suite together (physlm sweep sets it)
    tags: list[str] = field(default_factory=list)  # a sweep run's axis values, `pos=rope`


@dataclass
class LoraOptions:
    """`train.lora`: low-rank adapters (trainer/lora.py); rank 0 trains every weight (full
    finetuning)."""

    rank: int = 0
    alpha: float = 16.0  # the update is scaled by alpha / rank
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: ["qkv", "proj", "fc"])  # Linear names

    def validate(self) -> None:
        require(self.rank >= 0, "lora.rank", self.rank, "must be >= 0 (0: full finetuning)")
        require(self.alpha > 0, "lora.alpha", self.alpha, "must be > 0")
        require(0 <= self.dropout < 1, "lora.dropout", self.dropout, "must be in [0, 1)")
        require(bool(self.targets), "lora.targets", self.targets, "must name a linear layer")


@dataclass
class TrainConfig:
    seed: int = 0
    max_steps: int = 1000
    # times each person's documents are read (Part 3.3's exposures): set, the run's steps follow
    # from the corpus (trainer/exposures.py) and max_steps is not used
    exposures: int | None = None
    ctx: int = 512  # tokens per window; the model's context
    micro_batch: int = 8  # windows per rank per micro-step
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9  # AdamW betas, each in [0, 1)
    beta2: float = 0.95
    # adamw | sgd: torch's SGD with `momentum` (0: plain SGD; with a batch of the whole set,
    # plain GD), weight decay as L2 on the same groups as AdamW's (trainer/optim.py)
    optimizer: str = "adamw"
    momentum: float = 0.0  # SGD's, in [0, 1); AdamW's is beta1
    # parameters kept at their initial (or init_from) values, left out of the optimizer:
    # token_embeddings, positions (the encoding's tables), output_head (untied only), or a glob
    # over parameter names (`blocks.0.attn.*`); each must match some parameter
    freeze: list[str] = field(default_factory=list)
    grad_clip: float = 1.0  # max global gradient norm (0: no clipping)
    precision: str = "fp32"  # fp32 | bf16 | fp16
    zero_stage: int = 0
    # the model under torch.compile (in place: checkpoints keep their keys); the first steps
    # pay the compilation, and eval and generation load the weights into an eager model. On
    # CPU the run trains in torch's deterministic mode (trainer.determinism), which exact
    # resume needs there (off again after the run); not on CUDA, where eager training is not
    # bit-reproducible either and the mode would slow the kernels
    compile: bool = False
    doc_mask: bool = True  # attention confined to each document
    restart_positions: bool = True  # position ids restart per document
    split_documents: bool = True  # documents may continue into the next window
    shuffle_shards: bool = True
    log_every: int = 10
    eval_every: int = 0  # steps between monitoring losses on fixed windows (0: off)
    eval_batches: int = 4
    # steps between runs of the experiment's eval.tasks on the live model, their numbers logged
    # beside the loss (tasks/<task>/<key>): how a mechanism forms along training (0: off)
    tasks_every: int = 0
    ckpt_every: int = 500
    keep_last: int = 2
    # auto: continue the latest checkpoint if any, under the lr schedule it was trained with |
    # reschedule: as auto, under this config's schedule (max_steps, lr, ...) where it differs |
    # none: start fresh, refused if the run directory already holds a run | overwrite: delete
    # the directory's previous run, start over
    resume: str = "auto"
    # a run directory (its latest checkpoint) or a checkpoint whose weights this run starts
    # from: finetuning (same model shape and tokenizer, except that a parent without Canon
    # layers may start a model that adds them: trainer/finetune.py; optimizer and schedule
    # start anew)
    init_from: str | None = None
    lora: LoraOptions = field(default_factory=LoraOptions)  # rank > 0: LoRA finetuning
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def validate(self) -> None:
        for key in ("max_steps", "ctx", "micro_batch", "grad_accum", "log_every", "ckpt_every",
                    "keep_last", "eval_batches"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        # numpy's generators take seeds in [0, 2**32)
        require(0 <= self.seed < 2**32, "seed", self.seed, "must be in [0, 2**32)")
        # comparisons with inf bounds also refuse nan, which no comparison accepts
        require(0 < self.lr < math.inf, "lr", self.lr, "must be > 0 and finite")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio,
                "must be in [0, 1]")
        require(0 <= self.weight_decay < math.inf, "weight_decay", self.weight_decay,
                "must be >= 0 and finite")
        for key in ("beta1", "beta2"):
            require(0 <= getattr(self, key) < 1, key, getattr(self, key), "must be in [0, 1)")
        require(self.optimizer in OPTIMIZERS, "optimizer", self.optimizer,
                f"must be {' or '.join(OPTIMIZERS)}")
        require(0 <= self.momentum < 1, "momentum", self.momentum, "must be in [0, 1)")
        require(self.optimizer == "sgd" or self.momentum == 0, "momentum", self.momentum,
                "must be 0 with optimizer=adamw (momentum is SGD's; AdamW's is beta1)")
        for name in self.freeze:
            require(isinstance(name, str) and name.strip() != "", "freeze", self.freeze,
                    "must list group names or parameter name patterns")
        require(not (self.freeze and self.lora.rank), "freeze", self.freeze,
                "cannot run with lora.rank > 0, which already freezes all but the adapters")
        require(0 <= self.grad_clip < math.inf, "grad_clip", self.grad_clip,
                "must be >= 0 and finite (0: no clipping)")
        for key in ("warmup_steps", "eval_every", "tasks_every"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0 (0: off)")
        require(self.exposures is None or self.exposures >= 1, "exposures", self.exposures,
                "must be >= 1 (null: train.max_steps steps)")
        # with exposures the steps are known once the corpus is: the engine checks warmup then
        require(self.exposures is not None or self.warmup_steps <= self.max_steps,
                "warmup_steps", self.warmup_steps,
                f"must not exceed max_steps ({self.max_steps}): the run would end still warming up")
        require(self.precision in ("fp32", "bf16", "fp16"), "precision", self.precision,
                "must be fp32, bf16 or fp16")
        require(self.zero_stage in (0, 1, 2, 3), "zero_stage", self.zero_stage, "must be 0-3")
        # ZeRO-3 empties the parameters and gathers them in hooks, which the compiled graph,
        # traced with the empty ones, cannot follow (it fails on the first step)
        require(not (self.compile and self.zero_stage == 3), "zero_stage", self.zero_stage,
                "cannot run with compile true (the compiled graph cannot follow its partitioned "
                "parameters): use zero_stage 0-2 or compile false")
        require(self.resume in RESUME_MODES, "resume", self.resume,
                f"must be {', '.join(RESUME_MODES[:-1])} or {RESUME_MODES[-1]}")
        require(self.wandb.mode in ("online", "offline", "disabled"), "wandb.mode",
                self.wandb.mode, "must be online, offline or disabled")
        self.lora.validate()


@dataclass
class Experiment:
    name: str
    corpus: CorpusConfig | None  # None: the experiment trains on a corpus directory it is given
    corpus_name: str  # the corpus config's name, for the corpus cache directory
    model: ModelConfig
    train: TrainConfig
    eval: Any  # trainer.eval.registry.eval_schema(): `tasks` and each task's options
    source: str  # the experiment file


def _group_layers(group: str, value: object, source: str) -> tuple[list, str]:
    """The config layers a group's entry stands for, and the group's name."""
    if isinstance(value, str):
        return [_named_layer(group, group, value, source)], _config_name(value)
    if value is None:
        return [], "default"
    if not isinstance(value, DictConfig):
        raise ConfigError(group, value, "must be a config name or a mapping", source)
    layers, name = [], "inline"
    body = OmegaConf.masked_copy(value, [k for k in value if k != "base"])
    if "base" in value:
        name = _config_name(str(value.base))
        layers.append(_named_layer(group, f"{group}.base", str(value.base), source))
    layers.append((body, source))
    return layers, name


def _config_name(name_or_path: str) -> str:
    """A config's name: a shipped config's own, a file's stem (`my/corpus.yaml`: `corpus`),
    so that the corpus cache directory named after it is one directory under corpora/."""
    return Path(name_or_path).stem if name_or_path.endswith((".yaml", ".yml")) else \
        Path(name_or_path).name


def _named_layer(group: str, key: str, name: str, source: str) -> tuple[DictConfig, str]:
    """The layer a group's `name` stands for: a YAML file of the user's (relative to the
    experiment file) or a shipped config; else a ConfigError naming the experiment's key."""
    # a path on the command line is relative to the working directory, in a file to that file
    relative_to = None if source == COMMAND_LINE else Path(source).parent
    path = configs.find(group, name, relative_to=relative_to)
    if path is None:
        raise ConfigError(key, name, f"no such file, and no shipped {group} config of that "
                          f"name (known: {', '.join(configs.names(group))})", source)
    return read_yaml(path), str(path)


def _refuse_legacy_model_keys(layers: list[tuple[DictConfig, str]]) -> None:
    """Say where a model key of earlier versions went (`rope_theta`: `rope.theta`), rather than
    only that it is unknown."""
    for given, source in layers:
        for key, places in LEGACY_KEYS.items():
            if key in given:
                now = " or ".join(f"model.{group}.{option}" for group, option in places)
                raise ConfigError(f"model.{key}", given[key], f"now {now} (each positional "
                                  "encoding owns its options)", source)


def load_experiment(path: str | Path, overrides: list[str]) -> Experiment:
    return build_experiment(read_yaml(path), str(path), overrides, Path(path).stem)


def build_experiment(given: DictConfig, source: str, overrides: list[str],
                     default_name: str) -> Experiment:
    """The experiment an experiment file's mapping `given` (read from `source`) describes, with
    the command line's `overrides`; named `default_name` unless it names itself."""
    # `model=gpt2_small` replaces the experiment's whole group, and dotted keys apply to it in
    # any order (in one dotlist, `model.n_layer=3` and `model=...` would overwrite each other)
    replaced, dotted = {}, []
    for item in overrides:
        (key, value), = parse_overrides([item]).items()
        if key in GROUPS and not isinstance(value, DictConfig):
            replaced[key] = value
        else:
            dotted.append(item)
    cli = parse_overrides(dotted)
    unknown = [k for k in list(given) + list(cli) if k not in (*GROUPS, "name")]
    if unknown:
        key = unknown[0]
        layer = given if key in given else cli
        raise ConfigError(key, OmegaConf.to_container(layer)[key],
                          f"unknown experiment key; expected {GROUPS}",
                          source if key in given else COMMAND_LINE)
    layers, names = {}, {}
    for group in GROUPS:
        if group in replaced:
            layers[group], names[group] = _group_layers(group, replaced[group], COMMAND_LINE)
        else:
            layers[group], names[group] = _group_layers(group, given.get(group), source)
        if group in cli:
            layers[group].append((cli[group], COMMAND_LINE))
    corpus = (corpus_config(layers["corpus"], schemas(), prefix="corpus.")
              if layers["corpus"] else None)  # optional when training on a given corpus dir
    if corpus is not None:
        try:  # here, not only when gen runs: a sweep or submit is refused before it starts
            refuse_tokenizer_options(corpus)
        except ConfigError as exc:
            raise ConfigError(f"corpus.{exc.key}", exc.value, exc.reason, source) from None
    _refuse_legacy_model_keys(layers["model"])
    return Experiment(
        name=str(cli.get("name", given.get("name", default_name))),
        corpus=corpus,
        corpus_name=names["corpus"],
        model=build_config(model_schema(), layers["model"] or [({}, source)], "model."),
        train=build_config(TrainConfig, layers["train"] or [({}, source)], "train."),
        eval=build_config(eval_schema(), layers["eval"] or [({}, source)], "eval."),
        source=source,
    )
