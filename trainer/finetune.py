"""Finetuning: a run whose weights start from another run's (`train.init_from`).

The parent is a run directory (its latest checkpoint) or one checkpoint directory. Its weights
load into the freshly built model before the optimizer exists, so optimizer state, lr schedule
and data order start anew; the parent is recorded in every checkpoint's meta.json. A resumed
finetuning run continues from its own checkpoints, as any run does.
"""

from pathlib import Path

from torch import nn

from trainer import checkpoint
from trainer.errors import DamagedCheckpoint, TrainError
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
    if found and found[0] == "tokenizer":
        raise TrainError(f"train.init_from={init_from}: {path} was trained with another "
                         f"tokenizer ({found[1][:12]}) than this corpus's ({found[2][:12]}); "
                         "finetune on a corpus that shares its tokenizer (tokenizer.model or "
                         "vocab.json)")
    if found:
        raise TrainError(f"train.init_from={init_from}: the parent has {found[0]}={found[1]!r}, "
                         f"this experiment {found[2]!r}; give the experiment the parent's model "
                         "config")
    model.load_state_dict(checkpoint.load_weights(path / WEIGHTS)["state_dict"])
    return {"run": str(path.parent.parent.resolve()), "checkpoint": path.name,
            "step": meta["step"]}
