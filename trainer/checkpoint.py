"""Checkpoints: DeepSpeed's engine state plus what makes a resumed run exact.

`<run>/checkpoints/step-000100/` holds DeepSpeed's files (model, optimizer, scheduler, ZeRO
partitions), `meta.json` (step, model config, tokenizer and corpus identity), per rank the data
loader state and RNG states, and `weights.pt`, a consolidated fp32 state dict that evaluation
loads without DeepSpeed. Every rank writes into a `.partial-*` directory; once all are done,
rank 0 renames it and points `latest` at it, so a crash mid-save leaves the last good one intact.
"""

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from corpus_gen.core.io import atomic_write
from trainer.errors import TrainError

LATEST = "latest"


def tag(step: int) -> str:
    return f"step-{step:06d}"


def latest_checkpoint(checkpoints: Path) -> Path | None:
    pointer = checkpoints / LATEST
    if not pointer.exists():
        return None
    path = checkpoints / pointer.read_text().strip()
    if not (path / "meta.json").exists():
        raise TrainError(f"{pointer}: points at {path}, which is not a complete checkpoint")
    return path


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def consolidated_state_dict(engine) -> dict | None:
    """The full model state dict in fp32 on rank 0 (None elsewhere), for any ZeRO stage."""
    if engine.zero_optimization_stage() == 3:
        state = engine._zero3_consolidated_16bit_state_dict()
    else:
        state = engine.module.state_dict()
    if dist.get_rank() != 0:
        return None
    return {k: v.detach().float().cpu() for k, v in state.items()}


def save(engine, checkpoints: Path, step: int, meta: dict, data_state: dict,
         keep_last: int) -> Path:
    """Save step `step` atomically; keep the newest `keep_last` checkpoints."""
    rank = dist.get_rank()
    partial = f".partial-{tag(step)}"
    if rank == 0:
        shutil.rmtree(checkpoints / partial, ignore_errors=True)
    dist.barrier()
    engine.save_checkpoint(str(checkpoints), tag=partial, save_latest=False)
    directory = checkpoints / partial
    (directory / f"data-rank{rank}.json").write_text(json.dumps(data_state))
    torch.save(_rng_state(), directory / f"rng-rank{rank}.pt")
    weights = consolidated_state_dict(engine)
    if rank == 0:
        torch.save({"model_config": meta["model_config"], "state_dict": weights},
                   directory / "weights.pt")
        atomic_write(directory / "meta.json", json.dumps({**meta, "step": step}).encode())
    dist.barrier()
    final = checkpoints / tag(step)
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        directory.rename(final)
        atomic_write(checkpoints / LATEST, tag(step).encode())
        steps = sorted(p for p in checkpoints.glob("step-*") if p.is_dir())
        for old in steps[:-keep_last]:
            shutil.rmtree(old)
    dist.barrier()
    return final


def read_meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


def check_compatible(path: Path, model_config: dict, tokenizer_sha: str) -> None:
    """Refuse a checkpoint of another model shape or trained with another tokenizer."""
    meta = read_meta(path)
    if meta["tokenizer_sha256"] != tokenizer_sha:
        raise TrainError(f"{path}: checkpoint was trained with another tokenizer "
                         f"({meta['tokenizer_sha256'][:12]}) than the corpus's "
                         f"({tokenizer_sha[:12]})")
    saved = meta["model_config"]
    for key in sorted(set(saved) | set(model_config)):
        if saved.get(key) != model_config.get(key):
            raise TrainError(f"{path}: checkpoint has model.{key}={saved.get(key)!r} but the "
                             f"config says {model_config.get(key)!r}; use another run "
                             "directory or resume=none")


def load(engine, path: Path) -> tuple[int, dict]:
    """Restore engine, RNG and return (step, this rank's data loader state)."""
    rank = dist.get_rank()
    engine.load_checkpoint(str(path.parent), tag=path.name)
    data_file = path / f"data-rank{rank}.json"
    if not data_file.exists():
        raise TrainError(f"{path}: no data state for rank {rank}; was it saved with another "
                         "number of processes?")
    _set_rng_state(torch.load(path / f"rng-rank{rank}.pt", weights_only=False))
    return read_meta(path)["step"], json.loads(data_file.read_text())
