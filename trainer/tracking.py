"""Metrics to `metrics.jsonl` in the run directory and to W&B (online, offline or disabled).

Only rank 0 tracks. W&B is imported lazily: a disabled run never pays for it.
"""

import json
import os
import uuid
from pathlib import Path


class Tracker:
    def __init__(self, run_dir: Path, name: str, config: dict, wandb_mode: str, project: str,
                 entity: str | None, enabled: bool = True, group: str | None = None,
                 tags: list[str] | tuple[str, ...] = ()):
        self.enabled = enabled
        self.run = None
        self.path = run_dir / "metrics.jsonl"
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
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.run is not None:
            self.run.log(metrics, step=step)

    def forget_after(self, step: int) -> None:
        """Drop logged lines past `step`: a resumed run logs those steps again."""
        if self.enabled and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)["step"] <= step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def summary(self, values: dict) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def log_image(self, key: str, path: Path) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(str(path))})

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _run_id(run_dir: Path, name: str) -> str:
    """A W&B id kept in the run directory, so a resumed run logs into the same W&B run."""
    id_file = run_dir / "wandb_id.txt"
    if id_file.exists():
        return id_file.read_text().strip()
    run_id = f"{name}-{uuid.uuid4().hex[:8]}"  # a run started over is a new W&B run
    id_file.write_text(run_id)
    return run_id


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
