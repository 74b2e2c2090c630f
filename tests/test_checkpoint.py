"""Checkpoints: nothing loaded can run code, only finite state is saved, keep_last keeps this
run's newest, and a full disk leaves the last good checkpoint in place."""

import json
import re
import resource
import shutil
import signal
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from conftest import tiny_experiment_file

from trainer import checkpoint
from trainer.config import TrainConfig, load_experiment
from trainer.engine import ds_config, train
from trainer.errors import TrainError
from trainer.model import GPT, ModelConfig
from trainer.model.config import model_config_from_dict
from trainer.run_dir import read_metrics

NAN = float("nan")
# a run saved before the encodings owned their options (flat relative_buckets=8,
# relative_max_distance=32 in its meta.json): tests/golden/legacy_run/README.md
LEGACY_CHECKPOINT = Path(__file__).parent / "golden/legacy_run/checkpoints/step-000004"


@pytest.fixture(scope="module")
def corpus(train_corpus):
    return train_corpus


def _experiment(tmp_path, *overrides):
    return load_experiment(tiny_experiment_file(tmp_path), list(overrides))


@pytest.fixture(scope="module")
def zero1_run(corpus, tmp_path_factory):
    """A ZeRO-1 run with one checkpoint, step 2: DeepSpeed writes model and optimizer files."""
    tmp = tmp_path_factory.mktemp("zero1")
    train(_experiment(tmp, "train.zero_stage=1", "train.max_steps=2", "train.ckpt_every=2"),
          tmp / "run", corpus)
    return tmp / "run"


def _engine(zero_stage: int = 0):
    """A tiny DeepSpeed engine after one optimizer step, so that the optimizer has moments."""
    import deepspeed

    from trainer.distributed import setup

    setup()
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=50, ctx=8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer,
        config=ds_config(TrainConfig(micro_batch=2, zero_stage=zero_stage)))
    engine.backward(engine(torch.randint(0, 50, (2, 8))).mean())
    engine.step()
    return engine


class Position:
    """A per-rank part standing in for the data loader: its state is what it was given."""

    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state

    def load_state_dict(self, state: dict) -> None:
        self.state = state


def _state(engine, step: int, data: dict | None = None) -> checkpoint.TrainState:
    return checkpoint.TrainState(engine=engine, data=Position(data or {}), step=step,
                                 meta={"model_config": asdict(engine.module.config),
                                       "tokenizer_sha256": "0" * 64, "run_id": "this-run"})


class Planted:
    """Unpickling this opens (creates) `marker`: stands for any code a pickle could run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("name", ["mp_rank_00_model_states.pt",
                                  "zero_pp_rank_0_mp_rank_00_optim_states.pt", "rng-rank0.pt",
                                  "weights.pt"])
def test_a_pickle_planted_in_any_checkpoint_file_stops_resume_before_it_runs(
        corpus, zero1_run, tmp_path, name):
    run = tmp_path / "run"
    shutil.copytree(zero1_run, run)
    marker = tmp_path / "marker"
    torch.save({"planted": Planted(marker)}, run / "checkpoints/step-000002" / name)
    with pytest.raises(TrainError, match=rf"step-000002/{re.escape(name)}: holds io\.open, "
                                         "which loading could run as code"):
        train(_experiment(tmp_path, "train.zero_stage=1", "train.max_steps=2"), run, corpus)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["mp_rank_00_model_states.pt",
                                  "zero_pp_rank_0_mp_rank_00_optim_states.pt", "rng-rank0.pt"])
def test_each_file_resume_reads_is_loaded_weights_only_even_unscreened(
        corpus, zero1_run, tmp_path, monkeypatch, name):
    # without the screening of the whole directory, DeepSpeed's checkpoint engine and the RNG
    # load must refuse the pickle themselves
    monkeypatch.setattr(checkpoint, "refuse_unsafe", lambda *_: None)
    run = tmp_path / "run"
    shutil.copytree(zero1_run, run)
    marker = tmp_path / "marker"
    torch.save({"planted": Planted(marker)}, run / "checkpoints/step-000002" / name)
    with pytest.raises(TrainError, match=rf"{re.escape(name)}: holds objects other than tensors"):
        train(_experiment(tmp_path, "train.zero_stage=1", "train.max_steps=2"), run, corpus)
    assert not marker.exists()


def test_load_weights_refuses_a_planted_pickle_and_reads_a_real_file(zero1_run, tmp_path):
    weights = zero1_run / "checkpoints/step-000002/weights.pt"
    payload = checkpoint.load_weights(weights)
    assert payload["model_config"]["n_layer"] == 2
    assert payload["state_dict"]["lm_head.weight"].shape == (600, 32)
    marker = tmp_path / "marker"
    planted = tmp_path / "weights.pt"
    torch.save({"model_config": payload["model_config"], "state_dict": Planted(marker)}, planted)
    with pytest.raises(TrainError, match=r"weights\.pt: holds objects other than tensors"):
        checkpoint.load_weights(planted)
    assert not marker.exists()


def test_load_weights_refuses_non_finite_weights(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"model_config": {}, "state_dict": {"a": torch.tensor([1.0, NAN]),
                                                   "b": torch.ones(2),
                                                   "c": torch.tensor([float("inf")])}}, path)
    with pytest.raises(TrainError, match=r"weights\.pt: holds non-finite weights \(2 of 3 "
                                         r"tensors\); it cannot be evaluated"):
        checkpoint.load_weights(path)


def _fake_meta(run_id: str, step: int) -> dict:
    return {"run_id": run_id, "step": step, "model_config": {}, "tokenizer_sha256": "0" * 64}


def _fake_checkpoint(checkpoints: Path, step: int, run_id: str) -> Path:
    path = checkpoints / checkpoint.tag(step)
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps(_fake_meta(run_id, step)))
    return path


def test_keep_last_keeps_this_runs_newest_and_leaves_other_runs_alone(tmp_path):
    engine = _engine()
    checkpoints = tmp_path / "checkpoints"
    others = [_fake_checkpoint(checkpoints, step, "another-run") for step in (50, 60)]
    unreadable = checkpoints / "step-000070"
    unreadable.mkdir()  # no meta.json: nobody's to remove
    for step in range(1, 5):
        saved = checkpoint.save(_state(engine, step, {"batch": step}), checkpoints, keep_last=2)
        assert saved == checkpoints / checkpoint.tag(step) and saved.is_dir()
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == ["latest", "step-000003", "step-000004", "step-000050", "step-000060",
                     "step-000070"]
    assert (checkpoints / "latest").read_text() == "step-000004"
    assert [checkpoint.read_meta(p) for p in others] == [
        _fake_meta("another-run", 50), _fake_meta("another-run", 60)]


def test_keep_last_orders_checkpoints_by_step_not_by_name(tmp_path):
    engine = _engine()
    checkpoints = tmp_path / "checkpoints"
    for step in (999998, 999999):
        _fake_checkpoint(checkpoints, step, "this-run")
    checkpoint.save(_state(engine, 1000000), checkpoints, keep_last=2)
    # as text, step-1000000 sorts first: pruning by name would delete the save just made
    assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-1000000", "step-999999"]
    assert (checkpoints / "latest").read_text() == "step-1000000"


def _entries(checkpoints: Path) -> list[str]:
    """`latest` and the checkpoint directories, finished or partial (DeepSpeed also copies its
    recovery scripts into the checkpoints directory under ZeRO)."""
    return sorted(p.name for p in checkpoints.iterdir() if not p.name.endswith(".py"))


def _all_weights_finite(checkpoints: Path) -> bool:
    return all(torch.isfinite(t).all() for path in checkpoints.glob("step-*/weights.pt")
               for t in torch.load(path, weights_only=True)["state_dict"].values())


def test_training_stops_rather_than_save_non_finite_weights(corpus, tmp_path, monkeypatch):
    real = checkpoint.save

    def poisoning_save(state, *args):
        if state.step == 4:  # the loss of this step was finite; the weights are not any more
            with torch.no_grad():
                next(state.engine.module.parameters())[0, 0] = NAN
        return real(state, *args)

    monkeypatch.setattr(checkpoint, "save", poisoning_save)
    run = tmp_path / "run"
    with pytest.raises(TrainError, match=r"^weights or optimizer state became non-finite by "
                                         r"step 4; not saved \(last good checkpoint: "
                                         r".*/checkpoints/step-000002\)$"):
        train(_experiment(tmp_path, "train.max_steps=6", "train.ckpt_every=2"), run, corpus)
    checkpoints = run / "checkpoints"
    assert _entries(checkpoints) == ["latest", "step-000002"]
    assert (checkpoints / "latest").read_text() == "step-000002"
    assert _all_weights_finite(checkpoints)


@pytest.mark.parametrize("zero_stage, poison", [
    (0, lambda e: e.optimizer.state[next(e.module.parameters())]["exp_avg"]),
    (1, lambda e: e.optimizer.single_partition_of_fp32_groups[0]),
    (3, lambda e: next(e.module.parameters()).ds_tensor),
], ids=["adam-moment", "zero1-fp32-partition", "zero3-shard"])
def test_save_refuses_non_finite_optimizer_state_and_partitions(tmp_path, zero_stage, poison):
    engine = _engine(zero_stage)
    checkpoints = tmp_path / "checkpoints"
    checkpoint.save(_state(engine, 1), checkpoints, keep_last=2)
    with torch.no_grad():
        poison(engine).view(-1)[0] = NAN
    with pytest.raises(TrainError, match=r"non-finite by step 2; not saved \(last good "
                                         r"checkpoint: .*step-000001\)"):
        checkpoint.save(_state(engine, 2), checkpoints, keep_last=2)
    assert _entries(checkpoints) == ["latest", "step-000001"]
    assert _all_weights_finite(checkpoints)


def test_load_refuses_a_checkpoint_with_non_finite_weights(tmp_path):
    engine = _engine()
    path = checkpoint.save(_state(engine, 1), tmp_path / "checkpoints", keep_last=2)
    states = path / "mp_rank_00_model_states.pt"
    saved = torch.load(states, weights_only=True)
    next(iter(saved["module"].values())).view(-1)[0] = NAN
    torch.save(saved, states)
    with pytest.raises(TrainError, match=r"step-000001: holds non-finite weights or optimizer "
                                         "state; refusing to resume from it"):
        checkpoint.load(_state(engine, 0), path)


def test_load_restores_every_part_from_the_file_its_name_gives(tmp_path):
    engine = _engine()
    torch.manual_seed(3)
    saved = _state(engine, 7, {"epoch": 1, "batch": 5})
    path = checkpoint.save(saved, tmp_path / "checkpoints", keep_last=2)
    # plain data as JSON, a state holding tensors through torch.save; the step in meta.json
    assert json.loads((path / "data-rank0.json").read_text()) == {"epoch": 1, "batch": 5}
    assert (path / "rng-rank0.pt").is_file()
    assert checkpoint.read_meta(path) == {**saved.meta, "step": 7}
    draws = torch.rand(3)
    restored = _state(engine, 0)
    restored.meta["run_id"] = "a-new-run"
    checkpoint.load(restored, path)
    assert restored.step == 7 and restored.meta["run_id"] == "this-run"
    assert restored.data.state_dict() == {"epoch": 1, "batch": 5}
    assert torch.equal(torch.rand(3), draws)  # the generators continue where the save was
    (path / "data-rank0.json").unlink()
    with pytest.raises(TrainError, match=r"step-000007: no data state for rank 0; was it saved "
                                         "with another number of processes"):
        checkpoint.load(_state(engine, 0), path)


def test_a_full_disk_during_a_save_keeps_the_last_good_checkpoint(corpus, tmp_path):
    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.getsignal(signal.SIGXFSZ)

    def fill_disk(step, _):
        if step == 2:
            # files may grow to half DeepSpeed's model file: the next save cannot be written
            size = (checkpoints / "step-000002/mp_rank_00_model_states.pt").stat().st_size
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
            resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, limits[1]))

    experiment = _experiment(tmp_path, "train.max_steps=4", "train.ckpt_every=2")
    try:
        with pytest.raises(TrainError) as caught:
            train(experiment, run, corpus, on_step=fill_disk)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    message = str(caught.value)
    assert "\n" not in message
    assert re.fullmatch(r".*/checkpoints/\.partial-step-000004: saving the checkpoint failed "
                        r"\(.+\); removed it, the last good checkpoint is intact: "
                        r".*/checkpoints/step-000002", message), message
    assert _entries(checkpoints) == ["latest", "step-000002"]
    assert (checkpoints / "latest").read_text() == "step-000002"
    train(experiment, run, corpus)  # with room again, the run resumes and finishes
    assert (checkpoints / "latest").read_text() == "step-000004"


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(m["step"], m["loss"]) for m in read_metrics(run)]


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:len(file.read_bytes()) // 2])


DAMAGES = {  # how a file of the newest checkpoint is damaged -> the start of what is said
    "meta.json torn": (lambda p: (p / "meta.json").write_text('{"step": 4, "model'),
                       "meta.json: not JSON (Unterminated string"),
    "meta.json not a mapping": (lambda p: (p / "meta.json").write_text("[4]"),
                                "meta.json: not a JSON object"),
    "meta.json without its step": (
        lambda p: (p / "meta.json").write_text(json.dumps(
            {k: v for k, v in checkpoint.read_meta(p).items() if k != "step"})),
        "meta.json: not a checkpoint's meta.json (no step of the right type)"),
    "weights.pt torn": (lambda p: _truncate(p / "weights.pt"),
                        "weights.pt: not a file torch.save wrote"),
    "model states torn": (lambda p: _truncate(p / "mp_rank_00_model_states.pt"),
                          "mp_rank_00_model_states.pt: not a file torch.save wrote"),
    "weights.pt missing": (lambda p: (p / "weights.pt").unlink(), "weights.pt: missing"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_resume_passes_over_a_damaged_latest_checkpoint_to_the_newest_intact_one(
        corpus, tmp_path, capsys, damage):
    straight, run = tmp_path / "straight", tmp_path / "run"
    args = ("train.max_steps=4", "train.ckpt_every=2")
    train(_experiment(tmp_path, *args), straight, corpus)
    shutil.copytree(straight, run)
    damaged = run / "checkpoints" / "step-000004"
    harm, said = DAMAGES[damage]
    harm(damaged)
    capsys.readouterr()
    train(_experiment(tmp_path, *args), run, corpus)
    out = capsys.readouterr().out.splitlines()
    skipped = [line for line in out if "skipped" in line]
    assert len(skipped) == 1 and skipped[0].startswith(
        f"train  | skipped a damaged checkpoint: {damaged}/{said}"), out
    assert f"train  | resumed from {run / 'checkpoints' / 'step-000002'} (step 2 of 4)" in out
    # steps 3 and 4 trained again, as the uninterrupted run did; step 4 saved anew
    assert _losses(run) == _losses(straight)
    assert checkpoint.damage(damaged) is None


def test_resume_with_no_intact_checkpoint_is_one_line_and_touches_nothing(corpus, tmp_path):
    run = tmp_path / "run"
    train(_experiment(tmp_path, "train.max_steps=2", "train.ckpt_every=2"), run, corpus)
    meta = run / "checkpoints/step-000002/meta.json"
    meta.write_text("")
    with pytest.raises(TrainError) as caught:
        train(_experiment(tmp_path, "train.max_steps=2", "train.ckpt_every=2"), run, corpus)
    assert str(caught.value) == (
        f"{meta}: not JSON (Expecting value: line 1 column 1 (char 0)); no older "
        f"checkpoint in {run / 'checkpoints'} is intact either (resume=overwrite deletes them "
        "and starts over)")
    assert meta.read_text() == "" and [s for s, _ in _losses(run)] == [1, 2]


def test_eval_of_a_checkpoint_with_a_damaged_meta_is_one_line_naming_it(
        corpus, tmp_path, capsys):
    from launch.cli import main

    run = tmp_path / "run"
    train(_experiment(tmp_path, "train.max_steps=2", "train.ckpt_every=2"), run, corpus)
    meta = run / "checkpoints/step-000002/meta.json"
    meta.write_text("{")
    capsys.readouterr()
    assert main(["eval", str(run), "--task", "qa"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"physlm eval: error: {meta}: not JSON (Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1))")


def _legacy_model(**changes) -> dict:
    """The legacy run's model in today's layout, as a run's meta records it, with `changes`."""
    config = {"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 400, "ctx": 32,
              "pos": "relative", "relative": {"buckets": 8, "max_distance": 32}}
    return asdict(model_config_from_dict(config | changes))


def test_a_checkpoint_saved_before_encodings_owned_their_options_fits_the_same_model():
    meta = checkpoint.read_meta(LEGACY_CHECKPOINT)
    sha = meta["tokenizer_sha256"]
    assert checkpoint.incompatibility(meta, _legacy_model(), sha) is None
    # how the model runs is no part of what its weights compute
    assert checkpoint.incompatibility(meta, _legacy_model(attention="math", dropout=0.1),
                                      sha) is None
    assert checkpoint.incompatibility(meta, _legacy_model(), "0" * 64) == (
        "tokenizer", sha, "0" * 64)
    checkpoint.check_compatible(LEGACY_CHECKPOINT, _legacy_model(), sha)


@pytest.mark.parametrize("changes, key, saved, wanted", [
    ({"relative": {"buckets": 16, "max_distance": 32}}, "model.relative.buckets", 8, 16),
    ({"relative": {"buckets": 8, "max_distance": 64}}, "model.relative.max_distance", 32, 64),
    ({"pos": "rope"}, "model.pos", "relative", "rope"),
    ({"d_model": 32}, "model.d_model", 16, 32),
])
def test_a_checkpoint_saved_before_encodings_owned_their_options_refuses_another_shape(
        changes, key, saved, wanted):
    meta = checkpoint.read_meta(LEGACY_CHECKPOINT)
    model = _legacy_model(**changes)
    assert checkpoint.incompatibility(meta, model, meta["tokenizer_sha256"]) == (
        key, saved, wanted)
    with pytest.raises(TrainError) as caught:
        checkpoint.check_compatible(LEGACY_CHECKPOINT, model, meta["tokenizer_sha256"])
    assert str(caught.value) == (
        f"{LEGACY_CHECKPOINT}: checkpoint has {key}={saved!r} but the config says {wanted!r}; "
        "use another run directory or resume=overwrite")
