"""Suites (`runs:` in an experiment file): several runs planned and run as a sweep's are (a
plan.json, a job per run), a finetuning run starting after its parent, from its weights, on a
corpus of the parent's tokenizer (bios mode=qa: the QA documents of the train half only)."""

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

import configs
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from launch.cli import main
from launch.experiment import corpus_dir
from launch.plan import load_plan, read_plan
from launch.suite import is_suite, load_suite
from tests.conftest import tiny_experiment_file

SUITE = """\
name: s
defaults:
  model: {n_layer: 2, n_head: 2, d_model: 32}
  train: {max_steps: 6, ckpt_every: 6, ctx: 64, micro_batch: 4, lr: 0.003, warmup_steps: 1,
          log_every: 1, wandb: {mode: disabled}}
  eval: {tasks: []}
runs:
  pre:
    corpus: {base: bios_s_multi5_permute, people: 30, records_per_shard: 100,
             tokenizer: {vocab_size: 600, sample_records: 200}}
  ft:
    parent: pre
    corpus: {base: bios_s_multi5_permute, people: 30, mode: qa, qa_loss: answer}
    eval: {tasks: [qa], qa: {max_people: 3}}
"""


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    return path


def _physlm(*argv: str) -> tuple[int, str]:
    """`physlm ARGV` in this process: its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def finished_suite(tmp_path_factory) -> tuple[Path, str]:
    """SUITE run once by `physlm run`, two jobs at a time (corpora/ and runs/ in a directory of
    its own): the suite file and what the run printed."""
    directory = tmp_path_factory.mktemp("suite")
    path = directory / "suite.yaml"
    path.write_text(SUITE)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)  # corpora/ are cached in the working directory
        code, out = _physlm("run", str(path), "train.seed=3", "--jobs", "2")
    assert code == 0, out
    return path, out


def test_a_suite_run_is_planned_and_its_child_finetunes_its_parent_after_it(finished_suite,
                                                                         monkeypatch):
    path, out = finished_suite
    root = path.parent / "runs/s"
    record, runs = read_plan(root)
    assert record["kind"] == "suite" and record["source"] == str(path)
    assert [(r.name, r.run_dir, r.parent) for r in runs] == [("pre", root / "pre", None),
                                                             ("ft", root / "ft", "pre")]
    # two jobs at a time, yet the child starts only once its parent is done
    lines = out.splitlines()
    done = lines.index(next(line for line in lines if line.startswith("train  | pre: done")))
    started = lines.index(next(line for line in lines if line.startswith("train  | ft: started")))
    assert done < started
    assert json.loads((root / "ft/eval/qa.json").read_text())["test"]["n"] == 18
    meta = json.loads((root / "ft/checkpoints/step-000006/meta.json").read_text())
    assert meta["parent"] == {"run": str((root / "pre").resolve()),
                              "checkpoint": "step-000006", "step": 6}
    monkeypatch.chdir(path.parent)
    pre, ft = (run.experiment for run in load_plan(path, ["train.seed=3"]).runs)
    assert [pre.name, ft.name, pre.train.seed, ft.train.seed] == ["s-pre", "s-ft", 3, 3]
    assert Path(ft.corpus.tokenizer.reuse) == corpus_dir(pre)  # the parent's corpus
    assert read_manifest(corpus_dir(ft))["tokenizer"]["sha256"] == \
        read_manifest(corpus_dir(pre))["tokenizer"]["sha256"]
    assert "| pre | done | 6/6 |" in out and "| ft | done | 6/6 |" in out
    assert (root / "report/sweep.md").is_file() and (root / "report/runs/report.md").is_file()


def test_status_shows_a_suite_run_by_physlm_run(finished_suite, monkeypatch):
    path, _ = finished_suite
    monkeypatch.chdir(path.parent)
    for where in ("runs/s", str(path), "runs/s/ft"):
        code, out = _physlm("status", where)
        assert code == 0, out
        assert "| ft | done | 6/6 |" in out
    assert "| pre | done | 6/6 |" in _physlm("status", "runs/s")[1]


def test_a_rerun_of_a_suite_keeps_its_finished_runs(finished_suite, monkeypatch):
    path, _ = finished_suite
    root = path.parent / "runs/s"
    kept = {f: f.stat().st_mtime_ns for f in root.glob("*/checkpoints/*/*") if f.is_file()}
    logs = {run: (root / run / "log.txt").read_text() for run in ("pre", "ft")}
    monkeypatch.chdir(path.parent)
    code, out = _physlm("run", str(path), "train.seed=3")
    assert code == 0, out
    assert "run    | pre: done already, kept" in out and "run    | ft: done already, kept" in out
    assert "started" not in out and "gen    | cached corpus" in out
    assert {f: f.stat().st_mtime_ns for f in kept} == kept
    assert {run: (root / run / "log.txt").read_text() for run in logs} == logs


def test_a_suite_run_trained_with_other_settings_is_refused_as_a_sweeps_is(
        finished_suite, monkeypatch, capsys):
    path, _ = finished_suite
    monkeypatch.chdir(path.parent)  # the runs were trained with seed 3
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("physlm run: error: run pre: runs/s/pre was trained with other settings "
                   "(train.seed: 3 -> 0); pass --redo-changed to move it aside and train it "
                   "again, or restore the setting")
    assert main(["run", str(path), "--dry-run", "--redo-changed"]) == 0
    out = capsys.readouterr().out
    assert "run    | ft: trained with other settings (train.seed: 3 -> 0); would be moved" in out
    assert not list(Path("runs/s").glob("replaced-*"))


def test_a_suite_dry_run_lists_its_runs_and_parents_and_writes_nothing(suite_file, tmp_path,
                                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(suite_file), "--dry-run", "--run-dir", "here"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "suite s: 2 runs in here, 2 corpora"
    assert out[3].startswith("  ft") and out[4].startswith("      run here/ft  corpus ")
    assert out[4].endswith("  finetunes pre")
    assert os.listdir(tmp_path) == ["suite.yaml"]


def test_a_run_whose_parent_failed_is_not_started_and_the_suite_exits_1(
        suite_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite_file.write_text(SUITE.replace("  pre:\n", "  pre:\n    train: {init_from: nowhere}\n"))
    assert main(["run", str(suite_file)]) == 1
    out = capsys.readouterr().out
    assert "train  | pre: failed (exit 2): physlm train: error:" in out
    assert "run    | ft: failed: its parent pre did not finish" in out
    assert "ft: started" not in out and "| ft | failed | 0/6 |" in out


def test_dry_run_redo_changed_and_jobs_are_refused_for_one_experiment(tmp_path, capsys):
    path = tiny_experiment_file(tmp_path)
    for option in ("--dry-run", "--redo-changed", "--jobs"):
        assert main(["run", str(path), option, *(["2"] if option == "--jobs" else [])]) == 2
        assert capsys.readouterr().err == (f"physlm run: error: {option} is for a suite; for one "
                                           f"experiment, physlm sweep {path} {option} does it\n")
    assert os.listdir(tmp_path) == ["exp.yaml"]


def test_qa_mode_writes_the_train_halfs_qa_documents_only(bios_config):
    from corpus_gen.bios.family import layout, records

    mix = bios_config(people=40, mode="mix", qa_copies=2)
    qa = bios_config(people=40, mode="qa", qa_copies=2)
    docs = list(records(qa, 0, layout(qa).records))
    assert len(docs) == 40 and {d.meta["kind"] for d in docs} == {"qa"}
    assert sorted(d.meta["person"]["id"] for d in docs) == sorted(list(range(20)) * 2)
    mixed = [d.text for d in records(mix, 0, layout(mix).records) if d.meta["kind"] == "qa"]
    assert sorted(d.text for d in docs) == sorted(mixed)  # the very QA documents of mix mode
    assert layout(qa).summary["biographies"] == 0 and layout(qa).summary["qa_documents"] == 40


@pytest.mark.parametrize("body, message", [
    ("name: s\nruns: {a: {model: {n_layer: 0}}}\n", "runs.a.model.n_layer=0"),
    ("runs: {a: {parent: b}, b: {}}\n", "runs.a.parent='b': must name an earlier run of the "
                                        "suite (earlier: none)"),
    ("runs: {}\n", "runs={}: must be a mapping of run names to experiments"),
    ("runs: {a: {}}\nmodel: gpt_tiny\n", "model='gpt_tiny': unknown suite key"),
    ("runs: {a: 3}\n", "runs.a=3: must be a mapping of experiment keys"),
])
def test_a_bad_suite_is_one_line_naming_the_key(tmp_path, capsys, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as caught:
        load_suite(path, [])
    assert message in str(caught.value) and str(path) in str(caught.value)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() and not Path("runs/bad").exists()


@pytest.mark.parametrize("name", configs.names("experiment"))
def test_every_shipped_experiment_and_suite_loads(name):
    from trainer.config import load_experiment

    path = configs.find("experiment", name)
    if is_suite(path):
        suite = load_suite(path, [])
        assert suite.name == name and suite.runs
        assert all(r.experiment.corpus is not None for r in suite.runs)
    else:
        assert load_experiment(path, []).name == name


def test_a_suite_run_named_longer_than_a_directory_name_is_refused_when_planned(tmp_path):
    from launch.plan import load_plan
    from trainer.errors import TrainError

    path = tmp_path / "long.yaml"
    path.write_text(SUITE.replace("  pre:\n", "  " + "p" * 300 + ":\n")
                    .replace("parent: pre", "parent: " + "p" * 300))
    with pytest.raises(TrainError) as caught:
        load_plan(path, [], root=str(tmp_path / "runs"))
    assert str(caught.value) == (f"{tmp_path / 'runs' / ('p' * 300)}: a name of 300 bytes; a "
                                 "file or directory name holds at most 255: shorten it")
