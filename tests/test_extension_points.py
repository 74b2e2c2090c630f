"""Every extension point at once, from fixtures alone: a fixed-vocabulary family, a positional
encoding with its own option, a block option and an evaluation task, defined and registered here
and nowhere else (but the task's options, a row count, shared with test_plugins), run from an
experiment file through gen, train, a resume from a checkpoint saved before the block option
existed, and eval; and the block option switched on, through train and eval."""

import dataclasses
import itertools
import json
import math
import operator
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from corpus_gen.core import registry as families
from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import Record
from corpus_gen.core.registry import Family, Layout
from corpus_gen.core.shards import read_shard
from corpus_gen.core.vocabulary import Vocabulary
from tests.test_plugins import RowsOptions, two_step_experiment
from trainer.checkpoint import load_weights
from trainer.config import Experiment
from trainer.engine import train
from trainer.errors import TrainError
from trainer.eval import registry as tasks
from trainer.eval.eval_sets import read_eval_set
from trainer.eval.generation import generate
from trainer.eval.registry import EvalContext, Task
from trainer.eval.runner import evaluate, load_model
from trainer.model import registry as model_registry
from trainer.model.config import ModelConfig
from trainer.model.errors import require
from trainer.model.gpt import GPT, BlockHook
from trainer.model.positional import Positional
from trainer.model.registry import BlockOption, Encoding


# the family: "a + b = c" modulo `modulus`, each number one token, the question out of the loss
@dataclasses.dataclass
class ModSumConfig(CorpusConfig):
    items: int = 200
    modulus: int = 5


def _names(config: ModSumConfig) -> tuple[str, ...]:
    return ("<eos>", *map(str, range(config.modulus)), "+", "=")


def _pair(n: int, modulus: int) -> tuple[int, int]:
    return n % modulus, n // modulus % modulus


def _question(n: int, modulus: int) -> str:
    a, b = _pair(n, modulus)
    return f"{a} + {b} ="


def _answer(n: int, modulus: int) -> str:
    return str(sum(_pair(n, modulus)) % modulus)


def _records(config: ModSumConfig, start: int, stop: int):
    for n in range(start, stop):
        question = _question(n, config.modulus)
        yield Record(f"{question} {_answer(n, config.modulus)}", {"n": n},
                     ((0, len(question)),))


def _eval_sets(config: ModSumConfig):
    return {"modsum_test": lambda: ({"id": n, "prompt": _question(n, config.modulus),
                                     "answer": _answer(n, config.modulus)}
                                    for n in range(config.items, config.items + 20))}


MODSUM = Family("modsum", 1, ModSumConfig, lambda c: Layout(records=c.items), _records,
                _eval_sets, vocabulary=_names)


# the encoding: fixed sinusoids of the position, added to the token embeddings times `scale`
@dataclasses.dataclass
class ScaledSineOptions:
    scale: float = 1.0

    def validate(self, config: ModelConfig) -> None:
        require(0 < self.scale < math.inf, "scale", self.scale, "must be > 0 and finite")


class ScaledSine(Positional):
    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.scale = config.scaled_sine.scale
        self.freq = [10000.0 ** (-2 * i / config.d_model) for i in range(config.d_model // 2)]

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        angle = pos[..., None].float() * torch.tensor(self.freq, device=x.device)
        return x + self.scale * torch.cat((angle.sin(), angle.cos()), -1).to(x.dtype)


# the block option: a learned per-channel gate on each block's normed inputs, off by default
@dataclasses.dataclass
class GateOptions:
    start: float = 0.0  # the gate's initial value on every channel; 0: no gate

    def validate(self, config: ModelConfig) -> None:
        require(0 <= self.start < math.inf, "start", self.start,
                      "must be >= 0 and finite (0: off)")


class Gate(BlockHook):
    def __init__(self, config: ModelConfig, start: float):
        super().__init__()
        self.attn_gate = nn.Parameter(torch.full((config.d_model,), start))
        self.mlp_gate = nn.Parameter(torch.full((config.d_model,), start))

    def before_attention(self, x, pos, doc, cache, layer):
        return x * self.attn_gate

    def before_mlp(self, x, pos, doc, cache, layer):
        return x * self.mlp_gate


def gate(config: ModelConfig, layer: int) -> Gate | None:
    start = config.gate.start
    return Gate(config, start) if start else None


GATE = BlockOption("gate", f"{__name__}:gate", GateOptions)


# the task: greedy answers to the eval set's first `rows` questions, exact match
def _answers(context: EvalContext, options: RowsOptions) -> dict:
    fields = {"id": int, "prompt": str, "answer": str}
    rows = list(itertools.islice(read_eval_set(context.corpus_dir, "modsum_test", fields,
                                               "a modsum corpus"), options.rows))
    tokenizer = context.tokenizer
    outputs = generate(context.model, [tokenizer.encode(row["prompt"]) for row in rows], 1,
                       tokenizer.eos_id)
    predictions = [tokenizer.decode(ids) for ids in outputs]
    correct = sum(p == row["answer"] for p, row in zip(predictions, rows))
    return {"rows": len(rows), "ids": [row["id"] for row in rows], "predictions": predictions,
            "accuracy": correct / len(rows), "vocab_size": tokenizer.vocab_size}


@pytest.fixture
def plugins(monkeypatch):
    """The family, the encoding and the task registered as plug-in modules would register them;
    the block option is left for the test to register, as a later version would bring it. Every
    registry is this test's copy."""
    monkeypatch.setattr(families, "_FAMILIES", dict(families.families()))
    monkeypatch.setattr(tasks, "_TASKS", dict(tasks.tasks()))
    monkeypatch.setattr(model_registry, "_ENCODINGS", dict(model_registry.encodings()))
    monkeypatch.setattr(model_registry, "_BLOCK_OPTIONS", dict(model_registry.block_options()))
    families.register(MODSUM)
    tasks.register(Task("modsum_answers", RowsOptions, _answers))
    model_registry.register_encoding(Encoding("scaled_sine", f"{__name__}:ScaledSine",
                                              ScaledSineOptions))


# the first 12 rows of modsum_test, n = 200..211: (n % 5 + n // 5 % 5) % 5
ANSWERS = ["0", "1", "2", "3", "4", "1", "2", "3", "4", "0", "2", "3"]


def _greedy(model: GPT, tokenizer: Vocabulary, prompts: list[str]) -> list[str]:
    """The model's most likely next token after each prompt, read from its logits here rather
    than through the task's generate: what the task should report ("" for end of text)."""
    answers = []
    with torch.no_grad():
        for prompt in prompts:
            ids = [tokenizer.names.index(name) for name in prompt.split()]
            best = int(model(torch.tensor([ids]))[0, -1].argmax())
            answers.append("" if best == tokenizer.eos_id else tokenizer.names[best])
    return answers


def _evaluate(run: Path, corpus: Path, tokenizer: Vocabulary) -> tuple[dict, GPT]:
    """The toy task's result on `run`'s latest checkpoint, checked against what the loaded
    model answers and the eval set asks; with that model."""
    result = evaluate(run)["modsum_answers"]
    assert json.loads((run / "eval" / "modsum_answers.json").read_text()) == result
    model, meta = load_model(run, torch.device("cpu"))
    rows = [json.loads(line) for line in (corpus / "eval" / "modsum_test.jsonl").open()][:12]
    assert [row["answer"] for row in rows] == ANSWERS
    assert (result["step"], result["rows"], result["ids"], result["vocab_size"]) == (
        meta["step"], 12, list(range(200, 212)), len(tokenizer.names))
    assert result["predictions"] == _greedy(model, tokenizer, [row["prompt"] for row in rows])
    assert result["accuracy"] == sum(map(operator.eq, result["predictions"], ANSWERS)) / 12
    return result, model


def _experiment(tmp_path: Path, *overrides: str) -> Experiment:
    return two_step_experiment(tmp_path, "corpus:\n  family: modsum\n  items: 200\n"
                               "model:\n  n_layer: 1\n  n_head: 2\n  d_model: 16\n"
                               "  pos: scaled_sine\n  scaled_sine: {scale: 0.5}\n"
                               "eval:\n  tasks: [modsum_answers]\n  modsum_answers: {rows: 12}\n",
                               overrides)


def test_plugged_in_family_encoding_block_option_and_task_run_gen_train_resume_eval(
        plugins, tmp_path, capsys):
    experiment = _experiment(tmp_path)
    assert (experiment.model.pos, experiment.model.scaled_sine.scale) == ("scaled_sine", 0.5)
    assert not hasattr(experiment.model, "gate")  # the block option does not exist yet
    corpus, run = tmp_path / "corpus", tmp_path / "run"
    manifest = generate_corpus(experiment.corpus, corpus, progress=False, log=lambda *_: None)
    names = _names(experiment.corpus)
    tokenizer = load_tokenizer(corpus, manifest)
    assert isinstance(tokenizer, Vocabulary) and tokenizer.names == names
    assert (manifest["records"], manifest["tokenizer"]["vocab_size"]) == (200, len(names))
    first = next(read_shard(corpus / manifest["shards"][0]["name"]))  # "0 + 0 = 0"
    assert (first["ids"].tolist(), first["mask"].tolist()) == ([1, 6, 1, 7, 1], [0, 0, 0, 0, 1])
    train(experiment, run, corpus)
    saved = json.loads((run / "checkpoints" / "step-000002" / "meta.json").read_text())
    assert "gate" not in saved["model_config"]  # saved before the option existed

    model_registry.register_block_option(GATE)
    model, _ = load_model(run, torch.device("cpu"))  # the old checkpoint loads, gate off
    assert model.config.gate.start == 0.0 and not any("gate" in k for k in model.state_dict())
    # the option switched on would need weights the checkpoint lacks: refused, by its key
    with pytest.raises(TrainError, match=r"step-000002: checkpoint has model\.gate\.start=0\.0 "
                                         r"but the config says 0\.5"):
        train(_experiment(tmp_path, "model.gate.start=0.5"), run, corpus)
    # so is another value of the encoding's option, which changes what the weights compute
    with pytest.raises(TrainError, match=r"checkpoint has model\.scaled_sine\.scale=0\.5 "
                                         r"but the config says 2\.0"):
        train(_experiment(tmp_path, "model.scaled_sine.scale=2"), run, corpus)
    capsys.readouterr()
    resumed = _experiment(tmp_path, "train.max_steps=4", "train.resume=reschedule")
    assert resumed.model.gate.start == 0.0
    train(resumed, run, corpus)
    assert f"resumed from {run / 'checkpoints' / 'step-000002'} (step 2 of 4)" in \
        capsys.readouterr().out

    result, model = _evaluate(run, corpus, tokenizer)
    # the answers are checked against the loaded model's own in _evaluate: four steps learn no
    # sums, and which token a barely trained model favours is a near-tie CPUs may break apart
    assert result["step"] == 4
    assert (model.positional.scale, model.config.gate.start) == (0.5, 0.0)


def test_the_block_option_switched_on_trains_its_gates_and_evaluates(plugins, tmp_path):
    model_registry.register_block_option(GATE)
    experiment = _experiment(tmp_path, "model.gate.start=0.5")
    corpus, run = tmp_path / "corpus", tmp_path / "run"
    manifest = generate_corpus(experiment.corpus, corpus, progress=False, log=lambda *_: None)
    train(experiment, run, corpus)

    saved = load_weights(run / "checkpoints" / "step-000002" / "weights.pt")
    assert saved["model_config"]["gate"] == {"start": 0.5}
    gates = {k: v for k, v in saved["state_dict"].items() if "gate" in k}
    assert sorted(gates) == ["blocks.0.hooks.gate.attn_gate", "blocks.0.hooks.gate.mlp_gate"]
    # trained from 0.5: every channel moved, by two of Adam's steps of about lr (1e-3)
    for name, value in gates.items():
        moved = (value - 0.5).abs()
        assert value.shape == (16,) and (moved > 0).all() and (moved < 5e-3).all(), name

    result, model = _evaluate(run, corpus, load_tokenizer(corpus, manifest))
    assert result["step"] == 2
    # the evaluated model runs the trained gates: shut, they change its logits
    prompt = torch.tensor([[1, 6, 1, 7]])  # "0 + 0 ="
    with torch.no_grad():
        gated = model(prompt)
        for name, saved_gate in gates.items():
            assert torch.equal(model.get_parameter(name), saved_gate), name
            model.get_parameter(name).zero_()
        assert not torch.allclose(model(prompt), gated)


def test_the_plugged_in_options_are_validated_under_their_groups(plugins, tmp_path):
    model_registry.register_block_option(GATE)
    with pytest.raises(ConfigError, match=r"^command line: model\.scaled_sine\.scale=0\.0: "
                                          r"must be > 0"):
        _experiment(tmp_path, "model.scaled_sine.scale=0")
    with pytest.raises(ConfigError, match=r"^command line: model\.gate\.start=-1\.0: must be >= 0"):
        _experiment(tmp_path, "model.gate.start=-1")
    with pytest.raises(ConfigError) as caught:
        _experiment(tmp_path, "model.gate.stop=1")
    assert caught.value.key == "model.gate.stop" and "unknown key; known: start" in \
        caught.value.reason
    # the fixed vocabulary has no tokenizer to set: refused when the experiment is read, so a
    # sweep or submit stops before any job starts
    with pytest.raises(ConfigError, match=r": corpus\.tokenizer\.vocab_size=500: family modsum "
                                          r"has a fixed vocabulary"):
        _experiment(tmp_path, "corpus.tokenizer.vocab_size=500")
