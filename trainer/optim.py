"""A run's optimizer and the parameters it leaves alone: `train.optimizer`, `train.momentum` and
`train.freeze` (TrainConfig).

`freeze` names groups (FREEZE_GROUPS) or fnmatch patterns over the model's parameter names
(`GPT.named_parameters()`: `blocks.0.attn.qkv.weight`); a frozen parameter gets requires_grad
False, which GPT's optimizer groups leave out, so it keeps its initial (or init_from) values and
no weight decay touches it. With tied embeddings the output head is the token table: freezing
`token_embeddings` freezes both, and `output_head` is refused (it cannot be frozen alone).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import Path

import torch

from trainer.config import TrainConfig
from trainer.errors import TrainError
from trainer.model import GPT

FREEZE_GROUPS = {"token_embeddings": "tok_emb.weight", "positions": "positional.*",
                 "output_head": "lm_head.*"}  # its bias too (model.head_bias)
# what a checkpoint's optimizer state was made under: a resume refuses a change in any
OPTIMIZER_KEYS = ("optimizer", "momentum", "freeze")


def freeze(model: GPT, names: list[str]) -> list[str]:
    """Freeze the parameters each of `names` stands for; their names, in model order.
    TrainError naming `train.freeze` for a name that matches no parameter, the tied output head,
    or a list that leaves nothing to train."""
    parameters = dict(model.named_parameters())  # a tied head is listed once, as tok_emb.weight
    if "output_head" in names and model.config.tie_embeddings:
        raise TrainError("train.freeze: output_head is the token embedding table while "
                         "model.tie_embeddings is true; freeze token_embeddings (both; a "
                         "model.head_bias stays trainable: freeze lm_head.bias by name) or set "
                         "model.tie_embeddings false")
    frozen = set()
    for name in names:
        pattern = FREEZE_GROUPS.get(name, name)
        matched = {key for key in parameters if fnmatchcase(key, pattern)}
        if not matched:
            raise TrainError(f"train.freeze: {name!r} matches no parameter of the model "
                             f"(its parameters: {', '.join(_short_names(parameters))}; "
                             f"groups: {', '.join(FREEZE_GROUPS)})")
        frozen |= matched
    if len(frozen) == len(parameters):
        raise TrainError(f"train.freeze: {names} freezes every parameter; nothing would train")
    for key in frozen:
        parameters[key].requires_grad_(False)
    return [key for key in parameters if key in frozen]


def _short_names(parameters: dict) -> list[str]:
    """The parameter names with block indices as `*`, each once: the list stays short."""
    return list(dict.fromkeys(re.sub(r"^blocks\.\d+\.", "blocks.*.", key) for key in parameters))


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (the default) or SGD with momentum over GPT's decay groups of trainable parameters;
    SGD's weight decay is an L2 term on the same groups."""
    groups = model.configure_optimizer_groups(cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def optimizer_settings(cfg: TrainConfig) -> dict:
    """The settings a checkpoint's optimizer state depends on, for its meta.json."""
    return {"optimizer": cfg.optimizer, "momentum": cfg.momentum, "freeze": list(cfg.freeze)}


def check_same_optimizer(saved_meta: dict, cfg: TrainConfig, path: Path) -> None:
    """Refuse to resume checkpoint `path` (meta `saved_meta`) under other optimizer settings:
    its optimizer state would load into the wrong parameters or the wrong optimizer. A
    checkpoint from before these settings were recorded was made by AdamW with nothing
    frozen."""
    saved = saved_meta.get("optimizer", optimizer_settings(TrainConfig()))
    wanted = optimizer_settings(cfg)
    changed = next((key for key in OPTIMIZER_KEYS if saved.get(key) != wanted[key]), None)
    if changed:
        raise TrainError(f"{path}: trained with train.{changed}={saved.get(changed)!r}, but the "
                         f"config says {wanted[changed]!r}, and its optimizer state fits only "
                         "the former; use another --run-dir (train.init_from= it starts from "
                         "its weights) or resume=overwrite")
