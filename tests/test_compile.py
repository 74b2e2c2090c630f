"""train.compile: the model under torch.compile keeps the document mask, exact resume and its
checkpoints' format."""

import pytest
import torch
from conftest import tiny_experiment_file
from test_model import build

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from trainer.config import load_experiment
from trainer.data import PackedBatches
from trainer.determinism import deterministic_kernels
from trainer.engine import data_options, model_for_corpus, train
from trainer.model import GPT
from trainer.model.config import ModelConfig, model_config_from_dict
from trainer.run_dir import read_metrics


class Killed(Exception):
    pass


# the engine's tiny model, batch shape and (on CPU) deterministic mode: the standalone comparison
# compiles the very graphs the engine's run compiles, so inductor's cache compiles them once
ENGINE_RUN = ["train.compile=true", "model.pos=rope"]


# learned: a graph of its own, compiled cold in a minute or more on 2 cores
@pytest.mark.parametrize("pos", ["rope", pytest.param("learned", marks=pytest.mark.slow)])
def test_compiled_logits_and_gradients_equal_eager_with_packed_documents(train_corpus,
                                                                          tmp_path, pos):
    cfg = load_experiment(tiny_experiment_file(tmp_path), [*ENGINE_RUN, f"model.pos={pos}"])
    batch = next(iter(PackedBatches(train_corpus, data_options(cfg.train))))
    assert batch["doc_ids"].max() > batch["doc_ids"].min()  # documents packed in the window
    config = model_for_corpus(cfg.model, cfg.train, read_manifest(train_corpus))
    inputs = batch["input_ids"], batch["position_ids"], batch["doc_ids"]
    eager, want = assert_compiled_equals_eager(config, inputs)
    # the batch puts the document mask to work: without it the logits differ
    assert (eager(batch["input_ids"], batch["position_ids"]) - want).abs().max() > 1e-3


def assert_compiled_equals_eager(config: ModelConfig, inputs: tuple[torch.Tensor, ...]
                                 ) -> tuple[GPT, torch.Tensor]:
    """A fresh model (seed 0) and its compiled twin give the same logits and gradients (within
    1e-5); returns the eager model, its gradients set, and its logits."""
    torch.manual_seed(0)
    eager = GPT(config).train()
    compiled = GPT(config).train()
    compiled.load_state_dict(eager.state_dict())
    compiled.compile()
    want = eager(*inputs)
    with deterministic_kernels(True):  # as the engine runs a compiled model on CPU
        got = compiled(*inputs)
        assert (got - want).abs().max() < 1e-5
        want.square().mean().backward()
        got.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        assert (q.grad - p.grad).abs().max() < 1e-5, name
    return eager, want


def test_compiled_learned_positions_refuse_positions_beyond_ctx():
    # the check compiled alone: the model's whole graph would cost a compilation of its own
    positional = build("learned", ctx=16).positional
    embed = torch.compile(positional.embed)
    x = torch.zeros(1, 8, 64)
    inside = torch.arange(8, 16)[None]
    assert torch.equal(embed(x, inside), positional.embed(x, inside))
    with pytest.raises(RuntimeError, match=r"position ids outside \[0, ctx=16\)"):
        embed(x, torch.arange(12, 20)[None])


def test_compile_key_must_be_a_boolean(tmp_path):
    assert load_experiment(tiny_experiment_file(tmp_path), ["train.compile=true"]).train.compile
    with pytest.raises(ConfigError, match="train.compile"):
        load_experiment(tiny_experiment_file(tmp_path), ["train.compile=sometimes"])


def test_compile_with_zero_stage_3_is_refused_naming_both_keys(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_experiment(tiny_experiment_file(tmp_path), ["train.compile=true",
                                                         "train.zero_stage=3"])
    assert str(caught.value) == (
        "command line: train.zero_stage=3: cannot run with compile true (the compiled graph "
        "cannot follow its partitioned parameters): use zero_stage 0-2 or compile false")
    assert load_experiment(tiny_experiment_file(tmp_path), ["train.compile=true",
                                                            "train.zero_stage=2"]).train.compile


def straight_and_resumed(overrides: list[str], corpus, tmp_path) -> tuple[list, list]:
    """(step, loss, grad_norm) of each logged step of a run trained straight through, and of the
    same run killed at step 3 and resumed from its checkpoint at step 2."""
    def experiment():
        return load_experiment(tiny_experiment_file(tmp_path),
                               [*overrides, "train.ckpt_every=2"])

    def kill_at_3(step, _):
        if step == 3:
            raise Killed()

    train(experiment(), tmp_path / "straight", corpus)
    with pytest.raises(Killed):
        train(experiment(), tmp_path / "resumed", corpus, on_step=kill_at_3)
    assert not torch.are_deterministic_algorithms_enabled()  # ended with the failed run too
    train(experiment(), tmp_path / "resumed", corpus)
    return tuple([(m["step"], m["loss"], m["grad_norm"]) for m in read_metrics(tmp_path / name)]
                 for name in ("straight", "resumed"))


def test_compiled_run_resumes_exactly_and_saves_plain_weights(train_corpus, tmp_path):
    straight, resumed = straight_and_resumed([*ENGINE_RUN, "train.max_steps=5"], train_corpus,
                                             tmp_path)
    assert len(straight) == 5 and resumed == straight
    assert not torch.are_deterministic_algorithms_enabled()  # the mode ended with the run
    # the checkpoint is an eager model's: same keys, loads strictly, gives the same weights
    saved = torch.load(tmp_path / "resumed/checkpoints/step-000005/weights.pt")
    again = torch.load(tmp_path / "straight/checkpoints/step-000005/weights.pt")
    eager = GPT(model_config_from_dict(saved["model_config"]))
    eager.load_state_dict(saved["state_dict"])
    for key, value in again["state_dict"].items():
        assert torch.equal(value, saved["state_dict"][key]), key


def deterministic_state() -> tuple[bool, bool, bool]:
    return (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)


@pytest.fixture
def strict_determinism():
    """torch's deterministic mode on, refusing ops (warn_only False), NaN-filling empties; the
    process's own state back afterwards."""
    before = deterministic_state()
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.utils.deterministic.fill_uninitialized_memory = before[2]


def test_deterministic_kernels_restore_the_state_before_when_the_body_fails(
        strict_determinism):
    with pytest.raises(Killed):
        with deterministic_kernels(True):
            assert deterministic_state() == (True, True, False)
            raise Killed()
    assert deterministic_state() == (True, False, True)
    with deterministic_kernels(False):
        assert deterministic_state() == (True, False, True)
    assert deterministic_state() == (True, False, True)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])  # 3 is refused (above)
def test_compiled_run_under_zero_stage_resumes_exactly(train_corpus, tmp_path, stage):
    straight, resumed = straight_and_resumed(
        ["train.compile=true", "train.max_steps=4", f"train.zero_stage={stage}", "model.pos=rope",
         "model.dropout=0.1"],  # compiled dropout's RNG resumes too
        train_corpus, tmp_path)
    assert len(straight) == 4 and resumed == straight
    assert straight[-1][1] < straight[0][1]
