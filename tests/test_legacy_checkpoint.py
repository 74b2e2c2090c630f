"""A run directory saved by an earlier physlm (tests/golden/legacy_run, commit 445d8d3: flat
`relative_*` model keys in its checkpoint and config.yaml) still resumes and evaluates with
today's code: its corpus regenerates from the run's own config.yaml with the tokenizer its
checkpoint was trained with, resuming it with its experiment file in today's layout reproduces
the losses that commit printed for steps 5 and 6, and both the resumed run and the saved
checkpoint evaluate."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from launch.experiment import corpus_dir
from tests.conftest import ROOT
from trainer.config import load_experiment
from trainer.engine import train
from trainer.eval.runner import evaluate

LEGACY = ROOT / "tests/golden/legacy_run"
# what 445d8d3 printed for `physlm train experiment.yaml --run-dir run train.max_steps=6
# train.resume=reschedule` after the 4 saved steps
RESUMED_LOSSES = {5: 5.992437362670898, 6: 5.990881443023682}
# what the code of 6bcec87 (445d8d3's and the fixture) evaluates at steps 4 and 6 alike (a few
# steps answer nothing): n is 20
# people a split (40 people, qa_train_fraction 0.5) times 6 attributes; the chances are the
# regenerated eval sets' and tokenizer's
QA = {"test": {"exact": 0.0, "first_token": 0.0, "exact_chance": 11 / 120,
               "first_token_chance": 44 / 120, "n": 120, "too_long": 0},
      "train": {"exact": 0.0, "first_token": 0.0, "exact_chance": 11 / 120,
                "first_token_chance": 51 / 120, "n": 120, "too_long": 0}}


def _saved_meta() -> dict:
    return json.loads((LEGACY / "checkpoints/step-000004/meta.json").read_text())


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(LEGACY, run)
    return run


def _experiment_file(directory: Path) -> Path:
    """The run's experiment.yaml in today's layout: an experiment file is read as written (only
    saved model configs are upgraded), and the encoding's options are now its group's."""
    flat = "  relative_buckets: 8\n  relative_max_distance: 32\n"
    text = (LEGACY / "experiment.yaml").read_text()
    assert flat in text
    path = directory / "experiment.yaml"
    path.write_text(text.replace(flat, "  relative: {buckets: 8, max_distance: 32}\n"))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The run's corpus, regenerated from the `corpus` group of its config.yaml (the config the
    corpus was generated from, as its manifest recorded it). The run names it by a path relative
    to where it was trained (`corpora/...`), so the tests pass this directory explicitly."""
    directory = tmp_path_factory.mktemp("legacy_corpus")
    group = yaml.safe_load((LEGACY / "config.yaml").read_text())["corpus"]
    config_file = directory / "corpus.yaml"
    config_file.write_text(yaml.safe_dump(group))
    out = directory / "corpus"
    generate_corpus(load_config(config_file, [], schemas()), out, progress=False,
                    log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def resumed(corpus, tmp_path_factory) -> Path:
    """A copy of the legacy run, resumed to step 6 as `physlm train experiment.yaml --run-dir
    RUN train.max_steps=6 train.resume=reschedule --corpus CORPUS` does."""
    run = _copy(tmp_path_factory.mktemp("resumed"))
    experiment = load_experiment(_experiment_file(run),
                                 ["train.max_steps=6", "train.resume=reschedule"])
    train(experiment, run, corpus)
    return run


def test_the_regenerated_corpus_is_the_one_the_checkpoint_was_trained_on(corpus):
    manifest = json.loads((corpus / "manifest.json").read_text())
    meta = _saved_meta()
    assert manifest["tokenizer"]["sha256"] == meta["tokenizer_sha256"]
    assert meta["tokenizer_sha256"].startswith("eb4a4e9e")
    assert manifest["fingerprint"] == meta["corpus_fingerprint"] == "52b884ca7f588197"


def test_the_runs_experiment_file_still_names_the_corpus_the_run_was_trained_on(tmp_path):
    # `physlm train experiment.yaml` without --corpus, in the folder the run was trained in,
    # finds the corpus its config.yaml names
    config = yaml.safe_load((LEGACY / "config.yaml").read_text())
    experiment = load_experiment(_experiment_file(tmp_path), [])
    assert str(corpus_dir(experiment)) == config["corpus_dir"] == "corpora/bios_s_single-52b884ca"


def test_resuming_the_legacy_run_reproduces_the_losses_of_the_code_that_saved_it(resumed):
    losses = _losses(resumed)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    saved = _losses(LEGACY)
    assert all(losses[step] == saved[step] for step in (1, 2, 3, 4))  # kept as they were
    for step, loss in RESUMED_LOSSES.items():
        assert losses[step] == pytest.approx(loss, abs=1e-5), step


def test_the_resumed_run_evaluates_at_step_6(resumed):
    # no corpus_dir: the resumed run's config.yaml names the corpus it was resumed on
    result = evaluate(resumed, ["qa"])["qa"]
    assert result["step"] == 6
    _assert_qa_results(result)
    assert json.loads((resumed / "eval/qa.json").read_text())["step"] == 6


def test_the_saved_legacy_checkpoint_evaluates_as_it_is(corpus, tmp_path):
    run = _copy(tmp_path)
    result = evaluate(run, ["qa"], corpus_dir=corpus)["qa"]
    assert result["step"] == 4
    _assert_qa_results(result)


def _assert_qa_results(result: dict) -> None:
    for split, expected in QA.items():
        got = {key: result[split][key] for key in expected}
        assert got == pytest.approx(expected, abs=1e-12), split
