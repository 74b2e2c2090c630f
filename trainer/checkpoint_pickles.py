"""Loading a checkpoint's pickles so that a planted one cannot run code.

Every file is loaded with `torch.load(weights_only=True)`, which unpickles tensors and plain data
only, plus the few classes of DeepSpeed's own files (`DEEPSPEED_GLOBALS`), each checked to be
plain data. A whole checkpoint is screened first (`refuse_unsafe` reads each pickle, not its
tensors), and DeepSpeed loads through a checkpoint engine of ours that loads the same way.
"""

import functools
import importlib
import pickle
from pathlib import Path

import torch

from trainer.errors import DamagedCheckpoint, TrainError

# How a failed write (disk full, quota, I/O error) surfaces: OSError from Python's own writes,
# RuntimeError from torch.save's zip writer (its message varies: "unexpected pos ...",
# "PytorchStreamWriter failed writing file ...").
WRITE_ERRORS = (OSError, RuntimeError)

# The classes DeepSpeed's own checkpoint files hold beyond tensors and plain data, found by saving
# ZeRO 0-3 x fp32/bf16 checkpoints through the trainer and listing what
# torch.serialization.get_unsafe_globals_in_checkpoint reports. Each is plain data: unpickling
# one only looks up an enum member or sets attributes, so none can run code.
DEEPSPEED_GLOBALS = (
    # ZeRO 1-3 optimizer files: `zero_stage`, an int Enum, unpickled by looking its value up
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    # ZeRO 1-3 optimizer files: `loss_scaler`, the static scaler fp32 and bf16 runs use (scale 1)
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    # the same slot in fp16 runs, which scale dynamically (CPUs cannot train fp16: found by
    # pickling the scaler DeepSpeed's CreateLossScaler builds for fp16)
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    # ZeRO 1-2 optimizer files: `param_slice_mappings`, a (numel, start) dataclass per parameter
    "deepspeed.utils.tensor_fragment.fragment_address",
)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def safe_load(file: Path, map_location=None, allowed: tuple = ()):
    """torch.load with weights_only=True (plus the classes `allowed`); a file it refuses or
    cannot read becomes a one-line TrainError naming it."""
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise TrainError(f"{file}: holds objects other than tensors and plain data, which "
                         "loading could run as code; refusing to load it") from None
    except (RuntimeError, OSError, EOFError) as exc:
        raise TrainError(f"{file}: cannot be read ({one_line(exc)})") from None


def pickle_globals(file: Path) -> set[str]:
    """The classes and functions `file`'s pickle names beyond tensors and plain data; reads the
    pickle only, not the tensors. DamagedCheckpoint if it is not a file torch.save wrote."""
    try:
        return set(torch.serialization.get_unsafe_globals_in_checkpoint(file))
    except (ValueError, RuntimeError, OSError, EOFError) as exc:
        raise DamagedCheckpoint(f"{file}: not a file torch.save wrote ({one_line(exc)})"
                                ) from None


def refuse_unsafe(file: Path, allowed: tuple) -> None:
    """Refuse a file whose pickle names anything but tensors, plain data and `allowed`. This
    reads the pickle only, not the tensors, so every rank checks every file of a checkpoint and
    all reach the same verdict before DeepSpeed's collectives (one rank failing alone inside
    them would leave the others waiting)."""
    unsafe = pickle_globals(file) - set(allowed)
    if unsafe:
        raise TrainError(f"{file}: holds {', '.join(sorted(unsafe))}, which loading could run "
                         "as code; refusing to load it")


@functools.cache
def _deepspeed_classes() -> tuple:
    classes = []
    for name in DEEPSPEED_GLOBALS:
        module, _, attribute = name.rpartition(".")
        classes.append(getattr(importlib.import_module(module), attribute))
    return tuple(classes)


@functools.cache
def _checkpoint_engine_class() -> type:
    """DeepSpeed's torch.save/torch.load checkpoint engine, made to load with weights_only=True
    and to keep a failed write instead of raising it. Built on first use: deepspeed is slow to
    import and evaluation, which imports the checkpoint module, does not need it."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    class SafeCheckpointEngine(TorchCheckpointEngine):
        failure: Exception | None = None

        def save(self, state_dict, path: str) -> None:
            # a rank raising here would skip DeepSpeed's closing barrier and hang the others:
            # keep the first failure for the checkpoint's save to agree on across ranks
            try:
                super().save(state_dict, path)
            except WRITE_ERRORS as exc:
                self.failure = self.failure or exc

        def load(self, path: str, map_location=None):
            return safe_load(Path(path), map_location, _deepspeed_classes())

    return SafeCheckpointEngine


def safe_checkpoint_engine(engine):
    """The DeepSpeed engine's checkpoint engine, replaced by the safe one on first use."""
    cls = _checkpoint_engine_class()
    if not isinstance(engine.checkpoint_engine, cls):
        engine.checkpoint_engine = cls(engine._config)
    return engine.checkpoint_engine
