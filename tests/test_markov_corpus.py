"""The markov family: transition and first-token frequencies against the tables (5 sigma, fixed
seeds; the last position included), the references against brute-force enumeration, bad keys,
worker independence and the test rows."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import betaln

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.shards import read_shard
from corpus_gen.markov import chains, family, references
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    assert_law,
    eval_rows,
    family_config,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent
def _config(*overrides: str):
    return family_config("markov", *overrides)


def _tokens(config, count: int, stream: str = "train") -> np.ndarray:
    return family.draw(config, stream, np.arange(count))[0]


def _contexts(tokens: np.ndarray, order: int, alphabet: int) -> np.ndarray:
    """(B, T-k): the k-gram before each token from position k on, by a plain loop."""
    out = np.zeros((tokens.shape[0], tokens.shape[1] - order), dtype=np.int64)
    for j in range(order):
        out = out * alphabet + tokens[:, j:tokens.shape[1] - order + j]
    return out


def _assert_within_5_sigma(successes: int, trials: int, p: float) -> None:
    sigma = math.sqrt(p * (1 - p) / trials)
    assert abs(successes / trials - p) < 5 * sigma + 1e-12, (successes, trials, p)


def test_the_vocabulary_is_eos_then_the_digits():
    assert family.vocabulary(_config("table=fixed", "alphabet=3")) == ("<eos>", "0", "1", "2")


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.1, 0.3), (1.0, 0.0)])
def test_switching_transitions_match_p_and_q_within_5_sigma(p, q):
    tokens = _tokens(_config(f"p={p}", f"q={q}", "initial=uniform"), 2000)
    before, after = tokens[:, :-1], tokens[:, 1:]
    for state, leave in ((0, p), (1, q)):
        trials = int((before == state).sum())
        if trials:
            _assert_within_5_sigma(int((after[before == state] != state).sum()), trials, leave)


def test_the_last_position_is_sampled_from_its_context():
    # the official k-th order generator leaves it 0: here it follows the table like the others
    config = _config("table=fixed", "order=2", "alphabet=3", "seq_len=8")
    tokens, table = _tokens(config, 40000), family.shared_table(config)
    context = _contexts(tokens, 2, 3)[:, -1]
    for c in range(9):
        assert_law(np.bincount(tokens[context == c, -1], minlength=3), table[c])


def test_fixed_kth_order_transitions_match_the_table_by_chi_square():
    config = _config("table=fixed", "order=3", "alphabet=3", "beta=0.7", "seq_len=64")
    tokens, table = _tokens(config, 3000), family.shared_table(config)
    context, following = _contexts(tokens, 3, 3).ravel(), tokens[:, 3:].ravel()
    for c in range(27):
        assert_law(np.bincount(following[context == c], minlength=3), table[c])


@pytest.mark.parametrize("overrides, one", [
    (("p=0.5", "q=0.8"), 0.5 / 1.3),  # stationary: pi_1 = p / (p + q)
    (("p=0.1", "q=0.6"), 0.1 / 0.7),
    (("p=0.5", "q=0.8", "initial=uniform"), 0.5),
])
def test_the_first_token_follows_the_stated_law(overrides, one):
    tokens = _tokens(_config(*overrides, "seq_len=4"), 40000)
    _assert_within_5_sigma(int(tokens[:, 0].sum()), len(tokens), one)


def test_a_fixed_chains_first_k_gram_is_stationary_and_stays_so():
    config = _config("table=fixed", "order=2", "alphabet=3", "seq_len=6")
    law = references.stationary(family.shared_table(config))
    contexts = _contexts(_tokens(config, 40000), 2, 3)
    for t in (0, 3):  # the first k-gram and a later one
        assert_law(np.bincount(contexts[:, t], minlength=9), law)


def test_the_stationary_law_is_the_limit_of_the_chain():
    table = family.shared_table(_config("table=fixed", "order=2", "alphabet=3", "beta=0.5"))
    moves = references.context_transitions(table)
    assert np.allclose(references.stationary(table), np.linalg.matrix_power(moves, 4096)[0])


def test_p_half_q_0_8_has_the_papers_unigram_entropy_and_entropy_rate():
    found = family.references(_config("p=0.5", "q=0.8"))
    assert round(found["unigram_entropy"], 4) == 0.6663
    assert round(found["entropy_rate"], 4) == 0.6190
    assert found["bayes_loss"] == pytest.approx(found["entropy_rate"])  # stationary start


def test_a_fixed_tables_bayes_loss_is_the_enumerated_expected_loss():
    # uniform start: the exact per-position expected loss of the true table, every sequence
    config = _config("table=fixed", "order=2", "alphabet=2", "initial=uniform", "seq_len=7")
    table = family.shared_table(config)
    total = 0.0
    for seq in itertools.product(range(2), repeat=7):
        prob, loss = 0.25, 0.0
        for t in range(2, 7):
            step = table[2 * seq[t - 2] + seq[t - 1], seq[t]]
            prob, loss = prob * step, loss - math.log(step)
        total += prob * loss / 5
    assert family.references(config)["bayes_loss"] == pytest.approx(total, abs=1e-10)


def test_add_beta_counting_matches_a_plain_loop():
    config = _config("table=fresh", "order=2", "alphabet=3", "beta=0.5", "initial=uniform",
                     "seq_len=20")
    tokens = _tokens(config, 5)
    expected = []
    for seq in tokens.tolist():
        counts, loss = {}, 0.0
        for t in range(2, 20):
            seen = counts.setdefault(tuple(seq[t - 2:t]), [0, 0, 0])
            loss -= math.log((seen[seq[t]] + 0.5) / (sum(seen) + 1.5))
            seen[seq[t]] += 1
        expected.append(loss / 18)
    assert np.allclose(references.add_beta_losses(tokens, 2, 3, 0.5), expected)


def test_the_monte_carlo_bayes_loss_matches_enumeration_within_5_stderr():
    # fresh Dirichlet(beta) tables: the mixture's law of a sequence is a product of
    # Dirichlet-multinomials, and the Bayes loss its entropy, enumerated for a short T
    beta, T = 0.6, 7
    config = _config("table=fresh", "order=1", "initial=uniform", f"beta={beta}",
                     f"seq_len={T}", "reference_samples=40000")
    total = 0.0
    for seq in itertools.product(range(2), repeat=T):
        counts = np.zeros((2, 2))
        for a, b in zip(seq, seq[1:]):
            counts[a, b] += 1
        log_mix = sum(betaln(*(row + beta)) - betaln(beta, beta) for row in counts)
        total += 0.5 * math.exp(log_mix) * -log_mix / (T - 1)
    found = family.references(config)
    assert abs(found["bayes_loss"] - total) < 5 * found["bayes_loss_stderr"]
    assert found["bayes_loss"] > found["entropy_rate"]  # the table unknown costs


@pytest.mark.parametrize("beta", [0.3, 2.0])
def test_fresh_tables_have_the_dirichlet_mean_and_variance(beta):
    config = _config("table=fresh", "order=1", "alphabet=3", f"beta={beta}",
                     "initial=uniform", "seq_len=2")
    tables = family.draw(config, "train", np.arange(20000))[1].reshape(-1, 3)
    assert np.allclose(tables.sum(1), 1.0)
    n, variance = len(tables), (1 / 3) * (2 / 3) / (3 * beta + 1)
    assert np.all(np.abs(tables.mean(0) - 1 / 3) < 5 * math.sqrt(variance / n))
    # the sample variance's standard error: E (X - mean)^4 <= E (X - mean)^2 as |X - mean| <= 1
    assert np.all(np.abs(tables.var(0) - variance) < 5 * math.sqrt(variance / n))


def test_a_fresh_table_is_independent_of_its_own_sequence():
    # the table's draw and its tokens' draws come from separate keys: whether the first token
    # is 0 (uniform) says nothing of the table's first row, x ~ Beta(0.3, 0.3)
    config = _config("table=fresh", "order=1", "beta=0.3", "initial=uniform", "seq_len=2")
    tokens, tables = family.draw(config, "train", np.arange(20000))
    x, zero = tables[:, 0, 0], tokens[:, 0] == 0
    sigma = math.sqrt(0.25 / 1.6 * (1 / zero.sum() + 1 / (~zero).sum()))
    assert abs(x[zero].mean() - x[~zero].mean()) < 5 * sigma


def test_a_fixed_table_is_a_function_of_the_seed():
    a, b = (family.shared_table(_config("table=fixed", f"seed={s}")) for s in (0, 1))
    assert np.array_equal(a, family.shared_table(_config("table=fixed", "seed=0")))
    assert not np.array_equal(a, b)
    assert np.array_equal(a, chains.dirichlet_table(family._key(_config("table=fixed"),
                                                                "table"), 2, 2, 1.0))


def test_documents_are_their_units_and_fresh_metas_hold_their_tables():
    config = _config("table=fresh", "order=2", "initial=uniform", "seq_len=12")
    tokens, tables = family.draw(config, "train", np.arange(7))
    records = training_records(config, 0, 7)
    assert [r.text for r in records] == [" ".join(map(str, row)) for row in tokens.tolist()]
    assert all(r.masked == () for r in records)  # every token in the loss
    assert np.allclose([r.meta["table"] for r in records], tables, atol=5e-7)
    assert training_records(config, 3, 5) == records[3:5]  # batch independent
    assert training_records(_config("seq_len=12"), 0, 1)[0].meta == {"table": "switching"}


def test_test_rows_are_their_own_stream_with_tables():
    config = _config("table=fresh", "order=2", "initial=uniform", "eval_samples=600",
                     "seq_len=10")
    rows = eval_rows(config)
    tokens, tables = family.draw(config, "test", np.arange(600))
    assert [r["id"] for r in rows] == list(range(600))
    assert [r["symbols"] for r in rows] == tokens.tolist()
    assert all(r["text"] == " ".join(map(str, r["symbols"])) for r in rows)
    assert np.allclose([r["table"] for r in rows], tables, rtol=0, atol=1e-10)
    assert rows[0]["symbols"] != _tokens(config, 1).tolist()[0]


@pytest.mark.parametrize("override, key", [
    ("p=1.5", "p"), ("q=-0.1", "q"), ("table=random", "table"), ("order=0", "order"),
    ("order=2", "order"), ("alphabet=11", "alphabet"), ("beta=0", "beta"),
    ("initial=steady", "initial"), ("seq_len=1", "seq_len"), ("samples=0", "samples"),
])
def test_bad_values_are_refused_naming_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config(override)
    assert err.value.key == key


def test_fresh_tables_refuse_a_stationary_start():
    with pytest.raises(ConfigError) as err:
        _config("table=fresh", "initial=stationary")
    assert err.value.key == "initial"


def test_physlm_gen_writes_the_references_and_refuses_p_out_of_range_in_one_line(tmp_path,
                                                                                  capsys):
    out = tmp_path / "c"
    assert main(["gen", str(ROOT / "configs/corpus/markov.yaml"), "samples=50",
                 "eval_samples=3", "--out", str(out), "--no-progress"]) == 0
    written = json.loads((out / "references.json").read_text())
    assert round(written["nats_per_token"]["entropy_rate"], 4) == 0.6190
    assert written["table"] == [[0.5, 0.5], [0.8, pytest.approx(0.2)]]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["unigram_entropy_nats"] == 0.6663
    (sample, *_) = read_shard(out / manifest["shards"][0]["name"])
    assert len(sample["ids"]) == 255 and sample["mask"].all()
    capsys.readouterr()
    assert main(["gen", str(ROOT / "configs/corpus/markov.yaml"), "p=1.5",
                 "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == ("physlm gen: error: command line: p=1.5: "
                                       "a probability in [0, 1]\n")


@pytest.mark.parametrize("overrides", [
    ["seq_len=40"],
    ["table=fresh", "order=2", "initial=uniform", "seq_len=40", "reference_samples=64"],
])
def test_a_corpus_is_the_same_for_one_or_two_workers(tmp_path, overrides):
    assert_independent_of_workers_and_shard_size("markov", overrides, tmp_path)
