"""Evaluation tasks plug in here by name; each is one module of trainer/eval.

A task is its options (a dataclass with `validate()`, the experiment's `eval.<task>` group), a
function `(context, options) -> results dict`, and optionally a plot (and one across a sweep's
runs, which `physlm report` draws on a plan's root); the runner writes the
results to `<run>/eval/<task>.json`, logs them, and draws the plot. The experiment's `eval`
schema is assembled from the registered tasks (`eval_schema`), so a new task module is all it
takes. Modules of this package that call `register` are found automatically.

Reading an experiment file imports every task module for its options, and must not import
torch (tests/test_import_cost.py): neither this module nor a task module imports it at import
time; a task imports its torch helpers (generation, activations) in the functions that use them.
"""

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corpus_gen.core.config import require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.registry import import_submodules
from trainer.run_dir import EVAL

if TYPE_CHECKING:
    import torch

    from corpus_gen.core.tokenizer import CorpusTokenizer
    from trainer.model import GPT

DEFAULT_TASKS = ("qa",)
# this package's modules that import torch; none registers a task, and `tasks()` skips them
TORCH_MODULES = ("activations", "generation", "mechanisms", "runner")


@dataclass
class EvalContext:
    model: "GPT"
    tokenizer: "CorpusTokenizer"  # SentencePiece or a fixed vocabulary
    corpus_dir: Path
    run_dir: Path
    device: "torch.device"
    # where a task writes files beside its results (generations); the runner moves them into
    # <run>/eval/ with the results once the task has finished
    out: Path | None = None

    def __post_init__(self) -> None:
        self.out = self.out or self.run_dir / EVAL


@dataclass(frozen=True)
class Task:
    name: str
    options: type  # a dataclass with validate(): the experiment's eval.<name> group
    run: Callable[[EvalContext, Any], dict]
    plot: Callable[[dict, Path], None] | None = None
    # a figure across the runs of a sweep (`physlm report ROOT`): {series label: each run's
    # results, flat as the report reads them (`bits`, `parameters`, ...)} -> the PNG at path
    plot_runs: Callable[[dict[str, list[dict]], Path], None] | None = None


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    _TASKS[task.name] = task
    return task


def tasks() -> dict[str, Task]:
    import_submodules("trainer.eval", skip=TORCH_MODULES)  # cheap once cached; finds every task
    return _TASKS


def eval_schema() -> type:
    """The experiment's `eval` group: `tasks` (the ones `physlm eval` runs by default) and each
    registered task's options under its name."""
    known = tasks()
    return _eval_schema(tuple((name, known[name].options) for name in sorted(known)))


@functools.cache  # one class per set of tasks: configs of the same tasks share a schema
def _eval_schema(options: tuple[tuple[str, type], ...]) -> type:
    fields = [("tasks", list[str], field(default_factory=lambda: list(DEFAULT_TASKS)))]
    fields += [(name, schema, field(default_factory=schema)) for name, schema in options]
    return dataclasses.make_dataclass("EvalConfig", fields,
                                      namespace={"validate": _validate_eval})


def _validate_eval(config: Any) -> None:
    known = tasks()
    for name in config.tasks:
        require(name in known, "tasks", name,
                f"unknown evaluation task; known: {', '.join(sorted(known))}")
    for name in known:
        try:
            getattr(config, name).validate()
        except ConfigError as exc:  # the task names its own keys; the group is its name
            raise ConfigError(f"{name}.{exc.key}", exc.value, exc.reason) from None
