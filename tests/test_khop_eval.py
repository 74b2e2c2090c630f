"""The khop evaluation task on a tiny corpus physlm gen writes: a planted model that walks the
hops scores error 0 at every k, one that guesses at chance, one that walks only up to m hops
solves exactly k <= m, a flat one never answers; a real GPT runs (learned positions cut the
scored positions); damaged rows are named."""

import json
import math
import random

import numpy as np
import pytest
import torch

import trainer.eval.khop as khop
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import read_manifest
from tests.conftest import record_eval_set
from tests.integer_task_corpus import family_config
from tests.planted_answers import assert_registered_with_its_shipped_config
from tests.planted_lm import PlantedLM
from tests.test_khop_corpus import brute_force_target
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext
from trainer.model import GPT, ModelConfig

ALPHABET, MAX_HOPS, SEQ_LEN, PER_K = 4, 3, 16, 40
VOCAB = 1 + ALPHABET + 2 + MAX_HOPS + 1  # <eos>, letters, "~", "_", k0..k3
UNDEFINED, BLANK = ALPHABET + 1, ALPHABET + 2  # their token ids


class HopModel(PlantedLM):
    """Reads k off the hop token and answers the letter at a position by `answer(letters, k)`
    (a token id); "_" at the hop token itself. Its logits put all mass on the answer."""

    def __init__(self, answer):
        super().__init__(VOCAB)
        self.answer = answer

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        out.fill_(-math.inf)
        if len(context) == 1:
            out[BLANK] = 0.0
            return
        out[self.answer([t - 1 for t in context[1:]], context[0] - (BLANK + 1))] = 0.0


def walk(letters: list[int], k: int) -> int:
    """The true k-hop target of the last letter, as a token id."""
    found = brute_force_target(letters, len(letters) - 1, k)
    return UNDEFINED if found is None else found + 1


def guess(letters: list[int], k: int) -> int:
    """A letter or "~", seeded by what the model reads (uniform over the 5 answers)."""
    return random.Random(json.dumps([letters, k])).randrange(1, UNDEFINED + 1)


def walks_up_to(m: int):
    return lambda letters, k: walk(letters, k) if k <= m else guess(letters, k)


class FlatModel(PlantedLM):
    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        pass  # every logit 0: the argmax is token 0, <eos>, never a target


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    config = family_config("khop", "samples=4", f"seq_len={SEQ_LEN}", f"max_hops={MAX_HOPS}",
                           f"eval_samples={PER_K}")
    out = tmp_path_factory.mktemp("khop") / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def _context(model, corpus, tmp_path) -> EvalContext:
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    return EvalContext(model, tokenizer, corpus, tmp_path / "run", torch.device("cpu"))


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "khop", khop, khop.KhopOptions)


def test_walking_the_hops_scores_error_0_at_every_k(corpus, tmp_path):
    results = khop.run(_context(HopModel(walk), corpus, tmp_path), khop.KhopOptions())
    assert (results["n"], results["positions"]) == (4 * PER_K, [1, SEQ_LEN])
    assert results["error"] == 0 and results["loss"] == 0
    assert [results["per_k"][str(k)]["n"] for k in range(4)] == [PER_K] * 4
    assert all(entry["error"] == 0 for entry in results["per_k"].values())
    assert results["largest_k_solved"] == MAX_HOPS
    # k = 0 copies the letter, always defined; more hops run off the start more often
    undefined = [results["per_k"][str(k)]["undefined"] for k in range(4)]
    assert undefined[0] == 0 and undefined == sorted(undefined) and undefined[3] > 0.2
    assert results["chance_error"] == pytest.approx(1 - 1 / 5)
    khop.plot(results, tmp_path / "khop.png")
    assert (tmp_path / "khop.png").stat().st_size > 0


def test_guessing_scores_chance(corpus, tmp_path):
    results = khop.run(_context(HopModel(guess), corpus, tmp_path),
                       khop.KhopOptions(batch_size=7, per_position=True))
    positions = 4 * PER_K * SEQ_LEN
    sigma = math.sqrt(0.8 * 0.2 / positions)
    assert abs(results["error"] - results["chance_error"]) < 5 * sigma
    assert results["largest_k_solved"] == -1 and math.isinf(results["loss"])
    assert len(results["per_position"]["error"]) == SEQ_LEN
    assert np.mean(results["per_position"]["error"]) == pytest.approx(results["error"])


@pytest.mark.parametrize("m", [0, 2])
def test_walking_up_to_m_hops_solves_exactly_k_up_to_m(corpus, tmp_path, m):
    results = khop.run(_context(HopModel(walks_up_to(m)), corpus, tmp_path),
                       khop.KhopOptions(max_rows=20))
    assert results["n"] == 4 * 20 and results["largest_k_solved"] == m
    errors = [results["per_k"][str(k)]["error"] for k in range(4)]
    assert errors[: m + 1] == [0] * (m + 1) and min(errors[m + 1 :]) > 0.5


def test_the_threshold_decides_what_counts_as_solved():
    per_k = {"0": {"error": 0.0}, "1": {"error": 0.05}, "2": {"error": 0.06},
             "3": {"error": 0.0}}
    assert khop.largest_k_solved(per_k, 0.05) == 1
    assert khop.largest_k_solved(per_k, 0.1) == 3
    assert khop.largest_k_solved({"0": {"error": 0.2}}, 0.05) == -1


def test_a_flat_model_never_answers(corpus, tmp_path):
    results = khop.run(_context(FlatModel(VOCAB), corpus, tmp_path), khop.KhopOptions())
    assert results["error"] == 1 and results["loss"] == pytest.approx(math.log(VOCAB))


def test_a_real_gpt_runs_and_learned_positions_cut_the_scored_positions(corpus, tmp_path):
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=VOCAB, pos="learned",
                            ctx=10))
    model.train()
    results = khop.run(_context(model, corpus, tmp_path),
                       khop.KhopOptions(max_rows=3, batch_size=5))
    assert model.training and results["n"] == 12 and results["positions"] == [1, 9]
    assert 0 <= results["error"] <= 1 and math.isfinite(results["loss"])


def test_bad_options_and_a_damaged_row_are_named(corpus, tmp_path):
    with pytest.raises(ConfigError, match="threshold"):
        khop.KhopOptions(threshold=1.0).validate()
    lines = (corpus / "eval" / "khop_test.jsonl").read_text().splitlines()
    damaged = tmp_path / "damaged"
    (damaged / "eval").mkdir(parents=True)
    row = json.loads(lines[1])
    row["targets"] = row["targets"][:-1]
    (damaged / "eval" / "khop_test.jsonl").write_text(lines[0] + "\n" + json.dumps(row) + "\n")
    record_eval_set(damaged, "khop_test")
    with pytest.raises(TrainError, match="khop_test row 1: needs k >= 0 and 17 tokens"):
        khop.load_rows(damaged, 0, VOCAB)
    with pytest.raises(TrainError, match="the khop task needs a khop corpus"):
        khop.load_rows(tmp_path / "nothing", 0, VOCAB)


def test_the_largest_k_solved_orders_k_as_numbers():
    per_k = {str(k): {"error": 0.5 if k == 2 else 0.0} for k in range(12)}  # "10" < "2" as text
    assert khop.largest_k_solved(per_k, 0.05) == 1


def test_each_ks_loss_is_over_its_own_rows(corpus, tmp_path):
    results = khop.run(_context(HopModel(walks_up_to(0)), corpus, tmp_path),
                       khop.KhopOptions(max_rows=20))
    assert results["per_k"]["0"]["loss"] == 0 and math.isinf(results["per_k"]["1"]["loss"])


def test_per_position_errors_are_in_position_order(corpus, tmp_path):
    def late(letters: list[int], k: int) -> int:  # walks only from the 9th letter on
        return walk(letters, k) if len(letters) > 8 else BLANK

    results = khop.run(_context(HopModel(late), corpus, tmp_path),
                       khop.KhopOptions(per_position=True))
    assert results["per_position"]["error"] == [1.0] * 8 + [0.0] * (SEQ_LEN - 8)
