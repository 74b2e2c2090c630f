"""The markov evaluation task on tiny corpora physlm gen writes: a planted model of the true
table scores the chain's own loss and learns the table exactly, one stuck at the unigram law
scores H(pi), a uniform one ln A, the add-beta model of fresh tables is the Bayes predictor; a
real GPT runs (learned positions cut the scored positions), damaged inputs are named."""

import json
import math

import numpy as np
import pytest
import torch

import trainer.eval.markov as markov
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import read_manifest
from corpus_gen.markov.references import add_beta_losses, stationary
from tests.conftest import record_eval_set
from tests.integer_task_corpus import family_config
from tests.planted_answers import assert_registered_with_its_shipped_config
from tests.planted_lm import PlantedLM
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext
from trainer.model import GPT, ModelConfig


class ChainModel(PlantedLM):
    """Predicts the symbol after a context (token ids, symbol a = id a + 1) with `law(symbols)`
    (A probabilities, or None: flat over the symbols); never <eos>."""

    def __init__(self, alphabet: int, law):
        super().__init__(alphabet + 1)
        self.law = law

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        probs = self.law([t - 1 for t in context])
        out[1:] = 0.0 if probs is None else torch.tensor(probs).log()
        out[0] = -math.inf


def _corpus(tmp_path, name: str, *overrides: str):
    config = family_config("markov", "samples=4", "seq_len=48", "eval_samples=80", *overrides)
    out = tmp_path / name
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out, config


def _context(model, corpus, tmp_path) -> EvalContext:
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    return EvalContext(model, tokenizer, corpus, tmp_path / "run", torch.device("cpu"))


def _table_model(table: np.ndarray, order: int) -> ChainModel:
    alphabet = table.shape[1]

    def law(symbols: list[int]) -> list[float] | None:
        if len(symbols) < order:
            return None
        return table[sum(s * alphabet ** (order - 1 - j)
                         for j, s in enumerate(symbols[-order:]))].tolist()
    return ChainModel(alphabet, law)


@pytest.fixture(scope="module")
def switching(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("markov"), "switching", "p=0.5", "q=0.8")


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("markov"), "fixed", "table=fixed", "order=2",
                   "alphabet=3")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("markov"), "fresh", "table=fresh", "order=1",
                   "initial=uniform", "beta=0.5", "reference_samples=2000")


def _references(corpus) -> dict:
    return json.loads((corpus / "references.json").read_text())


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "markov", markov, markov.MarkovOptions)


def test_the_true_table_scores_the_entropy_rate_and_is_learned_exactly(switching, tmp_path):
    corpus, _ = switching
    table = np.array(_references(corpus)["table"])
    results = markov.run(_context(_table_model(table, 1), corpus, tmp_path),
                         markov.MarkovOptions())
    rows = results["on_these_rows"]
    assert (results["n"], results["tokens"], results["positions"]) == (80, 80 * 47, [1, 47])
    assert results["loss"] == pytest.approx(rows["true_loss"]) == pytest.approx(
        rows["bayes_loss"])
    assert results["kl_to_bayes"] == pytest.approx(0, abs=1e-6)
    assert results["tv_to_bayes"] == pytest.approx(0, abs=1e-6)
    # 3760 tokens: the loss's standard error is about 0.004 nats
    assert abs(results["gap_to_entropy_rate"]) < 0.02
    assert results["references"]["entropy_rate"] == pytest.approx(0.6190, abs=1e-4)
    assert results["gap_to_unigram_entropy"] == pytest.approx(results["loss"] - 0.6663, abs=1e-4)
    assert results["table"]["max_abs_error"] == pytest.approx(0, abs=1e-6)
    assert np.allclose(results["table"]["learned"], [[0.5, 0.5], [0.8, 0.2]], atol=1e-6)
    assert sum(results["table"]["count"]) == 80 * 47
    assert len(results["per_position"]["loss"]) == 47
    markov.plot(results, tmp_path / "markov.png")
    assert (tmp_path / "markov.png").stat().st_size > 0


def test_a_model_stuck_at_the_unigram_law_scores_h_pi(switching, tmp_path):
    corpus, _ = switching
    pi = stationary(np.array(_references(corpus)["table"]))  # (5/13, 8/13)
    results = markov.run(_context(ChainModel(2, lambda _: pi.tolist()), corpus, tmp_path),
                         markov.MarkovOptions(batch_size=7))
    assert abs(results["gap_to_unigram_entropy"]) < 0.02
    assert results["gap_to_entropy_rate"] > 0.02  # H(pi) - entropy rate = 0.047
    assert np.allclose(results["table"]["learned"], [pi, pi], atol=1e-6)
    # the expected loss of the stuck model is the Bayes loss plus its KL to the table
    assert results["loss"] == pytest.approx(
        results["on_these_rows"]["bayes_loss"] + results["kl_to_bayes"], abs=0.02)


def test_a_uniform_model_scores_ln_a(fixed, tmp_path):
    corpus, _ = fixed
    results = markov.run(_context(ChainModel(3, lambda _: None), corpus, tmp_path),
                         markov.MarkovOptions(max_rows=10))
    assert results["n"] == 10 and results["positions"] == [2, 47]
    assert results["loss"] == pytest.approx(math.log(3), abs=1e-6)
    assert results["gap_to_unigram_entropy"] == pytest.approx(
        math.log(3) - results["references"]["unigram_entropy"], abs=1e-6)
    learned = [row for row in results["table"]["learned"] if row is not None]
    assert len(learned) == sum(n > 0 for n in results["table"]["count"])
    assert np.allclose(learned, 1 / 3, atol=1e-6)


def test_the_true_order_2_table_is_the_bayes_predictor(fixed, tmp_path):
    corpus, config = fixed
    table = np.array(_references(corpus)["table"])
    results = markov.run(_context(_table_model(table, 2), corpus, tmp_path),
                         markov.MarkovOptions())
    assert results["kl_to_bayes"] == pytest.approx(0, abs=1e-6)
    assert results["loss"] == pytest.approx(results["on_these_rows"]["true_loss"])
    assert abs(results["gap_to_bayes_loss"]) < 0.03
    seen = [row for row in results["table"]["learned"] if row is not None]
    assert len(seen) == 9 and results["table"]["max_abs_error"] < 1e-6


def _add_beta_model(alphabet: int, beta: float) -> ChainModel:
    def law(symbols: list[int]) -> list[float] | None:
        if not symbols:
            return None
        counts = np.zeros(alphabet)
        for before, after in zip(symbols, symbols[1:]):
            counts[after] += before == symbols[-1]
        return ((counts + beta) / (counts.sum() + alphabet * beta)).tolist()
    return ChainModel(alphabet, law)


def test_fresh_tables_add_beta_counting_is_the_bayes_predictor(fresh, tmp_path):
    corpus, config = fresh
    results = markov.run(_context(_add_beta_model(2, 0.5), corpus, tmp_path),
                         markov.MarkovOptions())
    assert "table" not in results
    assert results["kl_to_bayes"] == pytest.approx(0, abs=1e-6)
    assert results["loss"] == pytest.approx(results["on_these_rows"]["bayes_loss"])
    stderr = results["references"]["bayes_loss_stderr"] * math.sqrt(2000 / 80)
    assert abs(results["gap_to_bayes_loss"]) < 5 * math.hypot(
        stderr, results["references"]["bayes_loss_stderr"])
    assert results["references"]["unigram_entropy"] == pytest.approx(math.log(2))
    # the first predictions know nothing: ln 2; counting then beats it
    curve = results["per_position"]["loss"]
    assert curve[0] == pytest.approx(math.log(2)) and np.mean(curve[-10:]) < math.log(2) - 0.05
    # the per-position add-beta laws agree with the corpus's own Monte Carlo loss function
    rows = markov.load_rows(corpus, 0)
    predictions = markov.add_beta_predictions(rows.tokens, 1, 2, 0.5)
    mine = -np.log(np.take_along_axis(predictions, rows.tokens[:, 1:, None], 2)[..., 0])
    assert mine.mean(1) == pytest.approx(add_beta_losses(rows.tokens, 1, 2, 0.5))


def test_a_real_gpt_runs_and_learned_positions_cut_the_scored_positions(fixed, tmp_path):
    corpus, _ = fixed
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=4, pos="learned",
                            ctx=20))
    model.train()
    results = markov.run(_context(model, corpus, tmp_path),
                         markov.MarkovOptions(max_rows=6, batch_size=4))
    assert model.training and results["n"] == 6 and results["positions"] == [2, 20]
    assert len(results["per_position"]["loss"]) == 19 and math.isfinite(results["loss"])
    assert 0 <= results["tv_to_bayes"] <= 1 and results["kl_to_bayes"] >= 0


def test_a_damaged_row_and_a_missing_corpus_are_named(fixed, tmp_path):
    corpus, _ = fixed
    lines = (corpus / "eval" / "markov_test.jsonl").read_text().splitlines()
    damaged = tmp_path / "damaged"
    (damaged / "eval").mkdir(parents=True)
    row = json.loads(lines[1])
    row["symbols"][3] = 7
    (damaged / "eval" / "markov_test.jsonl").write_text(lines[0] + "\n" + json.dumps(row) + "\n")
    record_eval_set(damaged, "markov_test")
    with pytest.raises(TrainError, match="markov_test row 1: needs order 2"):
        markov.load_rows(damaged, 0)
    with pytest.raises(TrainError, match="references.json: missing; the markov task needs"):
        markov.read_references(damaged)


def test_a_uniform_models_distances_to_the_switching_table(switching, tmp_path):
    # context 0's row is [.5 .5] (uniform: no distance), context 1's [.8 .2]: TV 0.3 (half the
    # L1 distance) and KL 0.8 ln 1.6 + 0.2 ln 0.4, each weighted by context 1's share
    corpus, _ = switching
    results = markov.run(_context(ChainModel(2, lambda _: None), corpus, tmp_path),
                         markov.MarkovOptions())
    share = results["table"]["count"][1] / sum(results["table"]["count"])
    assert 0.2 < share < 0.8
    assert results["tv_to_bayes"] == pytest.approx(0.3 * share)
    kl = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    assert results["kl_to_bayes"] == pytest.approx(kl * share)


def test_a_reference_has_a_standard_error_and_no_gap_claims_one(fresh, tmp_path):
    corpus, _ = fresh
    results = markov.run(_context(_add_beta_model(2, 0.5), corpus, tmp_path),
                         markov.MarkovOptions(max_rows=5))
    assert "bayes_loss_stderr" in results["references"]
    assert not [key for key in results if key.startswith("gap_to_") and key.endswith("stderr")]


def test_the_learned_tables_error_leaves_unseen_contexts_out():
    table = np.array([[0.5, 0.5], [0.8, 0.2], [0.1, 0.9]])
    context = np.array([[0, 1, 1, 0]])  # context 2 never occurs
    learned = markov.learned_table(np.log(table[context]), context, table)
    assert learned["count"] == [2, 2, 0] and learned["learned"][2] is None
    assert learned["max_abs_error"] == pytest.approx(0, abs=1e-12)


def test_fresh_tables_scored_on_the_positions_a_model_has(fresh, tmp_path):
    corpus, _ = fresh
    model = _add_beta_model(2, 0.5)
    model.positional.max_positions = 20  # fewer than the rows' positions
    results = markov.run(_context(model, corpus, tmp_path), markov.MarkovOptions(max_rows=10))
    assert results["positions"] == [1, 20]
    assert len(results["per_position"]["bayes_loss"]) == 20
    assert results["kl_to_bayes"] == pytest.approx(0, abs=1e-6)
    assert results["loss"] == pytest.approx(results["on_these_rows"]["bayes_loss"])
