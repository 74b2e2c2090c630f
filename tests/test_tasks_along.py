"""`train.tasks_every`: the experiment's eval tasks run on the live model along training, their
numbers logged beside the loss at those steps, and the run takes the same steps as without."""

import json

import pytest

from corpus_gen.core.generate import generate_corpus
from tests.conftest import tiny_experiment_file
from tests.integer_task_corpus import family_config
from trainer.config import load_experiment
from trainer.engine import train


@pytest.fixture(scope="module")
def markov_corpus(tmp_path_factory):
    config = family_config("markov", "samples=400", "seq_len=31", "eval_samples=16")
    out = tmp_path_factory.mktemp("markov")
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def _run(markov_corpus, tmp_path, name: str, *overrides: str) -> list[dict]:
    experiment = load_experiment(tiny_experiment_file(tmp_path), [
        "train.ctx=32", "train.max_steps=6", "train.ckpt_every=6", "eval.tasks=[markov]",
        *overrides])
    train(experiment, tmp_path / name, markov_corpus)
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_tasks_are_logged_at_their_steps_and_training_is_unchanged(markov_corpus, tmp_path):
    plain = _run(markov_corpus, tmp_path, "plain")
    along = _run(markov_corpus, tmp_path, "along", "train.tasks_every=3")
    # one line a step either way (log_every 1); the tasks' numbers at steps 3 and 6 only
    assert [line["step"] for line in along] == [line["step"] for line in plain] == list(range(1, 7))
    assert [line["loss"] for line in along] == [line["loss"] for line in plain]
    with_tasks = [line["step"] for line in along if "tasks/markov/loss" in line]
    assert with_tasks == [3, 6]
    for line in along:
        if "tasks/markov/loss" in line:
            # a real loss over two symbols, next to the chain's references
            assert 0 < line["tasks/markov/loss"] < 5
            assert line["tasks/markov/references/entropy_rate"] == pytest.approx(0.6190, abs=1e-4)
            assert all(isinstance(value, float) for key, value in line.items()
                       if key.startswith("tasks/"))
