"""DeepSpeed ZeRO stages in bf16 through physlm's trainer, each killed and resumed; and the
compiled model (train.compile: true) under ZeRO against the eager one.

Per stage, three runs of one tiny experiment on the tiny bios corpus, each a real
trainer.engine.train in a worker process (zero_worker.py): one killed with SIGKILL by this
process after a checkpoint (it waits at step KILL_AFTER, past the checkpoint at CKPT_EVERY),
then resumed (train.resume: auto) to max_steps, and one uninterrupted. The resumed run's
per-step losses (metrics.jsonl) and final weights are compared with the uninterrupted run's.
For the compiled stages, one more uninterrupted run with train.compile: true, whose losses are
compared with the eager uninterrupted run's of the same stage (bf16 kernels fused differently:
close, not equal). A run the trainer refuses (its config check) records the refusal line.
The killed workers, the uninterrupted ones and the compiled ones run at the same time
(separate run directories; each run's numbers do not depend on what else runs); then the
resumes. Each stage's row fails alone. On CPU (--cpu-smoke) DeepSpeed runs on its CPU
accelerator with gloo, stages 0 and 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import torch
from context import Context, guarded
from corpus import tiny_corpus
from zero_worker import KILL_LINE, refused_file

from trainer.run_dir import read_metrics

HERE = Path(__file__).resolve().parent
# bf16 losses of a compiled and an eager run of the same stage: within this share of the loss
COMPILED_REL_TOLERANCE = 0.02
GPU = dict(stages=(0, 1, 2, 3), compiled_stages=(0, 3), n_layer=4, n_head=4, d_model=256,
           ctx=256, micro_batch=8, max_steps=30, ckpt_every=10, kill_after=15)
SMOKE = dict(stages=(0, 1), compiled_stages=(), n_layer=2, n_head=2, d_model=32, ctx=64,
             micro_batch=4, max_steps=8, ckpt_every=4, kill_after=6)
# why the smoke has no compiled rows: the trainer compiles with inductor, whose C++ build of a
# model's graphs takes about a minute per graph on 2 cores with a cold cache
# (tests/test_compile.py proves compiled training and exact resume on CPU)
NOT_ON_CPU = ("not run on CPU: the trainer's inductor compile takes about a minute per graph on "
              "2 cores with a cold cache, more than the whole smoke's budget; "
              "tests/test_compile.py covers compiled training and resume on CPU")


def experiment_file(work: Path, s: dict) -> Path:
    path = work / "zero_experiment.yaml"
    path.write_text(
        f"name: zero\nmodel:\n  n_layer: {s['n_layer']}\n  n_head: {s['n_head']}\n"
        f"  d_model: {s['d_model']}\ntrain:\n  ctx: {s['ctx']}\n"
        f"  micro_batch: {s['micro_batch']}\n  lr: 0.003\n  warmup_steps: 2\n"
        f"  max_steps: {s['max_steps']}\n  ckpt_every: {s['ckpt_every']}\n  log_every: 1\n"
        "  precision: bf16\n  resume: auto\n  wandb:\n    mode: disabled\n")
    return path


RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def worker(corpus: Path, experiment: Path, jobs: list[tuple[Path, int, int, bool]], log: Path
           ) -> subprocess.Popen:
    """A worker process on `jobs` (run dir, stage, kill after step, compiled); stdout is piped
    (read for KILL_LINE) only when it has a job to be killed: nobody reads the others' pipes,
    which could fill and block them."""
    command = [sys.executable, str(HERE / "zero_worker.py"), "--corpus", str(corpus),
               "--experiment", str(experiment)]
    for run_dir, stage, kill_after, compiled in jobs:
        command += ["--job", str(run_dir), str(stage), str(kill_after), str(compiled).lower()]
    to_kill = any(kill_after > 0 for _, _, kill_after, _ in jobs)
    # workers run side by side: one CPU thread each keeps them from fighting over the cores
    # (the model's work is on the GPU there; on CPU the toy model needs no more)
    # each worker is a world of its own: a rendezvous inherited from the caller (a process that
    # ran physlm's setup() exports MASTER_PORT, and may still hold that port) is not its own
    env = {key: value for key, value in os.environ.items() if key not in RENDEZVOUS}
    env["OMP_NUM_THREADS"] = "1"
    with log.open("a") as output:
        return subprocess.Popen(command, stdout=subprocess.PIPE if to_kill else output,
                                stderr=output, text=True, env=env)


def kill_after_checkpoint(process: subprocess.Popen, run_dir: Path, log: Path, limit: float
                          ) -> dict:
    """SIGKILL the worker once it says it is past its checkpoint; its exit code (-9) and the
    checkpoint its run will resume from. A worker silent for `limit` seconds is killed and the
    row fails."""
    watchdog = threading.Timer(limit, process.kill)
    watchdog.start()
    said = False
    for line in process.stdout:
        if line.strip() == KILL_LINE:
            said = True
            process.kill()  # SIGKILL: no handler, no cleanup, like a lost node
            break
    watchdog.cancel()
    code = process.wait(timeout=60)
    if not said:
        raise RuntimeError(f"the worker to kill exited {code} before its checkpoint (or within "
                           f"{limit:.0f} s); its stderr: {log.read_text()[-2000:]}")
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return {"exit code": code, "resumed from": latest}


def finished(process: subprocess.Popen, log: Path, limit: float) -> dict:
    """Nothing when the worker exits 0 within `limit` seconds; else it is killed and this
    raises."""
    try:
        code = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        raise RuntimeError(f"worker still running after {limit:.0f} s (the proof's deadline): "
                           "killed") from None
    if code != 0:
        raise RuntimeError(f"worker exited {code}: {log.read_text()[-3000:]}")
    return {}


def final_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    saved = torch.load(run_dir / "checkpoints" / f"step-{step:06d}" / "weights.pt",
                       map_location="cpu", weights_only=True)
    return saved["state_dict"]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of every logged step; the trainer's refusal line, when it refused."""
    if refused_file(run_dir).exists():
        raise RuntimeError(f"the trainer refused {run_dir.name}: "
                           f"{refused_file(run_dir).read_text()}")
    logged = [(m["step"], m["loss"]) for m in read_metrics(run_dir)]
    if not logged:
        raise RuntimeError(f"{run_dir.name}: no step logged")
    return logged


def same_steps(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    if [s for s, _ in a] != [s for s, _ in b]:
        raise RuntimeError(f"logged steps differ: {[s for s, _ in a]} vs {[s for s, _ in b]}")


def compare_resumed(straight: Path, resumed: Path, step: int) -> dict:
    a, b = losses(straight), losses(resumed)
    same_steps(a, b)
    wa, wb = final_weights(straight, step), final_weights(resumed, step)
    return {"steps": len(a), "losses identical": a == b,
            "loss max abs diff": max(abs(x - y) for (_, x), (_, y) in zip(a, b)),
            "weights identical": all(torch.equal(wa[k], wb[k]) for k in wa),
            "weights max abs diff": max((wa[k].float() - wb[k].float()).abs().max().item()
                                        for k in wa),
            "first loss": a[0][1], "last loss": a[-1][1]}


def compare_compiled(eager: Path, compiled: Path) -> dict:
    """The compiled run's losses against the eager run's; a refusal is the row's result."""
    if refused_file(compiled).exists():
        return {"refused": refused_file(compiled).read_text().strip()}
    a, b = losses(eager), losses(compiled)
    same_steps(a, b)
    rel = max(abs(x - y) / abs(x) for (_, x), (_, y) in zip(a, b))
    return {"steps": len(b), "loss max abs diff vs eager":
            max(abs(x - y) for (_, x), (_, y) in zip(a, b)),
            "loss max rel diff vs eager": rel,
            f"within {COMPILED_REL_TOLERANCE:.0%} of eager": rel <= COMPILED_REL_TOLERANCE,
            "first loss": b[0][1], "last loss": b[-1][1]}


def run(ctx: Context) -> dict:
    s = SMOKE if ctx.smoke else GPU
    corpus = tiny_corpus(ctx.work)
    experiment = experiment_file(ctx.work, s)
    root, log = ctx.work / "zero", ctx.work / "zero_workers.log"
    root.mkdir()
    result = {"precision": "bf16 (DeepSpeed bf16: model in bf16, fp32 master weights)",
              "model": f"{s['n_layer']} layers x {s['d_model']} wide, ctx {s['ctx']}, "
                       f"micro_batch {s['micro_batch']}",
              "schedule": f"{s['max_steps']} steps, checkpoint every {s['ckpt_every']}, "
                          f"SIGKILL after step {s['kill_after']}",
              "accelerator": ("cuda, nccl" if ctx.device.type == "cuda"
                              else "DeepSpeed cpu, gloo"),
              "compiled": (f"train.compile: true at stages {list(s['compiled_stages'])}, "
                           "uninterrupted, losses against the eager run's"
                           if s["compiled_stages"] else NOT_ON_CPU),
              "rows": []}
    # the killed runs, the uninterrupted ones and the compiled ones (one process each: one
    # DeepSpeed start-up) side by side; then the resumes, in one process
    killed = {stage: worker(corpus, experiment, [(root / f"resumed-{stage}", stage,
                                                  s["kill_after"], False)], log)
              for stage in s["stages"]}
    straight = worker(corpus, experiment,
                      [(root / f"straight-{stage}", stage, 0, False) for stage in s["stages"]],
                      log)
    compiled = (worker(corpus, experiment, [(root / f"compiled-{stage}", stage, 0, True)
                                            for stage in s["compiled_stages"]], log)
                if s["compiled_stages"] else None)
    rows = {stage: {"zero stage": stage, "compile": False, "killed at step": s["kill_after"]}
            for stage in s["stages"]}
    for stage, process in killed.items():
        guarded(rows[stage], kill_after_checkpoint, process, root / f"resumed-{stage}", log,
                max(ctx.left(), 30.0))
    result["rows"] = list(rows.values())
    ctx.publish(result)
    # a worker's failure goes into the section's fields; the rows it leaves unfinished fail
    # their comparison
    for name, process in (("uninterrupted worker", straight), ("compiled worker", compiled)):
        if process is not None:
            failure = guarded({}, finished, process, log, min(420.0, max(ctx.left(), 30.0)))
            if failure:
                result[name] = failure["error"]
    to_resume = [stage for stage in s["stages"] if "error" not in rows[stage]]
    if to_resume:
        resume = worker(corpus, experiment,
                        [(root / f"resumed-{stage}", stage, 0, False) for stage in to_resume],
                        log)
        failure = guarded({}, finished, resume, log, min(420.0, max(ctx.left(), 30.0)))
        if failure:
            result["resume worker"] = failure["error"]
    for stage in to_resume:
        guarded(rows[stage], compare_resumed, root / f"straight-{stage}",
                root / f"resumed-{stage}", s["max_steps"])
    for stage in s["compiled_stages"]:
        result["rows"].append(guarded({"zero stage": stage, "compile": True},
                                      compare_compiled, root / f"straight-{stage}",
                                      root / f"compiled-{stage}"))
    return result
