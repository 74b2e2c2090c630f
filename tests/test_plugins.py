"""A corpus family and an evaluation task plug in by registering themselves, nothing else: a toy
family and a toy task defined here go from config through gen, train and eval."""

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from corpus_gen.core import registry as families
from corpus_gen.core.config import CorpusConfig, require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import Record
from corpus_gen.core.registry import Family, Layout
from trainer.config import Experiment, load_experiment
from trainer.engine import train
from trainer.eval import registry as tasks
from trainer.eval.registry import EvalContext, Task
from trainer.eval.runner import evaluate


@dataclasses.dataclass
class CountingConfig(CorpusConfig):
    items: int = 120
    modulus: int = 7


def _text(n: int, modulus: int) -> str:
    return f"item {n} leaves {n % modulus} ."


def _records(config: CountingConfig, start: int, stop: int):
    for n in range(start, stop):
        yield Record(_text(n, config.modulus), {"n": n})


def _eval_sets(config: CountingConfig):
    return {"counting_test": lambda: ({"id": n, "text": _text(n, config.modulus)}
                                      for n in range(config.items, config.items + 9))}


@dataclasses.dataclass
class RowsOptions:
    """A toy task's options: how many rows of its eval set it reads (test_extension_points'
    task takes them too)."""

    rows: int = 5

    def validate(self) -> None:
        require(self.rows >= 1, "rows", self.rows, "must be >= 1")


def _run(context: EvalContext, options: RowsOptions) -> dict:
    """Rows read (from the options), their tokens (from the run's tokenizer) and the model's
    parameters: what shows the task got its options, the corpus and the run."""
    lines = (context.corpus_dir / "eval" / "counting_test.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines[:options.rows]]
    tokens = [len(context.tokenizer.encode(row["text"])) for row in rows]
    return {"rows": len(rows), "tokens": sum(tokens),
            "parameters": sum(p.numel() for p in context.model.parameters())}


@pytest.fixture
def counting(monkeypatch):
    """The toy family and task, registered as a plug-in module would register them."""
    monkeypatch.setattr(families, "_FAMILIES", dict(families.families()))
    monkeypatch.setattr(tasks, "_TASKS", dict(tasks.tasks()))
    families.register(Family("counting", 1, CountingConfig,
                             lambda c: Layout(records=c.items), _records, _eval_sets))
    tasks.register(Task("counting", RowsOptions, _run))


def two_step_experiment(tmp_path: Path, sections: str, overrides: Sequence[str]) -> Experiment:
    """A toy experiment: `sections` (YAML: corpus, model, eval) and a tiny model's training of two
    steps with a checkpoint after the second, loaded with dotted overrides."""
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: toy\n{sections}train:\n  ctx: 32\n  micro_batch: 4\n"
                    "  max_steps: 2\n  ckpt_every: 2\n  warmup_steps: 1\n  log_every: 1\n"
                    "  wandb: {mode: disabled}\n")
    return load_experiment(path, list(overrides))


def _experiment(tmp_path: Path, *overrides: str) -> Experiment:
    return two_step_experiment(tmp_path, "corpus:\n  family: counting\n  items: 120\n"
                               "  tokenizer: {vocab_size: 300, sample_records: 120}\n"
                               "model:\n  n_layer: 1\n  n_head: 2\n  d_model: 32\n"
                               "eval:\n  tasks: [counting]\n  counting: {rows: 4}\n", overrides)


def test_a_registered_family_and_task_run_from_config_to_metrics(counting, tmp_path):
    experiment = _experiment(tmp_path)
    assert experiment.eval.counting == RowsOptions(rows=4)
    corpus = tmp_path / "corpus"
    manifest = generate_corpus(experiment.corpus, corpus, progress=False, log=lambda *_: None)
    assert manifest["records"] == 120 and manifest["version"] == "core-1/counting-1"
    train(experiment, tmp_path / "run", corpus)
    result = evaluate(tmp_path / "run")["counting"]
    # 4 rows of "item 12x leaves y .", 28 pieces in all; the parameters of the 1-layer model:
    # the tied 300-token table, qkv and output projections, a 4x MLP and three bias-free norms
    assert (result["rows"], result["step"], result["tokens"]) == (4, 2, 28)
    assert result["parameters"] == 300 * 32 + 32 * 96 + 32 * 32 + 2 * 32 * 128 + 3 * 32
    saved = json.loads((tmp_path / "run" / "eval" / "counting.json").read_text())
    assert saved == result


def test_a_registered_task_validates_its_own_options(counting, tmp_path):
    with pytest.raises(ConfigError) as err:
        _experiment(tmp_path, "eval.counting.rows=0")
    assert (err.value.key, err.value.value, err.value.reason) == (
        "eval.counting.rows", 0, "must be >= 1")
    with pytest.raises(ConfigError, match="eval.tasks='nope': unknown evaluation task"):
        _experiment(tmp_path, "eval.tasks=[nope]")
