"""The training loop: DeepSpeed engine over packed corpus windows, with exact resume.

The loop's pieces live in their own modules (data, checkpoint, schedule, tracking); this file
wires them: build the model and DeepSpeed engine into a TrainState, resume it if asked, step,
log, checkpoint, and stop with the last good checkpoint intact if the loss stops being finite,
or with a fresh one when asked to (preemption: trainer.preempt).
"""

import json
import math
import random
import resource
import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import OmegaConf
from tqdm import tqdm

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.manifest import MANIFEST, read_manifest
from trainer import checkpoint
from trainer.checkpoint import TrainState
from trainer.config import Experiment, TrainConfig
from trainer.data import IGNORE_INDEX, DataOptions, PackedBatches
from trainer.determinism import deterministic_kernels
from trainer.distributed import Dist, setup
from trainer.errors import Preempted, TrainError
from trainer.exposures import documents_per_person, exposures_reached, steps_for
from trainer.finetune import load_parent
from trainer.host_memory import keep_freed_host_memory
from trainer.lora import add_adapters
from trainer.model import GPT, ModelConfig
from trainer.optim import check_same_optimizer, freeze, make_optimizer, optimizer_settings
from trainer.preempt import StopRequest
from trainer.run_dir import (
    CHECKPOINTS,
    CONFIG,
    LATEST,
    METRICS,
    RUN_FILES,
    STEP,
    inside,
    replace_file,
    run_lock,
)
from trainer.schedule import lr_factor
from trainer.tasks_along import TasksAlong
from trainer.tracking import Tracker

# the train keys the lr schedule is made of: a resume refuses a change in any (resume=auto);
# with exposures, max_steps is the number of steps they give
SCHEDULE_KEYS = ("exposures", "max_steps", "warmup_steps", "lr", "min_lr_ratio")

# Dense bf16 peak FLOP/s per device, for MFU. CPU has no entry: MFU is reported as null there.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12,
              "L4": 121e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


def model_for_corpus(model: ModelConfig, train: TrainConfig, manifest: dict) -> ModelConfig:
    return replace(model, vocab_size=manifest["tokenizer"]["vocab_size"], ctx=train.ctx)


def data_options(train: TrainConfig) -> DataOptions:
    return DataOptions(ctx=train.ctx, micro_batch=train.micro_batch, seed=train.seed,
                       split_documents=train.split_documents,
                       shuffle_shards=train.shuffle_shards, doc_mask=train.doc_mask,
                       restart_positions=train.restart_positions)


def ds_config(train: TrainConfig) -> dict:
    return {
        "train_micro_batch_size_per_gpu": train.micro_batch,
        "gradient_accumulation_steps": train.grad_accum,
        "gradient_clipping": train.grad_clip,
        "zero_optimization": {"stage": train.zero_stage},
        "bf16": {"enabled": train.precision == "bf16"},
        "fp16": {"enabled": train.precision == "fp16", "initial_scale_power": 12},
        "steps_per_print": 1 << 30,  # we log ourselves
        "wall_clock_breakdown": False,
    }


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the counted tokens (labels != IGNORE_INDEX)."""
    if not (labels != IGNORE_INDEX).any():
        return logits.sum() * 0.0  # nothing counts in this micro-batch: no gradient, no NaN
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1),
                           ignore_index=IGNORE_INDEX)


def _forward(engine, batch: dict, train: TrainConfig, device: torch.device) -> torch.Tensor:
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    logits = engine(batch["input_ids"], position_ids=batch["position_ids"],
                    doc_ids=batch["doc_ids"] if train.doc_mask else None)
    return lm_loss(logits, batch["labels"])


def _mean_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """Each value's mean over the ranks, in one all-reduce."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


@dataclass
class Trainer:
    """What the loop works with: the TrainState that checkpoints save and restore, and the run
    around it, which they do not (the tracker's state is the run directory's metrics.jsonl)."""

    cfg: TrainConfig
    world: Dist
    state: TrainState
    tracker: Tracker
    checkpoints: Path
    fixed: PackedBatches | None  # the monitoring windows, when train.eval_every > 0
    on_step: Callable[[int, dict], None] | None
    stop: StopRequest
    along: TasksAlong | None = None  # eval tasks along training (train.tasks_every), rank 0
    per_person: int | None = None  # train.exposures: each person's documents, R


def train(experiment: Experiment, run_dir: Path, corpus_dir: Path,
          on_step: Callable[[int, dict], None] | None = None) -> dict:
    """Train `experiment` on the corpus in `corpus_dir`; artefacts go to `run_dir`.

    `on_step(step, metrics)` runs after every optimizer step (tests use it to inject faults).
    Returns the final metrics. Raises Preempted, with a checkpoint saved, when SIGUSR1, SIGTERM
    or `<run_dir>/.stop` asks the run to stop before train.max_steps.
    """
    # the handlers go in first: a signal during DeepSpeed's set-up stops at the first step;
    # `held`: what the run holds to its end (the run directory's lock once it has claimed the
    # directory, deterministic mode), released also when it fails
    with StopRequest(run_dir) as stop, ExitStack() as held:
        return _train(experiment, run_dir, corpus_dir, on_step, stop, held)


def _train(experiment: Experiment, run_dir: Path, corpus_dir: Path,
           on_step: Callable[[int, dict], None] | None, stop: StopRequest,
           held: ExitStack) -> dict:
    cfg = experiment.train
    world = setup()
    if world.device.type == "cpu":  # each step reuses the last one's freed buffers (glibc)
        keep_freed_host_memory()
    # compiled on CPU only: there inductor's embedding backward is what varies between runs
    held.enter_context(deterministic_kernels(cfg.compile and world.device.type == "cpu"))
    manifest = _corpus_manifest(corpus_dir, experiment)
    per_person = documents_per_person(manifest, corpus_dir) if cfg.exposures else None
    model_config = model_for_corpus(experiment.model, cfg, manifest)
    try:
        model_config.validate()
        data = PackedBatches(corpus_dir, data_options(cfg), world.rank, world.world_size)
        if per_person:
            cfg = _steps_from_exposures(cfg, data, per_person, corpus_dir, world)
    except (ValueError, CorpusError) as exc:
        raise TrainError(str(exc)) from None
    _claim_run_dir(run_dir, cfg.resume, world, held)
    if world.rank == 0:
        stop.watch_file()
    _seed_everything(cfg.seed)  # identical initial weights on every rank
    model = GPT(model_config)
    parent = (load_parent(model, cfg.init_from, asdict(model_config),
                          manifest["tokenizer"]["sha256"]) if cfg.init_from else None)
    if cfg.lora.rank:
        model = add_adapters(model, cfg.lora)
    if cfg.compile:
        model.compile()  # in place: the parameters and state_dict keys stay the model's own
    import deepspeed

    freeze(model, cfg.freeze)  # before the optimizer, which leaves frozen parameters out
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=scheduler, config=ds_config(cfg))

    checkpoints = run_dir / CHECKPOINTS
    meta = {"model_config": asdict(model_config),
            "tokenizer_sha256": manifest["tokenizer"]["sha256"],
            "corpus_fingerprint": manifest["fingerprint"], "world_size": world.world_size,
            "run_id": uuid.uuid4().hex,  # what keep_last prunes: this run's checkpoints only
            "schedule": {key: getattr(cfg, key) for key in SCHEDULE_KEYS},
            "optimizer": optimizer_settings(cfg)}
    if parent:
        meta["parent"] = parent
    if cfg.lora.rank:
        meta["lora"] = asdict(cfg.lora)
    state = TrainState(engine=engine, data=data, meta=meta)
    _resume(state, checkpoints, cfg)
    if state.step and world.rank == 0:
        print(f"train  | resumed from {checkpoints / checkpoint.tag(state.step)} (step "
              f"{state.step} of {cfg.max_steps})", flush=True)
    elif parent and world.rank == 0:
        print(f"train  | finetuning from {parent['run']}/checkpoints/{parent['checkpoint']}",
              flush=True)
    if world.rank == 0:
        checkpoints.mkdir(parents=True, exist_ok=True)
        _write_config(run_dir, experiment, corpus_dir, manifest, model_config)
    # made after the resume: a refused checkpoint starts no W&B run
    tracker = Tracker(run_dir, experiment.name, _flat_config(experiment, corpus_dir, manifest),
                      cfg.wandb.mode, cfg.wandb.project, cfg.wandb.entity,
                      enabled=world.rank == 0, group=cfg.wandb.group, tags=cfg.wandb.tags)
    tracker.forget_after(state.step)  # the steps after the checkpoint are logged again
    # the monitoring windows: the first `eval_batches` of the corpus in manifest order
    fixed = (PackedBatches(corpus_dir, replace(data.options, shuffle_shards=False), world.rank,
                           world.world_size) if cfg.eval_every else None)
    along = (TasksAlong(state.engine.module, experiment.eval, corpus_dir, run_dir, world.device)
             if cfg.tasks_every and world.rank == 0 else None)
    metrics, stopped = _loop(Trainer(cfg, world, state, tracker, checkpoints, fixed, on_step,
                                     stop, along, per_person))
    tracker.finish()
    if stopped:
        stop.done(state.step, stopped)
        raise Preempted(state.step, stopped, stop.file)
    return metrics


def _steps_from_exposures(cfg: TrainConfig, data: PackedBatches, per_person: int,
                          corpus_dir: Path, world: Dist) -> TrainConfig:
    """`cfg` with the max_steps its train.exposures give on this corpus and number of ranks
    (trainer/exposures.py), which the run then trains, schedules and checkpoints by."""
    steps = steps_for(cfg.exposures, per_person, data, cfg.grad_accum)
    if cfg.warmup_steps > steps:
        raise TrainError(f"train.warmup_steps={cfg.warmup_steps}: must not exceed the {steps} "
                         f"steps train.exposures={cfg.exposures} gives on {corpus_dir}: the run "
                         "would end still warming up")
    if world.rank == 0:
        print(f"train  | train.exposures={cfg.exposures}: {steps} steps, to read the corpus's "
              f"{data.tokens_per_epoch:,} tokens {cfg.exposures / per_person:g} times over "
              f"({per_person} documents per person); train.max_steps is not used", flush=True)
    return replace(cfg, max_steps=steps)


def _corpus_manifest(corpus_dir: Path, experiment: Experiment) -> dict:
    """The corpus's manifest; refused for a corpus of another family than the experiment's
    corpus group names (`--corpus` of an iGSM corpus to a QA experiment would fail only at
    evaluation, after the whole training)."""
    try:
        manifest = read_manifest(corpus_dir)
    except CorpusError as exc:
        raise TrainError(str(exc)) from None
    wanted = experiment.corpus.family if experiment.corpus else None
    if wanted is not None and manifest.get("family") != wanted:
        raise TrainError(f"{corpus_dir / MANIFEST}: a corpus of family "
                         f"{manifest.get('family')}, but experiment {experiment.name} "
                         f"({experiment.source}) trains on family {wanted}; give --corpus a "
                         f"corpus of family {wanted}, or leave it out")
    return manifest


def _claim_run_dir(run_dir: Path, resume: str, world: Dist, lock: ExitStack) -> None:
    """Take the run directory's lock into `lock` (rank 0 holds it; every rank stops alike if
    another process holds it, or a file of the directory links out of it). Then `resume=none`
    starts a new run only in a directory holding none (two runs mixed in one directory would
    prune each other's checkpoints and share a metrics file); `overwrite` deletes the previous
    run first (its files: run_dir.RUN_FILES); `auto` continues it."""
    refused = [None]
    if world.rank == 0:
        try:
            lock.enter_context(run_lock(run_dir, "physlm train"))
        except TrainError as exc:
            refused = [str(exc)]
    dist.broadcast_object_list(refused, src=0)
    if refused[0]:
        raise TrainError(refused[0])
    checkpoints = run_dir / CHECKPOINTS
    previous = [p for p in (checkpoints / LATEST, *checkpoints.glob(f"{STEP}*"),
                            run_dir / METRICS) if p.exists()]
    if resume == "none" and previous:
        raise TrainError(f"{run_dir}: already holds a run ({previous[0].relative_to(run_dir)}); "
                         "resume=auto continues it, resume=overwrite deletes it and starts over, "
                         "or choose another --run-dir")
    if resume == "overwrite" and previous:
        if world.rank == 0:
            print(f"train  | resume=overwrite: deleting the previous run in {run_dir}", flush=True)
            for name in RUN_FILES:  # a link among them leads inside (the lock refuses others)
                path = run_dir / name
                is_tree = path.is_dir() and not path.is_symlink()
                shutil.rmtree(path) if is_tree else path.unlink(missing_ok=True)
        dist.barrier()


def _resume(state: TrainState, checkpoints: Path, cfg: TrainConfig) -> None:
    """Continue from the newest intact checkpoint (resume=auto or reschedule), under the lr
    schedule it was trained with unless resume=reschedule."""
    if cfg.resume not in ("auto", "reschedule"):
        return
    path, skipped = checkpoint.resumable(checkpoints)
    if dist.get_rank() == 0:
        for reason in skipped:
            print(f"train  | skipped a damaged checkpoint: {reason}", flush=True)
    if path is None:
        return
    checkpoint.check_compatible(path, state.meta["model_config"],
                                state.meta["tokenizer_sha256"])
    saved = checkpoint.read_meta(path)
    check_same_optimizer(saved, cfg, path)
    if saved.get("lora") != state.meta.get("lora"):
        raise TrainError(f"{path}: checkpoint has train.lora={saved.get('lora')} but the config "
                         f"says {state.meta.get('lora')}; use another run directory or "
                         "resume=overwrite")
    # checkpoints from before the schedule was recorded cannot be checked
    schedule = saved.get("schedule") or state.meta["schedule"]
    changed = next((key for key in SCHEDULE_KEYS
                    if schedule.get(key) != state.meta["schedule"][key]), None)
    if changed and cfg.resume == "auto":
        raise TrainError(
            f"{path}: trained with train.{changed}={schedule.get(changed)!r}, but the config "
            f"says {getattr(cfg, changed)!r}, which changes the lr schedule mid-run; "
            "train.resume=reschedule continues under the new schedule, or use another "
            f"--run-dir (train.init_from={checkpoints.parent} starts from its weights)")
    checkpoint.load(state, path)
    if changed:
        _reschedule(state.engine, cfg, state.step)


def _reschedule(engine, cfg: TrainConfig, step: int) -> None:
    """Put the lr schedule of `cfg` in place of the one restored from a checkpoint: its peak lr
    (the scheduler's base_lrs) and this step's lr (the optimizer's, which the next step uses);
    the schedule's function already is this config's."""
    scheduler = engine.lr_scheduler
    scheduler.base_lrs = [cfg.lr for _ in scheduler.base_lrs]
    for group in scheduler.optimizer.param_groups:
        group["lr"] = cfg.lr * lr_factor(step, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)


def _loop(trainer: Trainer) -> tuple[dict, Path | None]:
    """Train to train.max_steps; returns the last metrics logged, and the checkpoint saved on
    stopping early when asked to (None when the run reached max_steps)."""
    cfg, world, state = trainer.cfg, trainer.world, trainer.state
    checkpoints = trainer.checkpoints
    engine, model, start = state.engine, state.engine.module, state.step  # module: the GPT
    batches = iter(state.data)
    tokens_per_step = cfg.micro_batch * cfg.ctx * cfg.grad_accum * world.world_size
    flops_per_token = model.flops_per_token()
    peak = peak_flops(world.device)
    metrics: dict = {}
    last_saved = start if start else None
    stopped = None
    # DeepSpeed reports no gradient norm for a plain fp32 ZeRO-0 step: measure it ourselves
    own_norm = engine.zero_optimization_stage() == 0 and cfg.precision == "fp32"
    bar = tqdm(total=cfg.max_steps, initial=start, unit="step", dynamic_ncols=True,
               disable=None if world.rank == 0 else True)  # a terminal's rank 0 only
    timer, timed_from = time.perf_counter(), start
    first_done = None  # when the first step ended: the ETA leaves that step out
    for step in range(start, cfg.max_steps):
        engine.train()
        loss_sum, grad_norm = 0.0, None
        for _ in range(cfg.grad_accum):
            loss = _forward(engine, next(batches), cfg, world.device)
            engine.backward(loss)
            if own_norm and engine.is_gradient_accumulation_boundary():
                grad_norm = _grad_norm(model)  # before the step clips and zeroes them
            engine.step()
            loss_sum += loss.item()
        # the stop request rides on the loss's all-reduce: every rank stops at the same step,
        # whichever ranks were asked, without a second collective per step
        loss_value, asked = _mean_over_ranks(
            [loss_sum / cfg.grad_accum, float(trainer.stop.requested())], world.device)
        done = state.step = step + 1
        if first_done is None:
            first_done = time.perf_counter()
        bar.update()
        if not math.isfinite(loss_value):
            where = (f"last good checkpoint: {checkpoints / checkpoint.tag(last_saved)}"
                     if last_saved else "no checkpoint was saved")
            raise TrainError(f"loss became {loss_value} at step {done}; stopped ({where})")
        along, along_seconds = {}, 0.0
        if trainer.along is not None and done % cfg.tasks_every == 0:
            along_seconds = -time.perf_counter()
            along = trainer.along()
            along_seconds += time.perf_counter()
        if done % cfg.log_every == 0 or done == cfg.max_steps or done == start + 1 or along:
            elapsed = time.perf_counter() - timer - along_seconds  # the tasks are no training
            tokens_per_s = tokens_per_step * (done - timed_from) / max(elapsed, 1e-9)
            if grad_norm is None:
                grad_norm = engine.get_global_grad_norm()
            metrics = {
                "loss": loss_value,
                "lr": engine.get_lr()[0],
                "grad_norm": float(grad_norm) if grad_norm is not None else None,
                "tokens_per_s": tokens_per_s,
                "mfu": (flops_per_token * tokens_per_s / (peak * world.world_size)
                        if peak else None),
                "memory_gb": _memory_gb(world.device),
                "tokens": done * tokens_per_step,
            }
            if trainer.per_person:
                metrics["exposures"] = exposures_reached(trainer.per_person, state.data)
            if cfg.eval_every and done % cfg.eval_every == 0:
                metrics["eval_loss"] = _eval_loss(engine, trainer.fixed, cfg, world)
            trainer.tracker.log({**metrics, **along}, done)
            bar.set_postfix(loss=f"{loss_value:.4f}", tok_s=f"{tokens_per_s:,.0f}")
            if world.rank == 0:
                eta = _eta(time.perf_counter() - first_done, done - start - 1,
                           cfg.max_steps - done)
                tqdm.write(f"step {done:>6}/{cfg.max_steps} | loss {loss_value:.4f} | "
                           f"lr {metrics['lr']:.2e} | {tokens_per_s:,.0f} tok/s | eta {eta}")
            timer, timed_from = time.perf_counter(), done
        if done % cfg.ckpt_every == 0 or done == cfg.max_steps:
            checkpoint.save(state, checkpoints, cfg.keep_last)
            last_saved = done
            timer, timed_from = time.perf_counter(), done  # saving is not training time
        if trainer.on_step is not None:
            trainer.on_step(done, {"loss": loss_value})
        if asked and done < cfg.max_steps:
            stopped = (checkpoints / checkpoint.tag(done) if last_saved == done
                       else checkpoint.save(state, checkpoints, cfg.keep_last))
            break
    bar.close()
    return metrics, stopped


def _grad_norm(model: GPT) -> float:
    """The global L2 norm of the gradients as the optimizer sees them (averaged over ranks)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def _eta(seconds: float, steps: int, remaining: int) -> str:
    """The time left for `remaining` steps at the pace of the `steps` that took `seconds` after
    the run's first step, which carries warm-up and compilation and would inflate it; "-" while
    there is no such step yet."""
    if not remaining:
        return _duration(0.0)
    return _duration(seconds / steps * remaining) if steps else "-"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


def _eval_loss(engine, fixed: PackedBatches, cfg: TrainConfig, world: Dist) -> float:
    """Loss on the first `eval_batches` windows of the corpus in manifest order: a fixed
    monitoring set (bios corpora are memorised, so there is no held-out text to use)."""
    fixed.load_state_dict({**fixed.state_dict(), "epoch": 0, "batch": 0})
    engine.eval()
    total = 0.0
    with torch.no_grad():
        for _, batch in zip(range(cfg.eval_batches), fixed):
            total += _forward(engine, batch, cfg, world.device).item()
    engine.train()
    return _mean_over_ranks([total / cfg.eval_batches], world.device)[0]


def _write_config(run_dir: Path, experiment: Experiment, corpus_dir: Path, manifest: dict,
                  model_config: ModelConfig) -> None:
    resolved = OmegaConf.create(_flat_config(experiment, corpus_dir, manifest))
    resolved.model = asdict(model_config)
    replace_file(inside(run_dir, CONFIG), OmegaConf.to_yaml(resolved))


def _flat_config(experiment: Experiment, corpus_dir: Path, manifest: dict) -> dict:
    """The run's whole config; `corpus` is the config of the corpus trained on, from its
    manifest (with `--corpus DIR` it need not be the experiment's corpus group)."""
    return json.loads(json.dumps({
        "name": experiment.name,
        "corpus_dir": str(corpus_dir),
        "corpus": manifest.get("config"),
        "model": asdict(experiment.model),
        "train": asdict(experiment.train),
        "eval": asdict(experiment.eval),
    }))
