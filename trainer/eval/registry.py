"""Evaluation tasks plug in here by name; each is one module of trainer/eval.

A task is a function `(context, eval_config) -> results dict`; the runner writes the results to
`<run>/eval/<task>.json`, logs them, and draws the task's plot if it has one. Modules of this
package that call `register` are found automatically.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from corpus_gen.core.registry import import_submodules
from corpus_gen.core.tokenizer import Tokenizer
from trainer.model import GPT


@dataclass
class EvalContext:
    model: GPT
    tokenizer: Tokenizer
    corpus_dir: Path
    run_dir: Path
    device: torch.device


@dataclass(frozen=True)
class Task:
    name: str
    run: Callable[[EvalContext, object], dict]
    plot: Callable[[dict, Path], None] | None = None


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    _TASKS[task.name] = task
    return task


def tasks() -> dict[str, Task]:
    import_submodules("trainer.eval")  # cheap once cached; finds every task module
    return _TASKS
