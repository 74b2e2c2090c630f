"""Suites (`runs:` in an experiment file): several runs in order, a finetuning run starting from
its parent's weights on a corpus of the parent's tokenizer (bios mode=qa: the QA documents of the
train half only)."""

import json
from pathlib import Path

import pytest

import configs
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from launch.cli import main
from launch.experiment import corpus_dir
from launch.suite import is_suite, load_suite, run_suite

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


def test_a_suite_runs_in_order_and_the_child_finetunes_its_parent(suite_file, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # corpora/ are cached in the working directory
    suite = load_suite(suite_file, ["train.seed=3"])
    assert is_suite(suite_file) and [r.name for r in suite.runs] == ["pre", "ft"]
    assert [r.experiment.name for r in suite.runs] == ["s-pre", "s-ft"]
    assert all(r.experiment.train.seed == 3 for r in suite.runs)  # the command line: every run
    lines: list[str] = []
    done = run_suite(suite, tmp_path / "runs", workers=1, log=lines.append)
    assert list(done) == ["pre", "ft"] and done["ft"][1]["qa"]["test"]["n"] == 18
    assert any("run ft (finetuning pre)" in line for line in lines)
    meta = json.loads((tmp_path / "runs/ft/checkpoints/step-000006/meta.json").read_text())
    assert meta["parent"] == {"run": str((tmp_path / "runs/pre").resolve()),
                              "checkpoint": "step-000006", "step": 6}
    pre, ft = (r.experiment for r in suite.runs)
    assert Path(ft.corpus.tokenizer.reuse) == corpus_dir(pre)  # the parent's corpus
    assert read_manifest(corpus_dir(ft))["tokenizer"]["sha256"] == \
        read_manifest(corpus_dir(pre))["tokenizer"]["sha256"]

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
