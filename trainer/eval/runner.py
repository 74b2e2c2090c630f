"""`physlm eval RUN_DIR [--task T]`: load the run's latest weights and run evaluation tasks."""

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.manifest import read_manifest
from trainer import checkpoint
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext, Task, eval_schema, tasks
from trainer.model import GPT
from trainer.quantize import Quantization, quantize_model, suffix
from trainer.run_dir import (
    CHECKPOINTS,
    CONFIG,
    EVAL,
    latest_checkpoint,
    read_run_config,
    run_lock,
    write_error,
)
from trainer.tracking import Tracker

STAGING = "-staging-"  # eval/.<task>-staging-XXXX: a task's files until it has finished


def load_model(run_dir: Path, device: torch.device,
               quantize: Quantization | None = None) -> tuple[GPT, dict]:
    """The run's latest weights in eval mode on `device`, rounded to `quantize`'s grid where
    given (trainer/quantize.py), and the checkpoint's meta."""
    path = latest_checkpoint(run_dir / CHECKPOINTS)
    if path is None:
        raise TrainError(f"{run_dir}: no checkpoint to evaluate (checkpoints/latest missing)")
    config, state = checkpoint.checkpoint_weights(path)
    model = GPT(config)
    model.load_state_dict(state)
    if quantize is not None:
        quantize_model(model, quantize)
    return model.to(device).eval(), checkpoint.read_meta(path)


@dataclass
class RunConfig:
    """What evaluation reads of a run's `config.yaml` (the config its training resolved)."""

    path: Path
    name: str
    corpus_dir: Path
    eval: dict
    tracking: dict  # Tracker's W&B arguments, as training had them


def eval_run_config(run_dir: Path) -> RunConfig:
    """What evaluation needs of the run's `config.yaml`; a TrainError naming the file when it is
    missing or damaged."""
    config, path = read_run_config(run_dir), run_dir / CONFIG
    try:
        wandb = config["train"]["wandb"]
        tracking = {"wandb_mode": wandb["mode"], "project": wandb["project"],
                    "entity": wandb.get("entity"), "group": wandb.get("group"),
                    "tags": list(wandb.get("tags") or [])}
        return RunConfig(path, str(config["name"]), Path(config["corpus_dir"]),
                         dict(config["eval"]), tracking)
    except KeyError as exc:
        raise TrainError(f"{path}: damaged run config: no {exc.args[0]!r}") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise TrainError(f"{path}: damaged run config: {' '.join(str(exc).split())}") from None


def run_label(run_dir: Path) -> str:
    """How results and plots name a run: its directory's name (a plan's runs are the
    directories named after them under the plan's root)."""
    return run_dir.resolve().name


def evaluate(run_dir: Path, task_names: list[str] | None = None,
             eval_config: Any = None, corpus_dir: Path | None = None,
             quantize: Quantization | None = None) -> dict:
    """Run `task_names` (default: the run's `eval.tasks`) on the run's latest checkpoint; write
    `<run>/eval/<task>.json` (and the task's plot and other files) once the task has finished,
    so that a failed evaluation leaves the previous results as they were. With `quantize`, on
    the quantized weights, into files (and W&B keys) named with its suffix, `<task>@int8.json`,
    beside the float results; the results are keyed by the names so suffixed."""
    config = eval_run_config(run_dir)
    corpus_dir = Path(corpus_dir or config.corpus_dir)
    if eval_config is None:
        try:
            eval_config = OmegaConf.to_object(OmegaConf.merge(
                OmegaConf.structured(eval_schema()), config.eval))
        except OmegaConfBaseException as exc:
            raise TrainError(f"{config.path}: eval: {' '.join(str(exc).split())}") from None
    task_names = list(task_names or eval_config.tasks)
    for name in task_names:
        if name not in tasks():
            raise TrainError(f"--task {name}: unknown evaluation task; known: "
                             f"{', '.join(sorted(tasks()))}")
    with run_lock(run_dir, "physlm eval"):  # one writer of the run directory at a time
        return _evaluate(run_dir, config, task_names, eval_config, corpus_dir, quantize)


def _evaluate(run_dir: Path, config: RunConfig, task_names: list[str], eval_config: Any,
              corpus_dir: Path, quantize: Quantization | None) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, meta = load_model(run_dir, device, quantize)
    manifest = read_manifest(corpus_dir)
    if manifest["tokenizer"]["sha256"] != meta["tokenizer_sha256"]:
        raise TrainError(f"{corpus_dir}: its tokenizer differs from the one {run_dir} was "
                         "trained with")
    context = EvalContext(model, load_tokenizer(corpus_dir, manifest), corpus_dir, run_dir,
                          device)
    out = run_dir / EVAL
    out.mkdir(exist_ok=True)
    for stale in out.glob(f".*{STAGING}*"):  # a killed evaluation's; the lock says it is gone
        shutil.rmtree(stale, ignore_errors=True)
    head = {"step": meta["step"], "run": run_label(run_dir)}
    known, results = tasks(), {}
    tracker = None  # started with the first result: a failed evaluation leaves no W&B run
    try:
        for task_name in task_names:
            name = task_name + suffix(quantize)
            results[name] = _run_task(known[task_name], context,
                                      getattr(eval_config, task_name), head, out, quantize)
            # the training run's W&B run continues (its id file)
            tracker = tracker or Tracker(run_dir, config.name, {}, **config.tracking)
            tracker.summary(flat_results(f"eval/{name}", results[name]))
            if known[task_name].plot is not None:
                tracker.log_image(f"eval/{name}", out / f"{name}.png")
    finally:
        if tracker is not None:
            tracker.finish()
    return results


def _run_task(task: Task, context: EvalContext, options: Any, head: dict, out: Path,
              quantize: Quantization | None) -> dict:
    """Run `task`; its files (results, plot, generations) go to a staging directory in `out`
    and move into `out` only once all of them are whole: a task that fails, or a disk that
    fills, leaves the previous results as they were. On quantized weights the results record
    the scheme (`quantize`) and each file's name carries its suffix after the stem
    (`qa@int8.json`, `igsm_generations@int8.jsonl`)."""
    results = out / f"{task.name}{suffix(quantize)}.json"
    kept = "the previous results are kept"
    try:
        staged = Path(tempfile.mkdtemp(prefix=f".{task.name}{STAGING}", dir=out))
    except OSError as exc:
        raise write_error(results, exc, kept) from None
    try:
        result = {**head, **task.run(replace(context, out=staged), options)}
        try:
            # drawn before the scheme joins the results: a plot reads each of their mappings
            # as a split or set
            if task.plot is not None:
                task.plot(result, staged / f"{task.name}.png")
            if quantize is not None:
                result["quantize"] = quantize.record()
            (staged / f"{task.name}.json").write_text(json.dumps(result, indent=1) + "\n")
            for path in sorted(staged.iterdir()):
                stem, dot, extension = path.name.partition(".")
                os.replace(path, out / f"{stem}{suffix(quantize)}{dot}{extension}")
        except OSError as exc:
            raise write_error(results, exc, kept) from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return result


def flat_results(prefix: str, value) -> dict:
    """A task's nested results as one level of `prefix/key/...` keys."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in
                flat_results(f"{prefix}/{key}", item).items()}
    return {prefix: value}
