"""`physlm eval RUN_DIR [--task T]`: load the run's latest weights and run evaluation tasks."""

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from corpus_gen.core.io import atomic_write
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.tokenizer import Tokenizer
from trainer import checkpoint
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext, eval_schema, tasks
from trainer.model import GPT, ModelConfig
from trainer.tracking import Tracker


def load_model(run_dir: Path, device: torch.device) -> tuple[GPT, dict]:
    path = checkpoint.latest_checkpoint(run_dir / "checkpoints")
    if path is None:
        raise TrainError(f"{run_dir}: no checkpoint to evaluate (checkpoints/latest missing)")
    saved = checkpoint.load_weights(path / "weights.pt")  # tensors and plain types only
    try:
        model = GPT(ModelConfig(**saved["model_config"]))
        model.load_state_dict(saved["state_dict"])
    except (TypeError, ValueError, RuntimeError) as exc:  # torch lists every mismatched tensor
        raise TrainError(f"{path / 'weights.pt'}: does not fit its model_config: "
                         f"{str(exc).strip().splitlines()[-1].strip()}") from None
    return model.to(device).eval(), checkpoint.read_meta(path)


def evaluate(run_dir: Path, task_names: list[str] | None = None,
             eval_config: Any = None, corpus_dir: Path | None = None) -> dict:
    """Run `task_names` (default: the run's `eval.tasks`) on the run's latest checkpoint; write
    `<run>/eval/<task>.json`."""
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise TrainError(f"{run_dir}: not a run directory (no config.yaml)")
    resolved = OmegaConf.load(config_path)
    corpus_dir = Path(corpus_dir or resolved.corpus_dir)
    if eval_config is None:
        eval_config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(eval_schema()),
                                                          resolved.eval))
    task_names = list(task_names or eval_config.tasks)
    known = tasks()
    for name in task_names:
        if name not in known:
            raise TrainError(f"--task {name}: unknown evaluation task; known: "
                             f"{', '.join(sorted(known))}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, meta = load_model(run_dir, device)
    manifest = read_manifest(corpus_dir)
    if manifest["tokenizer"]["sha256"] != meta["tokenizer_sha256"]:
        raise TrainError(f"{corpus_dir}: its tokenizer differs from the one {run_dir} was "
                         "trained with")
    context = EvalContext(model, Tokenizer.load(corpus_dir / "tokenizer.model"), corpus_dir,
                          run_dir, device)
    out = run_dir / "eval"
    out.mkdir(exist_ok=True)
    wandb = resolved.train.wandb  # the training run's W&B run continues (its id file)
    tracker = Tracker(run_dir, resolved.name, {}, wandb.mode, wandb.project, wandb.entity,
                      group=wandb.get("group"), tags=list(wandb.get("tags") or []))
    results = {}
    for name in task_names:
        task = known[name]
        options = getattr(eval_config, name)
        result = {"step": meta["step"], "run": resolved.name, **task.run(context, options)}
        atomic_write(out / f"{name}.json", (json.dumps(result, indent=1) + "\n").encode())
        tracker.summary(_flatten(f"eval/{name}", result))
        if task.plot is not None:
            task.plot(result, out / f"{name}.png")
            tracker.log_image(f"eval/{name}", out / f"{name}.png")
        results[name] = result
    tracker.finish()
    return results


def _flatten(prefix: str, value) -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in
                _flatten(f"{prefix}/{key}", item).items()}
    return {prefix: value}
