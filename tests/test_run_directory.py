"""A run directory holds one run: resume semantics, what training reports, and faults found
mid-training ending in one line."""

import json
import shutil
import subprocess
import sys

import pytest
import torch

from launch.cli import main
from launch.experiment import ensure_corpus
from trainer.engine import _eta, train
from trainer.errors import TrainError
from trainer.eval.runner import evaluate
from trainer.run_dir import latest_checkpoint, point_latest, read_latest, read_metrics


def _steps(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))


def test_resume_none_refuses_a_directory_holding_a_run_and_overwrite_starts_over(
        train_corpus, tiny_experiment, tmp_path):
    old = tmp_path / "old"
    train(tiny_experiment("train.max_steps=6", "train.ckpt_every=3", "train.keep_last=2"), old,
          train_corpus)
    run = tmp_path / "run"
    shutil.copytree(old, run)
    before = _steps(run)
    assert before == ["step-000003", "step-000006"]

    # the case: an older run with higher steps than the new one will reach
    again = ("train.max_steps=4", "train.ckpt_every=1", "train.keep_last=2")
    with pytest.raises(TrainError, match=f"^{run}: already holds a run .* resume=overwrite"):
        train(tiny_experiment(*again, "train.resume=none"), run, train_corpus)
    assert _steps(run) == before  # nothing touched

    train(tiny_experiment(*again, "train.resume=overwrite"), run, train_corpus)
    assert _steps(run) == ["step-000003", "step-000004"]  # the new run's two newest
    assert (run / "checkpoints" / "latest").read_text() == "step-000004"
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4]
    assert evaluate(run, ["qa"])["qa"]["step"] == 4
    assert _steps(old) == before  # the copy's source is another directory, untouched


def test_grad_norm_is_measured_at_every_zero_stage_and_precision(train_corpus, tiny_experiment,
                                                                 tmp_path):
    first = {}
    for setting in ("train.zero_stage=0", "train.zero_stage=1", "train.precision=bf16"):
        run = tmp_path / setting
        train(tiny_experiment(setting, "train.max_steps=3", "train.ckpt_every=3",
                              "train.grad_accum=2"), run, train_corpus)
        norms = [m["grad_norm"] for m in read_metrics(run)]
        assert len(norms) == 3 and all(isinstance(n, float) and n > 0 for n in norms), norms
        first[setting] = norms[0]
    # ZeRO-0 fp32 is measured by physlm, ZeRO-1 by DeepSpeed: the same gradients, the same norm
    assert first["train.zero_stage=0"] == pytest.approx(first["train.zero_stage=1"], rel=1e-4)


def test_the_eta_is_paced_by_the_steps_after_the_first():
    # 10 steps after the first took 20 s: 2 s a step, 95 steps left; the first step's own
    # time (compilation) is not in the 20 s, so it cannot inflate the estimate
    assert _eta(20.0, 10, 95) == "3m10s"
    assert _eta(3600.0, 1, 2) == "2h00m"
    assert _eta(0.0, 0, 5) == "-"  # only the first step so far: no pace to go on
    assert _eta(7.0, 0, 0) == "0m00s"  # the last step: nothing left, whatever the pace


def test_training_says_where_it_resumed_and_how_long_is_left(train_corpus, tiny_experiment,
                                                             tmp_path, capsys):
    run = tmp_path / "run"
    train(tiny_experiment("train.max_steps=2", "train.ckpt_every=2"), run, train_corpus)
    step_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    # the first step carries warm-up and compilation: no estimate from it; the last needs none
    assert [line.rsplit("| ", 1)[1] for line in step_lines] == ["eta -", "eta 0m00s"]
    train(tiny_experiment("train.max_steps=3", "train.ckpt_every=2", "train.resume=reschedule"),
          run, train_corpus)
    out = capsys.readouterr().out.splitlines()
    assert f"train  | resumed from {run / 'checkpoints' / 'step-000002'} (step 2 of 3)" in out
    step_lines = [line for line in out if line.startswith("step ")]
    assert len(step_lines) == 1 and step_lines[0].startswith("step      3/3 | loss ")
    assert "tok/s | eta 0m00s" in step_lines[0]

    # a finished run has nothing left to train: said as such, not as a loss of nan
    from conftest import tiny_experiment_file

    code = main(["train", str(tiny_experiment_file(tmp_path)), "--corpus", str(train_corpus),
                 "--run-dir", str(run), "train.max_steps=3", "train.ckpt_every=2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and out[-1] == "train  | nothing to train: the run is already at " \
        "train.max_steps"


def test_faults_found_mid_training_end_in_one_line_and_keep_the_last_checkpoint(
        train_corpus, tmp_path, capsys):
    from conftest import tiny_experiment_file

    corpus = tmp_path / "corpus"
    shutil.copytree(train_corpus, corpus)
    shard = corpus / "train" / "shard-000003.tar"  # read last: checkpoints come first
    shard.write_bytes(shard.read_bytes()[:-20000])  # truncated
    run = tmp_path / "run"
    code = main(["train", str(tiny_experiment_file(tmp_path)), "--corpus", str(corpus),
                 "--run-dir", str(run), "train.max_steps=400", "train.ckpt_every=2",
                 "train.shuffle_shards=false"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"physlm train: error: {shard}: sha256 differs") and "verify" in err
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text()
    weights = torch.load(latest / "weights.pt", weights_only=True)["state_dict"]
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_run_repairs_a_damaged_cached_corpus_before_training(tmp_path, monkeypatch):
    import launch.experiment as experiment_module
    from trainer.config import load_experiment

    monkeypatch.setattr(experiment_module, "CORPUS_CACHE", tmp_path / "corpora")
    path = tmp_path / "exp.yaml"
    path.write_text("name: r\ncorpus: {base: bios_s_single, people: 60, records_per_shard: 30,"
                    " tokenizer: {vocab_size: 600, sample_records: 60}}\n")
    experiment = load_experiment(path, [])
    lines = []
    out = ensure_corpus(experiment, workers=1, log=lines.append)
    reference = {p.name: p.read_bytes() for p in (out / "train").iterdir()}
    assert lines == [f"gen    | generating {out}"]

    lines.clear()
    assert ensure_corpus(experiment, workers=1, log=lines.append) == out
    assert lines == [f"gen    | cached corpus {out} (checksums verified)"]

    shard = out / "train" / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    data[3000] ^= 0xFF
    shard.write_bytes(bytes(data))
    lines.clear()
    ensure_corpus(experiment, workers=1, log=lines.append)
    assert lines == [f"gen    | {shard}: sha256 mismatch (corrupt or modified)",
                     f"gen    | repairing {out}"]
    assert {p.name: p.read_bytes() for p in (out / "train").iterdir()} == reference
    assert json.loads((out / "manifest.json").read_text())["records"] == 60


def test_the_latest_pointer_names_the_newest_complete_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    assert read_latest(checkpoints) is None and latest_checkpoint(checkpoints) is None
    for step in (2, 4):
        (checkpoints / f"step-00000{step}").mkdir(parents=True)
        (checkpoints / f"step-00000{step}" / "meta.json").write_text("{}")
    point_latest(checkpoints, "step-000002")
    point_latest(checkpoints, "step-000004")
    assert (checkpoints / "latest").read_text() == "step-000004"
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "latest", "step-000002", "step-000004"]  # no temporary file left beside it
    assert latest_checkpoint(checkpoints) == checkpoints / "step-000004"
    (checkpoints / "step-000004" / "meta.json").unlink()
    with pytest.raises(TrainError) as caught:
        latest_checkpoint(checkpoints)
    assert str(caught.value) == (f"{checkpoints / 'latest'}: points at "
                                 f"{checkpoints / 'step-000004'}, which is not a complete "
                                 "checkpoint")


def test_reading_run_directories_imports_no_torch():
    """`physlm status` and `physlm report` read many run directories; torch takes seconds."""
    code = ("import sys, trainer.run_dir, launch.status, launch.report, launch.sweep_report; "
            "print([m for m in ('torch', 'deepspeed') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
