"""Metrics to `metrics.jsonl` in the run directory and to W&B (online, offline or disabled).

Only rank 0 tracks. W&B is imported lazily: a disabled run never pays for it. metrics.jsonl is
the record; W&B is a view of it, given up (in one line) if its service process dies: under
Slurm, a job's SIGTERM reaches that process too, while the run stops cleanly with a checkpoint.
"""

import json
import os
import sys
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from trainer.run_dir import METRICS, WANDB_ID, inside, read_metrics_file, replace_file, write_error


class Tracker:
    def __init__(self, run_dir: Path, name: str, config: dict, wandb_mode: str, project: str,
                 entity: str | None, enabled: bool = True, group: str | None = None,
                 tags: list[str] | tuple[str, ...] = ()):
        self.enabled = enabled
        self.run = None
        self.path = inside(run_dir, METRICS)
        if not enabled:
            return
        if wandb_mode != "disabled":
            os.environ.setdefault("WANDB_SILENT", "true")  # our own log lines say enough
            import wandb

            # group and tags: a sweep's runs side by side in W&B, filtered by axis value
            self.run = wandb.init(project=project, entity=entity, name=name, config=config,
                                  dir=str(run_dir), mode=wandb_mode, resume="allow",
                                  id=_run_id(run_dir, name), group=group,
                                  tags=list(tags) or None)

    def log(self, metrics: dict, step: int) -> None:
        if not self.enabled:
            return
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps({"step": step, **metrics}) + "\n")
        except OSError as exc:  # a full disk: a torn last line, dropped when the run resumes
            raise write_error(self.path, exc, "training stopped, the checkpoints saved so "
                              "far are kept") from None
        self._wandb(lambda run: run.log(metrics, step=step))

    def forget_after(self, step: int) -> None:
        """Drop logged lines past `step`: a resumed run logs those steps again."""
        if not (self.enabled and self.path.exists()):
            return
        logged, torn = read_metrics_file(self.path)
        if torn:
            print(f"train  | {self.path}: dropped its last line, cut short by an interrupted "
                  f"write: {torn[:60]}", flush=True)
        kept = "".join(json.dumps(line) + "\n" for line in logged if line["step"] <= step)
        replace_file(self.path, kept)

    def summary(self, values: dict) -> None:
        self._wandb(lambda run: run.summary.update(values))

    def log_image(self, key: str, path: Path) -> None:
        if self.run is not None:
            import wandb

            self._wandb(lambda run: run.log({key: wandb.Image(str(path))}))

    def finish(self) -> None:
        self._wandb(lambda run: run.finish())
        self.run = None

    def _wandb(self, call: Callable) -> None:
        """`call(run)` on the W&B run, if any. A dead W&B service process is said in one line
        and W&B is given up for the rest of the run: metrics.jsonl holds every step."""
        if self.run is None:
            return
        try:
            call(self.run)
        except ConnectionError as exc:
            import wandb

            self.run = None
            print(f"wandb  | W&B's service process is gone ({type(exc).__name__}: {exc}): this "
                  f"W&B run stops here; {self.path} holds every logged step", file=sys.stderr,
                  flush=True)
            with suppress(ConnectionError):  # the same dead service; this drops W&B's exit hook
                wandb.teardown()


def _run_id(run_dir: Path, name: str) -> str:
    """A W&B id kept in the run directory, so a resumed run logs into the same W&B run."""
    id_file = inside(run_dir, WANDB_ID)
    if id_file.exists():
        return id_file.read_text().strip()
    run_id = f"{name}-{uuid.uuid4().hex[:8]}"  # a run started over is a new W&B run
    replace_file(id_file, run_id)
    return run_id
