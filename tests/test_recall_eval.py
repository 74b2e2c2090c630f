"""The recall evaluation task on tiny corpora physlm gen writes: a model that knows the facts
scores 1.0 at loss 0, a relation-only one 1/D at ln D (the hallucination plateau), one that
knows only that an answer comes ln(R D); the training laws weight the accuracy; a real GPT
runs; damaged or foreign inputs are named."""

import json
import math
import shutil

import pytest
import torch

import trainer.eval.recall as recall
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import read_manifest
from tests.conftest import record_eval_set
from tests.integer_task_corpus import family_config
from tests.planted_answers import assert_registered_with_its_shipped_config
from tests.planted_lm import PlantedLM
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext
from trainer.model import GPT, ModelConfig

S, R, D = 8, 3, 8


class FactModel(PlantedLM):
    """After <sep> its logits are `answer(subject, relation, block)` (a dict: answer index ->
    logit; every other token -inf), reading the subject and relation tokens of the prompt;
    `block` is the relation's answer indices. Before <sep> flat."""

    def __init__(self, corpus, answer):
        names = json.loads((corpus / "vocab.json").read_text())
        self.ids = {name: int(i) for i, name in names.items()}
        super().__init__(len(self.ids))
        self.answer = answer

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        if context[-1] != self.ids["<sep>"]:
            return
        names = {self.ids[name]: name for name in self.ids}
        subject = next(int(names[t][1:]) for t in context if names[t].startswith("s"))
        relation = next(int(names[t][1:]) for t in context if names[t].startswith("r"))
        out.fill_(-math.inf)
        block = range(relation * D, relation * D + D)
        for index, logit in self.answer(subject, relation, block).items():
            out[self.ids[f"a{index}"]] = logit


def _corpus(tmp_path, *overrides: str):
    config = family_config("recall", f"subjects={S}", f"relations={R}",
                           f"answers_per_relation={D}", "noise_tokens=5", "seq_len=10",
                           "samples=4", *overrides)
    generate_corpus(config, tmp_path, progress=False, log=lambda *_: None)
    return tmp_path


def _table(corpus) -> list[list[int]]:
    return json.loads((corpus / "facts.json").read_text())["answers"]


def _context(model, corpus, tmp_path) -> EvalContext:
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    return EvalContext(model, tokenizer, corpus, tmp_path / "run", torch.device("cpu"))


@pytest.fixture(scope="module")
def distinct(tmp_path_factory):
    """Each relation's answers a permutation of its block (S = D): the relation-only loss is
    ln D exactly, and a fixed pick in the block is right for one subject of each relation."""
    return _corpus(tmp_path_factory.mktemp("distinct"), "distinct_answers=true")


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("zipf"), "subject_zipf=1.0")


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "recall", recall, recall.RecallOptions)


def test_a_model_that_knows_the_facts_scores_one(distinct, tmp_path):
    table = _table(distinct)
    model = FactModel(distinct, lambda s, r, block: {table[s][r]: 0.0})
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions())
    assert (results["accuracy"], results["n"], results["facts_stored"]) == (1.0, 24, 24)
    assert results["loss"] == results["weighted_loss"] == 0.0
    assert results["in_block"] == 1.0
    assert results["block_mass"] == pytest.approx(1) == results["weighted_accuracy"]
    assert results["references"] == pytest.approx(
        {"ln_D": math.log(D), "relation_only_loss": math.log(D), "ln_answers": math.log(R * D)},
        abs=1e-6)
    assert results["gap_to_ln_D"] == pytest.approx(-math.log(D), abs=1e-6)
    assert results["per_relation"] == {str(r): {"accuracy": 1.0, "n": 8, "loss": 0.0,
                                                "in_block": 1.0} for r in range(R)}
    recall.plot(results, tmp_path / "recall.png")
    assert (tmp_path / "recall.png").stat().st_size > 0


def test_a_relation_only_model_scores_one_in_d_at_ln_d(distinct, tmp_path):
    """Flat over the relation's block: ln D; its greedy pick (the block's first answer) is right
    for the one subject of each relation whose answer that is."""
    model = FactModel(distinct, lambda s, r, block: dict.fromkeys(block, 0.0))
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions(batch_size=5))
    assert results["accuracy"] == pytest.approx(1 / D) and results["facts_stored"] == R
    assert results["loss"] == pytest.approx(math.log(D), abs=1e-6)
    assert results["gap_to_relation_only_loss"] == pytest.approx(0, abs=1e-6)
    assert results["in_block"] == 1.0 and results["block_mass"] == pytest.approx(1, abs=1e-6)
    assert all(entry["accuracy"] == 1 / D for entry in results["per_relation"].values())


def test_a_model_that_knows_only_that_an_answer_comes_scores_ln_rd(distinct, tmp_path):
    model = FactModel(distinct, lambda s, r, block: dict.fromkeys(range(R * D), 0.0))
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions())
    assert results["loss"] == pytest.approx(math.log(R * D), abs=1e-6)
    assert results["gap_to_ln_answers"] == pytest.approx(0, abs=1e-6)
    assert results["block_mass"] == pytest.approx(1 / R, abs=1e-6)
    assert results["in_block"] == pytest.approx(1 / R)  # the pick is always a0, relation 0's


def test_answers_from_another_relation_are_out_of_block(distinct, tmp_path):
    table = _table(distinct)
    model = FactModel(distinct, lambda s, r, block: {(table[s][r] + D) % (R * D): 0.0})
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions(max_rows=9))
    assert (results["n"], results["accuracy"], results["in_block"]) == (9, 0.0, 0.0)
    assert results["loss"] == math.inf and set(results["per_relation"]) == {"0", "1", "2"}


def test_the_training_laws_weight_the_accuracy(zipf, tmp_path):
    """Subject s drawn with P ~ 1/(s + 1): a model that knows subject 0's facts (and puts the
    most weight on a wrong answer of the block for the others) stores R of S R facts, which are
    1/H_S of the training draws."""
    table, facts = _table(zipf), json.loads((zipf / "facts.json").read_text())

    def answer(s: int, r: int, block: range) -> dict[int, float]:
        if s == 0:
            return {table[s][r]: 0.0}
        wrong = block[(table[s][r] - block[0] + 1) % D]
        return {**dict.fromkeys(block, 0.0), wrong: 1.0}

    results = recall.run(_context(FactModel(zipf, answer), zipf, tmp_path),
                         recall.RecallOptions())
    harmonic = sum(1 / (s + 1) for s in range(S))
    assert results["facts_stored"] == R and results["accuracy"] == pytest.approx(1 / S)
    assert results["weighted_accuracy"] == pytest.approx(1 / harmonic)
    miss = math.log(D - 1 + math.e)  # the right answer at logit 0 among D - 1, a wrong one at 1
    assert results["weighted_loss"] == pytest.approx((1 - 1 / harmonic) * miss, abs=1e-6)
    assert results["loss"] == pytest.approx((1 - 1 / S) * miss, abs=1e-6)
    # answers drawn independently: some subjects share one, so H(a | r) < ln D
    assert facts["relation_only_loss"] < facts["ln_D"] == pytest.approx(math.log(D), abs=1e-6)
    assert results["gap_to_relation_only_loss"] == pytest.approx(
        results["weighted_loss"] - facts["relation_only_loss"], abs=1e-6)


def test_a_real_gpt_runs_and_too_few_positions_are_named(distinct, tmp_path):
    vocab_size = len(json.loads((distinct / "vocab.json").read_text()))
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=vocab_size))
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions(batch_size=7))
    assert results["n"] == 24 and 0 <= results["accuracy"] <= 1
    assert 0 < results["block_mass"] < 1 and math.isfinite(results["loss"])
    assert sum(e["n"] for e in results["per_relation"].values()) == 24
    short = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=vocab_size,
                            pos="learned", ctx=8))
    with pytest.raises(TrainError, match="8 positions cannot hold the 10-token prompts"):
        recall.run(_context(short, distinct, tmp_path), recall.RecallOptions())


def test_answers_that_differ_from_the_fact_table_are_named(distinct, tmp_path):
    corpus = shutil.copytree(distinct, tmp_path / "corpus")
    path = corpus / "eval" / "recall_test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[3]["answer"] = [rows[3]["answer"][0] + 1]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    record_eval_set(corpus, "recall_test")
    model = FactModel(corpus, lambda s, r, block: {block[0]: 0.0})
    with pytest.raises(TrainError, match="answers differ from facts.json's"):
        recall.run(_context(model, corpus, tmp_path), recall.RecallOptions())


def test_a_corpus_without_facts_is_named(tmp_path):
    with pytest.raises(TrainError, match="facts.json: missing; the recall task needs a recall"):
        recall.read_facts(tmp_path)


def test_the_weights_are_renormalised_over_the_rows_evaluated(distinct, tmp_path):
    table = _table(distinct)
    model = FactModel(distinct, lambda s, r, block: {table[s][r]: 0.0})
    results = recall.run(_context(model, distinct, tmp_path), recall.RecallOptions(max_rows=9))
    assert results["weighted_accuracy"] == pytest.approx(1.0)


def test_the_relation_law_weights_the_accuracy(tmp_path):
    corpus = _corpus(tmp_path / "corpus", "distinct_answers=true", "relation_zipf=1.0")
    table = _table(corpus)

    def guess(s: int, r: int, block: int) -> dict[int, float]:  # right on relation 0 only
        return {table[s][r] if r == 0 else (table[s][r] + D) % (R * D): 0.0}

    results = recall.run(_context(FactModel(corpus, guess), corpus, tmp_path),
                         recall.RecallOptions())
    assert results["accuracy"] == pytest.approx(1 / 3)
    assert results["weighted_accuracy"] == pytest.approx(6 / 11)  # P(r) ~ 1, 1/2, 1/3
