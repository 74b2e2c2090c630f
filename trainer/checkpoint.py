"""Checkpoints: a TrainState's named parts, saved so that a resumed run is exact.

`<run>/checkpoints/step-000100/` holds, part by part: the engine's DeepSpeed files (model,
optimizer, scheduler, ZeRO partitions) and `weights.pt`, a consolidated fp32 state dict that
evaluation loads without DeepSpeed; one file per rank for each per-rank part (`data-rank0.json`,
`rng-rank0.pt`); and `meta.json`, the TrainState's own state (step, run id, model config,
tokenizer and corpus identity). Every rank writes into a `.partial-*` directory; once all are
done, rank 0 renames it and points `latest` at it, so a crash or a full disk mid-save leaves the
last good one intact. A checkpoint never holds non-finite weights, and every file is loaded with
`torch.load(weights_only=True)`, DeepSpeed's too, so a planted pickle cannot run code
(trainer.checkpoint_pickles). The names of the run directory's files and the `latest` pointer
are trainer.run_dir's.
"""

import json
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
import torch.distributed as dist

from corpus_gen.core.io import read_json_file
from trainer import lora
from trainer.checkpoint_pickles import (
    DEEPSPEED_GLOBALS,
    WRITE_ERRORS,
    one_line,
    pickle_globals,
    refuse_unsafe,
    safe_checkpoint_engine,
    safe_load,
)
from trainer.errors import DamagedCheckpoint, TrainError
from trainer.model import GPT
from trainer.model.config import ModelConfig, model_config_from_dict, model_difference
from trainer.run_dir import (
    META,
    STEP,
    WEIGHTS,
    checkpoint_steps,
    latest_checkpoint,
    point_latest,
    read_latest,
    step_of,
)

if TYPE_CHECKING:  # deepspeed is slow to import; evaluation imports this module without it
    from deepspeed import DeepSpeedEngine

# what every reader of a checkpoint's meta.json relies on, and its type
META_FIELDS = {"step": int, "model_config": dict, "tokenizer_sha256": str}


class Stateful(Protocol):
    """A part of the train state: what it saves, and how it takes that back."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class RNGState:
    """The global generators of Python, numpy and torch (and CUDA's), which dropout and anything
    else random draws from: a resumed run continues their streams."""

    def state_dict(self) -> dict:
        """As tensors and plain data, which torch.load(weights_only=True) reads."""
        kind, key, pos, has_gauss, gauss = np.random.get_state()
        state = {"torch": torch.get_rng_state(), "python": random.getstate(),
                 "numpy": [kind, key.tolist(), pos, has_gauss, gauss]}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["torch"])
        random.setstate(state["python"])
        np.random.set_state(tuple(state["numpy"]))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainState:
    """What a checkpoint saves and a resume restores, as named parts (after lingua's TrainState
    and torchtitan's checkpointer, which take named Stateful objects):

    - `engine`: model, optimizer and lr schedule, saved by DeepSpeed in its own files;
    - the per-rank parts (`parts()`: the data loader's position and the RNG states), one file
      per rank each, `<name>-rank<r>.json` for plain data, `.pt` for a state holding tensors;
    - `step` and `meta`, the run's identity (model config, tokenizer and corpus, world size, run
      id): this object's own state, `meta.json`.
    """

    engine: "DeepSpeedEngine"
    data: Stateful
    meta: dict
    rng: RNGState = field(default_factory=RNGState)
    step: int = 0  # optimizer steps taken

    def parts(self) -> dict[str, Stateful]:
        """The per-rank parts, by the name their files carry."""
        return {"data": self.data, "rng": self.rng}

    def state_dict(self) -> dict:
        return {**self.meta, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        if "run_id" in state:  # the resumed run's id: keep_last goes on pruning its checkpoints
            self.meta["run_id"] = state["run_id"]


def tag(step: int) -> str:
    return f"{STEP}{step:06d}"


def resumable(checkpoints: Path) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from: the one `latest` names or, where that one is damaged, the
    newest older one that is intact (`damage`); and why each newer one was passed over. Raises
    DamagedCheckpoint when none is intact: starting over would silently discard the run."""
    name = read_latest(checkpoints)
    if name is None:
        return None, []
    latest = checkpoints / name
    newest = step_of(latest.name)
    steps = {p: step for p, step in checkpoint_steps(checkpoints).items()
             if p != latest and (newest is None or step < newest)}
    older = sorted(steps, key=steps.get, reverse=True)
    skipped = []
    for path in (latest, *older):
        reason = damage(path)
        if reason is None:
            return path, skipped
        skipped.append(reason)
    raise DamagedCheckpoint(f"{skipped[0]}; no older checkpoint in {checkpoints} is intact "
                            "either (resume=overwrite deletes them and starts over)")


def damage(path: Path) -> str | None:
    """Why the checkpoint `path` is damaged (meta.json or weights.pt missing, or a file that
    does not read as what it should be), or None. Reads meta.json and each pickle's header, not
    the tensors: cheap, and every rank reaches the same verdict."""
    try:
        read_meta(path)
        if not (path / WEIGHTS).is_file():
            raise DamagedCheckpoint(f"{path / WEIGHTS}: missing")
        for file in sorted(path.glob("*.pt")):
            pickle_globals(file)
    except DamagedCheckpoint as exc:
        return str(exc)
    return None


def _last_good(checkpoints: Path) -> str:
    try:
        path = latest_checkpoint(checkpoints)
    except TrainError:  # `latest` names an incomplete directory: nothing good to point at
        return "none"
    return str(path) if path else "none"


def _tensors(obj) -> Iterator[torch.Tensor]:
    """Every tensor in a nest of dicts, lists and tuples (a state dict)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def _engine_tensors(engine) -> Iterator[torch.Tensor]:
    """This rank's weights and optimizer state. ZeRO and bf16 wrap the optimizer, whose state
    dict then holds this rank's fp32 partitions and their moments; under ZeRO-3 the module's
    parameters are empty placeholders and `ds_tensor` holds this rank's shard."""
    yield from _tensors(engine.module.state_dict())
    yield from (p.ds_tensor for p in engine.module.parameters() if hasattr(p, "ds_tensor"))
    yield from _tensors(engine.optimizer.state_dict())


def _is_finite(tensor: torch.Tensor) -> bool:
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    # aminmax propagates NaN and needs no tensor-sized temporary, unlike isfinite(t).all()
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low) and torch.isfinite(high))


def _agree(ok: bool, device: torch.device) -> bool:
    """True on every rank if `ok` is true on every rank."""
    flag = torch.tensor([int(ok)], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _first_failure(failure: Exception | None) -> str | None:
    """On every rank, the first rank's failure as one line (None if no rank failed), so that
    all ranks stop together and each can say why."""
    reasons = [None] * dist.get_world_size()
    dist.all_gather_object(reasons, one_line(failure) if failure else None)
    for rank, reason in enumerate(reasons):
        if reason:
            return reason if len(reasons) == 1 else f"rank {rank}: {reason}"
    return None


def consolidated_state_dict(engine) -> dict | None:
    """The full model state dict in fp32 on rank 0 (None elsewhere), for any ZeRO stage."""
    if engine.zero_optimization_stage() == 3:
        state = engine._zero3_consolidated_16bit_state_dict()
    else:
        state = engine.module.state_dict()
    if dist.get_rank() != 0:
        return None
    state = {k: v.detach().float().cpu() for k, v in state.items()}
    scale = lora.scalings(engine.module)
    return lora.merged(state, scale) if scale else state  # LoRA: the plain model's weights


def save(state: TrainState, checkpoints: Path, keep_last: int) -> Path:
    """Save `state` as step `state.step` atomically; keep the newest `keep_last` checkpoints of
    this run.

    Raises TrainError on every rank, with nothing new on disk and `latest` unchanged, if the
    weights or optimizer state are not finite or if any rank fails to write (disk full)."""
    engine, step = state.engine, state.step
    if not _agree(all(map(_is_finite, _engine_tensors(engine))), engine.device):
        raise TrainError(f"weights or optimizer state became non-finite by step {step}; not "
                         f"saved (last good checkpoint: {_last_good(checkpoints)})")
    rank = dist.get_rank()
    partial = checkpoints / f".partial-{tag(step)}"
    final = checkpoints / tag(step)
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
    dist.barrier()
    reason = _first_failure(_write_partial(state, partial))
    if reason is None:
        reason = _first_failure(_commit(partial, final) if rank == 0 else None)
        if reason is None:
            if rank == 0:
                _prune(checkpoints, state.meta.get("run_id"), keep_last, final)
            dist.barrier()
            return final
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
    raise TrainError(f"{partial}: saving the checkpoint failed ({reason}); removed it, the last "
                     f"good checkpoint is intact: {_last_good(checkpoints)}")


def _part_file(path: Path, name: str, rank: int, suffix: str) -> Path:
    return path / f"{name}-rank{rank}{suffix}"


def _write_partial(state: TrainState, partial: Path) -> Exception | None:
    """Write this rank's files into `partial`. A failed write is returned, not raised, so that
    every rank still takes part in the collectives here and in `save`."""
    rank, engine = dist.get_rank(), state.engine
    checkpoint_engine = safe_checkpoint_engine(engine)
    checkpoint_engine.failure = None
    failure = None
    try:
        engine.save_checkpoint(str(partial.parent), tag=partial.name, save_latest=False)
    except WRITE_ERRORS as exc:
        # the checkpoint engine keeps torch.save's failures, so what raises here is rank 0
        # copying DeepSpeed's recovery scripts, after the last collective but before the closing
        # barrier: meet the other ranks there
        failure = exc
        dist.barrier()
    failure = checkpoint_engine.failure or failure
    weights = consolidated_state_dict(engine)  # gathers the shards under ZeRO-3: every rank
    if failure is not None:
        return failure
    try:
        for name, part in state.parts().items():
            value = part.state_dict()
            if next(_tensors(value), None) is None:  # plain data: readable JSON
                _part_file(partial, name, rank, ".json").write_text(json.dumps(value))
            else:
                torch.save(value, _part_file(partial, name, rank, ".pt"))
        if rank == 0:
            torch.save({"model_config": state.meta["model_config"], "state_dict": weights},
                       partial / WEIGHTS)
            # written last: a directory with meta.json is a complete checkpoint
            (partial / META).write_text(json.dumps(state.state_dict()))
    except WRITE_ERRORS as exc:
        return exc
    return None


def _commit(partial: Path, final: Path) -> OSError | None:
    """Rank 0: rename the finished directory and point `latest` at it."""
    try:
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        point_latest(final.parent, final.name)
    except OSError as exc:
        # renamed but `latest` not moved: drop it so that what is on disk is what `latest` says
        shutil.rmtree(final, ignore_errors=True)
        return exc
    return None


def _prune(checkpoints: Path, run_id: str | None, keep_last: int, saved: Path) -> None:
    """Remove this run's checkpoints but the newest `keep_last`, ordered by step, not by name
    (step-1000000 sorts before step-999999 as text). Another run's checkpoints, or a directory
    without a readable meta.json, are not this run's to remove."""
    ours = []
    for path in checkpoints.glob(f"{STEP}*"):
        try:
            meta = read_meta(path)
        except DamagedCheckpoint:
            continue
        if meta.get("run_id") == run_id:
            ours.append((meta["step"], path))
    for _, old in sorted(ours)[:-keep_last]:
        if old != saved:
            shutil.rmtree(old)


def read_meta(path: Path) -> dict:
    """The checkpoint `path`'s meta.json; DamagedCheckpoint naming the file if it is not one."""
    file = path / META
    try:
        meta = read_json_file(file, DamagedCheckpoint)
    except OSError as exc:  # missing
        raise DamagedCheckpoint(f"{file}: cannot be read ({one_line(exc)})") from None
    wrong = [key for key, kind in META_FIELDS.items()
             if not isinstance(meta, dict) or not isinstance(meta.get(key), kind)]
    if wrong:
        raise DamagedCheckpoint(f"{file}: not a checkpoint's meta.json (no {' or '.join(wrong)} "
                                "of the right type)")
    return meta


def incompatibility(meta: dict, model_config: dict, tokenizer_sha: str
                    ) -> tuple[str, object, object] | None:
    """The first thing a checkpoint's meta differs in from this run: ("tokenizer", its sha256,
    the corpus's) or ("model.<key>", its value, the config's) for a key that shapes what the
    weights compute (a checkpoint saved before a model option existed, or with another
    attention backend, fits); None if it fits."""
    if meta["tokenizer_sha256"] != tokenizer_sha:
        return "tokenizer", meta["tokenizer_sha256"], tokenizer_sha
    found = model_difference(meta["model_config"], model_config)
    if found is None:
        return None
    key, saved, wanted = found
    return f"model.{key}", saved, wanted


def check_compatible(path: Path, model_config: dict, tokenizer_sha: str) -> None:
    """Refuse to resume from a checkpoint of another model shape or tokenizer."""
    found = incompatibility(read_meta(path), model_config, tokenizer_sha)
    if found is None:
        return
    key, saved, wanted = found
    if key == "tokenizer":
        raise TrainError(f"{path}: checkpoint was trained with another tokenizer "
                         f"({saved[:12]}) than the corpus's ({wanted[:12]})")
    raise TrainError(f"{path}: checkpoint has {key}={saved!r} but the config says {wanted!r}; "
                     "use another run directory or resume=overwrite")


def load(state: TrainState, path: Path) -> None:
    """Restore every part of `state` from the checkpoint `path`.

    Refuses (TrainError) a checkpoint with a file that loading could run code from, whose
    weights or optimizer state are not finite, or whose part states this run cannot take."""
    rank, engine = dist.get_rank(), state.engine
    for file in sorted(path.glob("*.pt")):
        refuse_unsafe(file, DEEPSPEED_GLOBALS)
    safe_checkpoint_engine(engine)
    engine.load_checkpoint(str(path.parent), tag=path.name)
    if not _agree(all(map(_is_finite, _engine_tensors(engine))), engine.device):
        raise TrainError(f"{path}: holds non-finite weights or optimizer state; refusing to "
                         "resume from it")
    for name, part in state.parts().items():
        try:
            part.load_state_dict(_read_part(path, name, rank))
        except ValueError as exc:  # saved by a run with other settings, or unreadable
            raise TrainError(f"{path}: {exc}") from None
    state.load_state_dict(read_meta(path))


def _read_part(path: Path, name: str, rank: int) -> dict:
    json_file, pt_file = (_part_file(path, name, rank, suffix) for suffix in (".json", ".pt"))
    if json_file.exists():
        return json.loads(json_file.read_text())
    if pt_file.exists():
        return safe_load(pt_file)
    raise TrainError(f"{path}: no {name} state for rank {rank}; was it saved with another "
                     "number of processes?")


def load_weights(path: Path) -> dict:
    """A checkpoint's `weights.pt` (`path` is the file): {"model_config": dict, "state_dict":
    tensors}, for evaluation without DeepSpeed. Refuses a file that could run code, is not such
    a payload, or holds non-finite weights."""
    payload = safe_load(path, map_location="cpu")
    if not (isinstance(payload, dict) and isinstance(payload.get("model_config"), dict)
            and isinstance(payload.get("state_dict"), dict)):
        raise TrainError(f"{path}: not a weights file (a dict of model_config and state_dict)")
    tensors = list(_tensors(payload["state_dict"]))
    bad = sum(not _is_finite(t) for t in tensors)
    if bad:
        raise TrainError(f"{path}: holds non-finite weights ({bad} of {len(tensors)} tensors); "
                         "it cannot be evaluated")
    return payload


def checkpoint_weights(path: Path, attention: str | None = None
                       ) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The model config and state dict (on the CPU) in checkpoint `path`'s weights.pt, once the
    state dict is known to fit a model of the config; a TrainError naming the file otherwise.
    `attention`: the backend the check builds that model with in place of the run's, which the
    weights do not depend on (export reads a flash_attn run where flash_attn is not installed);
    the config returned is the run's."""
    saved = load_weights(path / WEIGHTS)  # tensors and plain types only
    try:
        config = model_config_from_dict(saved["model_config"])
        with torch.device("meta"):  # shapes only: no memory, no random init
            model = GPT(config if attention is None else replace(config, attention=attention))
        model.load_state_dict(saved["state_dict"], assign=True)  # strict: every name and shape
    except (TypeError, ValueError, RuntimeError) as exc:  # torch lists every mismatched tensor
        raise TrainError(f"{path / WEIGHTS}: does not fit its model_config: "
                         f"{str(exc).strip().splitlines()[-1].strip()}") from None
    return config, saved["state_dict"]
