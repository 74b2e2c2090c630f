"""Finetuning: a run whose weights start from another run's (`train.init_from`).

The parent is a run directory (its latest checkpoint) or one checkpoint directory. Its weights
load into the freshly built model before the optimizer exists, so optimizer state, lr schedule
and data order start anew; the parent is recorded in every checkpoint's meta.json. A resumed
finetuning run continues from its own checkpoints, as any run does.

The parent must have this run's model config, with one exception: a parent without Canon layers
(`model.canon: ""`) starts a run that adds them, its config otherwise the same. Every weight the
two share loads, and the Canon convolutions keep their fresh initialization (each starts as
identity plus a small convolution: the residual). The reverse, a Canon parent into a model with
other Canon sites or none, would drop or invent trained weights and is refused like any other
difference, naming `model.canon`.
"""

from pathlib import Path

from torch import nn

from trainer import checkpoint
from trainer.errors import DamagedCheckpoint, TrainError
from trainer.model.canon import Canon
from trainer.model.config import CANON_OPTIONS, model_difference
from trainer.run_dir import CHECKPOINTS, META, WEIGHTS, latest_checkpoint


def parent_checkpoint(init_from: str) -> Path:
    """The checkpoint `train.init_from` names: a run directory's latest, or a checkpoint."""
    given = Path(init_from)
    if (given / META).is_file():
        return given
    path = latest_checkpoint(given / CHECKPOINTS)
    if path is None:
        raise TrainError(f"train.init_from={init_from}: neither a run directory with a "
                         "checkpoint (checkpoints/latest) nor a checkpoint directory")
    return path


def load_parent(model: nn.Module, init_from: str, model_config: dict,
                tokenizer_sha: str) -> dict:
    """Load the parent checkpoint's weights into `model`; return what meta.json records of it.
    The parent must have this run's model shape and this corpus's tokenizer."""
    path = parent_checkpoint(init_from)
    try:
        meta = checkpoint.read_meta(path)
    except DamagedCheckpoint as exc:
        raise TrainError(f"train.init_from={init_from}: {exc}") from None
    found = checkpoint.incompatibility(meta, model_config, tokenizer_sha)
    adds_canon = _adds_canon(meta["model_config"], model_config)
    if found and found[0] == "tokenizer":
        raise TrainError(f"train.init_from={init_from}: {path} was trained with another "
                         f"tokenizer ({found[1][:12]}) than this corpus's ({found[2][:12]}); "
                         "finetune on a corpus that shares its tokenizer (tokenizer.model or "
                         "vocab.json)")
    if found and not adds_canon:
        raise TrainError(f"train.init_from={init_from}: the parent has {found[0]}={found[1]!r}, "
                         f"this experiment {found[2]!r}; give the experiment the parent's model "
                         "config")
    state = checkpoint.load_weights(path / WEIGHTS)["state_dict"]
    missing, unexpected = model.load_state_dict(state, strict=not adds_canon)
    fresh = [key for key in missing if not isinstance(model.get_submodule(key.rpartition(".")[0]),
                                                      Canon)]
    if fresh or unexpected:  # a parent whose weights do not fit its own config
        raise TrainError(f"train.init_from={init_from}: {path / WEIGHTS} does not fit this "
                         f"model: missing {fresh}, unexpected {unexpected}")
    return {"run": str(path.parent.parent.resolve()), "checkpoint": path.name,
            "step": meta["step"]}


def _adds_canon(parent: dict, child: dict) -> bool:
    """Whether the child model config is the parent's with Canon layers added (the one
    difference init_from allows)."""
    canon_keys = ("canon", *CANON_OPTIONS)
    if parent.get("canon", "") or not child["canon"]:
        return False
    return model_difference(parent | {key: child[key] for key in canon_keys}, child) is None
