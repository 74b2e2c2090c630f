"""Training end to end on tiny corpora: resume, divergence, bad inputs, distributed, QA eval."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_experiment_file
from omegaconf import OmegaConf

from corpus_gen.core.generate import generate_corpus
from trainer.config import TrainConfig, load_experiment
from trainer.data import DataOptions
from trainer.distributed import free_port
from trainer.engine import data_options, train
from trainer.errors import TrainError
from trainer.eval.runner import evaluate
from trainer.model import GPT
from trainer.model.config import model_config_from_dict
from trainer.run_dir import read_metrics

ROOT = Path(__file__).resolve().parent.parent


class Killed(Exception):
    pass


@pytest.fixture
def corpus(train_corpus):
    return train_corpus


def _experiment(tmp_path, *overrides):
    return load_experiment(tiny_experiment_file(tmp_path), list(overrides))


def _losses(run_dir):
    return [(m["step"], m["loss"]) for m in read_metrics(run_dir)]


def test_the_loader_gets_the_train_keys_of_its_options():
    train = TrainConfig(ctx=48, micro_batch=3, seed=9, split_documents=False,
                        shuffle_shards=False, doc_mask=False, restart_positions=False)
    assert data_options(train) == DataOptions(ctx=48, micro_batch=3, seed=9,
                                              split_documents=False, shuffle_shards=False,
                                              doc_mask=False, restart_positions=False)


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi", "relative", "none"])
def test_every_encoding_trains_a_few_steps(corpus, tmp_path, pos):
    experiment = _experiment(tmp_path, f"model.pos={pos}", "train.max_steps=6",
                             "train.ckpt_every=6")
    metrics = train(experiment, tmp_path / "run", corpus)
    losses = [loss for _, loss in _losses(tmp_path / "run")]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert metrics["tokens_per_s"] > 0 and metrics["mfu"] is None  # no peak for CPUs
    assert (tmp_path / "run" / "checkpoints" / "step-000006" / "weights.pt").exists()
    # the config of the corpus trained on (the experiment has no corpus group of its own)
    saved = OmegaConf.load(tmp_path / "run" / "config.yaml")
    assert saved.corpus_dir == str(corpus) and saved.corpus.people == 40
    assert saved.corpus.variant == "multi5_permute" and saved.corpus.mode == "mix"


def test_resume_after_kill_matches_uninterrupted_run_bit_for_bit(corpus, tmp_path):
    args = ("train.max_steps=10", "train.ckpt_every=4", "train.grad_accum=2",
            "model.dropout=0.1")
    train(_experiment(tmp_path, *args), tmp_path / "straight", corpus)

    def kill_at_7(step, _):
        if step == 7:
            raise Killed()

    with pytest.raises(Killed):
        train(_experiment(tmp_path, *args), tmp_path / "resumed", corpus, on_step=kill_at_7)
    assert (tmp_path / "resumed" / "checkpoints" / "latest").read_text() == "step-000004"
    train(_experiment(tmp_path, *args), tmp_path / "resumed", corpus)
    assert _losses(tmp_path / "resumed") == _losses(tmp_path / "straight")
    straight = torch.load(tmp_path / "straight/checkpoints/step-000010/weights.pt")
    resumed = torch.load(tmp_path / "resumed/checkpoints/step-000010/weights.pt")
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key


def test_non_finite_loss_stops_with_the_last_good_checkpoint(corpus, tmp_path, monkeypatch):
    import trainer.engine as engine

    real = engine.lm_loss
    calls = {"n": 0}

    def poisoned(logits, labels):
        calls["n"] += 1
        loss = real(logits, labels)
        return loss * float("nan") if calls["n"] == 6 else loss

    monkeypatch.setattr(engine, "lm_loss", poisoned)
    experiment = _experiment(tmp_path, "train.max_steps=10", "train.ckpt_every=3")
    with pytest.raises(TrainError, match=r"loss became nan at step 6; stopped \(last good "
                                         r"checkpoint: .*step-000003\)"):
        train(experiment, tmp_path / "run", corpus)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "latest").read_text() == "step-000003"
    assert torch.load(checkpoints / "step-000003" / "weights.pt")["state_dict"]


def test_a_checkpoint_of_another_shape_is_refused(corpus, tmp_path):
    train(_experiment(tmp_path, "train.max_steps=2", "train.ckpt_every=2"), tmp_path / "run",
          corpus)
    with pytest.raises(TrainError, match="model.n_layer=2 but the config says 3"):
        train(_experiment(tmp_path, "train.max_steps=4", "model.n_layer=3"), tmp_path / "run",
              corpus)


def test_a_missing_shard_or_corpus_is_named(corpus, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(corpus, broken)
    shard = broken / "train" / "shard-000001.tar"
    shard.unlink()
    with pytest.raises(TrainError, match="shard-000001.tar"):
        train(_experiment(tmp_path, "train.max_steps=2"), tmp_path / "run", broken)
    with pytest.raises(TrainError, match="manifest.json"):
        train(_experiment(tmp_path, "train.max_steps=2"), tmp_path / "run2", tmp_path / "none")


def test_whole_documents_longer_than_ctx_are_refused(corpus, tmp_path):
    with pytest.raises(TrainError, match="ctx"):
        train(_experiment(tmp_path, "train.ctx=16", "train.split_documents=false",
                          "train.max_steps=2"), tmp_path / "run", corpus)


def test_experiment_config_errors_name_group_key_and_source(tmp_path):
    from corpus_gen.core.errors import ConfigError

    with pytest.raises(ConfigError, match="train.lrr"):
        _experiment(tmp_path, "train.lrr=1")
    with pytest.raises(ConfigError, match="model.pos"):
        _experiment(tmp_path, "model.pos=sinusoid")
    path = tmp_path / "with_corpus.yaml"
    path.write_text("corpus: bios_s_single\n")
    assert load_experiment(path, ["corpus.people=7"]).corpus.people == 7
    with pytest.raises(ConfigError, match="command line: corpus.people='many'"):
        load_experiment(path, ["corpus.people=many"])
    with pytest.raises(ConfigError, match="unknown experiment key"):
        load_experiment(path, ["trian.lr=1"])


def test_qa_evaluation_scores_a_trained_model(corpus, tmp_path):
    experiment = _experiment(tmp_path, "train.max_steps=4", "train.ckpt_every=4",
                             "eval.qa.max_people=5", "train.eval_every=2")
    train(experiment, tmp_path / "run", corpus)
    monitored = [m["eval_loss"] for m in read_metrics(tmp_path / "run") if "eval_loss" in m]
    assert len(monitored) == 2 and monitored[1] < monitored[0]
    results = evaluate(tmp_path / "run", ["qa"], experiment.eval, corpus)
    qa = json.loads((tmp_path / "run" / "eval" / "qa.json").read_text())
    assert qa == json.loads(json.dumps(results["qa"]))
    for split in ("train", "test"):
        assert qa[split]["n"] == 30  # 5 people x 6 attributes
        assert set(qa[split]["per_attribute"]) == {"birth_date", "birth_city", "university",
                                                   "major", "employer", "company_city"}
        assert 0.0 <= qa[split]["exact"] <= qa[split]["first_token"] <= 1.0
    assert (tmp_path / "run" / "eval" / "qa.png").stat().st_size > 1000


def _train_two_processes(exp: Path, corpus: Path, run_dir: Path, *overrides: str) -> str:
    """`physlm train` under torchrun with two CPU processes; returns what it printed."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         f"--master_port={free_port()}", "-m", "launch.cli", "train", str(exp),
         "--corpus", str(corpus), "--run-dir", str(run_dir), *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_two_process_zero2_run_trains_checkpoints_and_resumes(corpus, tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: ddp\nmodel:\n  n_layer: 2\n  n_head: 2\n  d_model: 32\n"
                   "train:\n  ctx: 64\n  micro_batch: 2\n  max_steps: 4\n  ckpt_every: 2\n"
                   "  warmup_steps: 2\n"
                   "  zero_stage: 2\n  log_every: 1\n  wandb:\n    mode: disabled\n")
    run = tmp_path / "run"
    first = _train_two_processes(exp, corpus, run)
    assert "resumed from" not in first
    checkpoints = run / "checkpoints"
    for rank in (0, 1):
        assert (checkpoints / "step-000004" / f"data-rank{rank}.json").exists()
    assert [step for step, _ in _losses(run)] == [1, 2, 3, 4]

    again = _train_two_processes(exp, corpus, run, "train.max_steps=6",
                                 "train.resume=reschedule")
    assert f"train  | resumed from {checkpoints / 'step-000004'} (step 4 of 6)" in again
    assert [step for step, _ in _losses(run)] == [1, 2, 3, 4, 5, 6]
    assert (checkpoints / "latest").read_text() == "step-000006"
    for rank in (0, 1):  # one batch a step: the data position went on from step 4's
        state = json.loads((checkpoints / "step-000006" / f"data-rank{rank}.json").read_text())
        assert (state["epoch"], state["batch"], state["world_size"]) == (0, 6, 2)


@pytest.mark.parametrize("setting", ["train.zero_stage=1", "train.zero_stage=3",
                                     "train.precision=bf16"])
def test_zero_stages_and_bf16_train_and_save_full_weights(corpus, tmp_path, setting):
    experiment = _experiment(tmp_path, setting, "train.max_steps=3", "train.ckpt_every=3",
                             "train.grad_accum=2")
    train(experiment, tmp_path / "run", corpus)
    losses = [loss for _, loss in _losses(tmp_path / "run")]
    assert len(losses) == 3 and losses[-1] < losses[0]
    weights = torch.load(tmp_path / "run/checkpoints/step-000003/weights.pt")
    reference = GPT(model_config_from_dict(weights["model_config"])).state_dict()
    assert {k: v.shape for k, v in weights["state_dict"].items()} == {
        k: v.shape for k, v in reference.items()}


def test_a_corpus_with_another_tokenizer_is_refused(corpus, tmp_path):
    from corpus_gen.core.config import load_config
    from corpus_gen.core.registry import schemas

    other = tmp_path / "other"
    config = load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                         ["people=40", "tokenizer.vocab_size=600",
                          "tokenizer.sample_records=100"], schemas())
    generate_corpus(config, other, progress=False, log=lambda *_: None)
    train(_experiment(tmp_path, "train.max_steps=2", "train.ckpt_every=2"), tmp_path / "run",
          corpus)
    with pytest.raises(TrainError, match="another tokenizer"):
        train(_experiment(tmp_path, "train.max_steps=4"), tmp_path / "run", other)
    with pytest.raises(TrainError, match="tokenizer differs"):
        evaluate(tmp_path / "run", ["qa"], corpus_dir=other)


def test_a_corpus_of_another_family_is_refused_before_training(corpus, tmp_path, capsys):
    from launch.cli import main

    exp = tmp_path / "exp.yaml"  # an iGSM experiment given the bios corpus
    exp.write_text(tiny_experiment_file(tmp_path).read_text() + "corpus: igsm_med_pq\n")
    run = tmp_path / "run"
    code = main(["train", str(exp), "--corpus", str(corpus), "--run-dir", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"physlm train: error: {corpus / 'manifest.json'}: a corpus of family bios, but "
        f"experiment t ({exp}) trains on family igsm; give --corpus a corpus of family igsm, "
        "or leave it out")
    assert not run.exists()


def test_resume_refuses_a_changed_lr_schedule_and_reschedule_continues_under_the_new_one(
        corpus, tmp_path):
    from trainer.schedule import lr_factor

    run = tmp_path / "run"
    train(_experiment(tmp_path, "train.max_steps=4", "train.ckpt_every=2"), run, corpus)
    saved = run / "checkpoints" / "step-000004"
    for changed, old, new in [("max_steps", 4, 6), ("lr", 0.003, 0.006),
                              ("warmup_steps", 2, 1), ("min_lr_ratio", 0.1, 0.5)]:
        with pytest.raises(TrainError) as caught:
            train(_experiment(tmp_path, "train.max_steps=4", f"train.{changed}={new}"), run,
                  corpus)
        assert str(caught.value) == (
            f"{saved}: trained with train.{changed}={old!r}, but the config says {new!r}, "
            "which changes the lr schedule mid-run; train.resume=reschedule continues under "
            f"the new schedule, or use another --run-dir (train.init_from={run} starts from "
            "its weights)")
    assert [step for step, _ in _losses(run)] == [1, 2, 3, 4]  # nothing trained or logged

    rescheduled = ("train.max_steps=6", "train.lr=0.006")
    train(_experiment(tmp_path, *rescheduled, "train.resume=reschedule"), run, corpus)
    # the metrics' lr is the one the next step takes: the new schedule's, from its peak lr
    logged = {m["step"]: m["lr"] for m in read_metrics(run)}
    assert [logged[step] for step in (5, 6)] == pytest.approx(
        [0.006 * lr_factor(step, 2, 6, 0.1) for step in (5, 6)], rel=1e-12)
    # the new checkpoints hold the new schedule: a plain resume of them changes nothing
    train(_experiment(tmp_path, *rescheduled), run, corpus)
