"""Evaluation trusts only what verifies and never replaces a good result with a bad one: eval
sets are checked against the corpus manifest and read row by row with one line for a bad row,
a damaged run config is one line, a failed task leaves the previous results (and no W&B run),
and the results name the run by its directory."""

import errno
import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launch.cli import main
from tests.conftest import record_eval_set
from trainer.engine import train
from trainer.errors import TrainError
from trainer.eval import registry
from trainer.eval.qa import read_rows
from trainer.eval.runner import evaluate

NEEDS = "the QA task needs a bios corpus"
RESULTS = ("qa.json", "qa.png")


@pytest.fixture(scope="module")
def evaluated(train_corpus, tmp_path_factory) -> Path:
    """A run of the tiny experiment (name `t`) in a directory named `my-run`, trained two steps
    and evaluated on QA for two people a split. Tests work on copies."""
    from tests.conftest import tiny_experiment_file
    from trainer.config import load_experiment

    directory = tmp_path_factory.mktemp("evaluated")
    experiment = load_experiment(tiny_experiment_file(directory),
                                 ["train.max_steps=2", "train.ckpt_every=2",
                                  "eval.qa.max_people=2"])
    run = directory / "my-run"
    train(experiment, run, train_corpus)
    evaluate(run)
    return run


@pytest.fixture
def run(evaluated, tmp_path) -> Path:
    copy = tmp_path / "my-run"
    shutil.copytree(evaluated, copy)
    return copy


def _files(run: Path) -> dict[str, bytes]:
    return {name: (run / "eval" / name).read_bytes() for name in RESULTS}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_an_emptied_eval_set_is_one_line_and_the_previous_results_stay(run, train_corpus,
                                                                       tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(train_corpus, corpus)
    (corpus / "eval" / "qa_test.jsonl").write_text("")
    before = _files(run)
    assert main(["eval", str(run), "--corpus", str(corpus)]) == 2
    assert _one_line_error(capsys) == (
        f"physlm eval: error: {corpus}/eval/qa_test.jsonl: sha256 differs from "
        f"{corpus}/manifest.json (damaged or modified); physlm gen of the corpus's config "
        "repairs it")
    assert _files(run) == before
    assert [p.name for p in (run / "eval").iterdir()] == sorted(RESULTS)  # no staging left


def test_an_eval_set_the_manifest_does_not_list_is_refused(train_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(train_corpus, corpus)
    shutil.copy(corpus / "eval" / "qa_test.jsonl", corpus / "eval" / "qa_extra.jsonl")
    with pytest.raises(TrainError) as error:
        read_rows(corpus, "qa_extra", 0, NEEDS)
    assert str(error.value) == (f"{corpus}/eval/qa_extra.jsonl: not listed in "
                                f"{corpus}/manifest.json; {NEEDS}")
    assert len(read_rows(corpus, "qa_test", 2, NEEDS)) == 12  # 2 people x 6 attributes


@pytest.mark.parametrize("line, problem", [
    ('{"person": 1, "attribute": "major", "answer": "Math"}',
     "no 'prompt'; a row of this set needs person, attribute, prompt, answer"),
    ('{"person": 1, "attribute": "major", "prompt": 7, "answer": "Math"}',
     "'prompt' is int, not str"),
    ('{"person": 1, "attribute": "major", "prompt": "Q', "not JSON (Unterminated string "
     "starting at: line 1 column 47 (char 46))"),
    ("[1, 2]", "not a JSON object"),
    ("[" * 100_000, "not JSON (maximum recursion depth exceeded while decoding a JSON array "
     "from a unicode string)"),
], ids=["no-key", "wrong-type", "not-json", "not-object", "too-deep"])
def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, line, problem):
    good = {"person": 0, "attribute": "major", "prompt": "Q?\nAnswer:", "answer": "Math"}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "qa_test.jsonl").write_text(f"{json.dumps(good)}\n\n{line}\n")
    record_eval_set(tmp_path, "qa_test")  # the manifest agrees: the row itself is bad
    with pytest.raises(TrainError) as error:
        read_rows(tmp_path, "qa_test", 0, NEEDS)
    assert str(error.value) == f"{tmp_path}/eval/qa_test.jsonl:3: {problem}"


@pytest.mark.parametrize("text, problem", [
    ("name: [t\n", "damaged run config: while parsing a flow sequence in"),
    ("- 1\n", "damaged run config: not a mapping of settings"),
    ("name: t\neval: {}\n", "damaged run config: no 'train'"),
    (b"name: \xff\n", "damaged run config: 'utf-8' codec can't decode byte 0xff"),
], ids=["yaml", "list", "no-key", "not-utf8"])
def test_a_damaged_run_config_is_one_line_naming_it(tmp_path, capsys, text, problem):
    config = tmp_path / "config.yaml"
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["eval", str(tmp_path)]) == 2
    assert _one_line_error(capsys).startswith(f"physlm eval: error: {config}: {problem}")


def test_results_and_plot_name_the_run_by_its_directory(run):
    saved = json.loads((run / "eval" / "qa.json").read_text())
    assert (saved["run"], saved["step"]) == ("my-run", 2)  # not the experiment's name, t
    assert evaluate(run)["qa"]["run"] == "my-run"


def test_a_task_that_fails_leaves_the_previous_results_and_no_wandb_run(run, monkeypatch,
                                                                        capsys):
    config = OmegaConf.load(run / "config.yaml")
    config.train.wandb.mode = "offline"
    OmegaConf.save(config, run / "config.yaml")
    before = _files(run)

    def full_disk(results: dict, path: Path) -> None:
        path.write_bytes(b"half a plot")
        raise OSError(errno.ENOSPC, "No space left on device")

    qa = registry.tasks()["qa"]
    monkeypatch.setitem(registry._TASKS, "qa", registry.Task("qa", qa.options, qa.run, full_disk))
    assert main(["eval", str(run)]) == 2
    assert _one_line_error(capsys).startswith(
        f"physlm eval: error: {run}/eval/qa.json: cannot write it: No space left on device "
        "(ENOSPC); the previous results are kept")
    assert _files(run) == before
    assert sorted(p.name for p in (run / "eval").iterdir()) == sorted(RESULTS)
    assert not (run / "wandb").exists()  # W&B starts only once a task has results
    monkeypatch.undo()
    assert main(["eval", str(run)]) == 0
    assert list((run / "wandb").glob("offline-run-*"))


def test_an_empty_split_is_no_data_not_zero(run, train_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(train_corpus, corpus)
    (corpus / "eval" / "qa_test.jsonl").write_text("")
    record_eval_set(corpus, "qa_test")  # a corpus whose test split is empty, as generated
    result = evaluate(run, corpus_dir=corpus)["qa"]
    assert (result["test"]["n"], result["test"]["exact"], result["test"]["first_token"]) == (
        0, None, None)
    assert json.loads((run / "eval" / "qa.json").read_text())["test"]["exact"] is None
    assert result["train"]["n"] == 12


def test_evaluation_waits_for_no_other_writer_of_the_run(run, capsys):
    from trainer.run_dir import run_lock

    before = _files(run)
    with run_lock(run, "physlm train"):
        assert main(["eval", str(run)]) == 2
    assert _one_line_error(capsys).startswith(f"physlm eval: error: {run}: physlm train (pid ")
    assert _files(run) == before


def test_an_eval_directory_linked_out_of_the_run_is_refused_and_left_unchanged(run, tmp_path,
                                                                             capsys):
    outside = tmp_path / "elsewhere"
    (run / "eval").rename(outside)
    (run / "eval").symlink_to(outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    assert main(["eval", str(run)]) == 2
    assert _one_line_error(capsys).startswith(
        f"physlm eval: error: {run}/eval: a symbolic link to {outside}, outside the run directory")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
