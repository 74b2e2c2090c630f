"""The mano evaluation task on rows built here in the contract's format: a planted oracle scores
1.0 at every l, a model that ignores the expression scores about 1/23, the length rule and
accuracy at the largest l, answers that are no number, bad options are named."""

import json
import random

import pytest

import trainer.eval.mano as mano
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.vocabulary import Vocabulary
from tests.conftest import tiny_experiment_file
from tests.planted_answers import (
    AnswerModel,
    assert_registered_with_its_shipped_config,
    context_for,
    lookup,
    prompt_random,
    train_and_evaluate,
    write_set,
)
from trainer.config import load_experiment
from trainer.model import GPT, ModelConfig

L, MOD = 3, 23
SYNONYMS = {"+": ("+", "plus"), "-": ("-", "minus"), "*": ("*", "times")}


def vocabulary(levels: int) -> Vocabulary:
    return Vocabulary(("<eos>", "<bos>", *(f"len{ops}" for ops in range(1, levels + 1)),
                       *(name for pair in SYNONYMS.values() for name in pair),
                       *(str(v) for v in range(MOD)), "="), f"mano test, l up to {levels}")


VOCAB = vocabulary(L)
APPLY = {"+": lambda a, b: (a + b) % MOD, "-": lambda a, b: (a - b) % MOD,
         "*": lambda a, b: a * b % MOD}


def ids(names: list[str]) -> list[int]:
    return [VOCAB.token_id(name) for name in names]


def expression(rng: random.Random, ops: int) -> tuple[list[str], list[str], int]:
    """A random expression of `ops` operators: its tokens (a synonym per operator), its readable
    prefix form and its value mod 23."""
    if ops == 0:
        leaf = str(rng.randrange(MOD))
        return [leaf], [leaf], int(leaf)
    op = rng.choice(sorted(SYNONYMS))
    left_ops = rng.randint(0, ops - 1)
    left, left_text, a = expression(rng, left_ops)
    right, right_text, b = expression(rng, ops - 1 - left_ops)
    return ([rng.choice(SYNONYMS[op]), *left, *right], [op, *left_text, *right_text],
            APPLY[op](a, b))


def mano_rows(per_l: int, seed: int = 0, levels: int = L, vocab: Vocabulary = VOCAB
              ) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for ops in range(1, levels + 1):
        for _ in range(per_l):
            tokens, text, value = expression(rng, ops)
            rows.append({"id": len(rows),
                         "prompt": [vocab.token_id(name)
                                    for name in ["<bos>", f"len{ops}", *tokens, "="]],
                         "answer": [vocab.token_id(str(value))], "ops": ops,
                         "expression": " ".join(text), "value": value})
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return mano_rows(per_l=300)


@pytest.fixture
def corpus(tmp_path, rows):
    return write_set(tmp_path / "corpus", VOCAB, mano.TEST_SET, rows)


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "mano", mano, mano.ManoOptions)


@pytest.mark.parametrize("bad", ["max_rows=-1", "batch_size=0", "threshold=0", "threshold=2",
                                 "threshold=nan"])
def test_bad_options_are_named(tmp_path, bad):
    with pytest.raises(ConfigError, match=f"mano.{bad.split('=')[0]}"):
        load_experiment(tiny_experiment_file(tmp_path), ["eval=mano", f"eval.mano.{bad}"])


def test_the_rows_values_are_their_expressions(rows):
    """The fixture's own check: a prefix evaluation of the readable expression."""
    def evaluate(tokens: list[str]) -> tuple[int, list[str]]:
        head, rest = tokens[0], tokens[1:]
        if head.isdigit():
            return int(head), rest
        a, rest = evaluate(rest)
        b, rest = evaluate(rest)
        return APPLY[head](a, b), rest

    for row in rows:
        assert evaluate(row["expression"].split()) == (row["value"], [])
        assert VOCAB.decode(row["answer"]) == str(row["value"])


def test_a_planted_oracle_scores_one_at_every_length(corpus, rows, tmp_path):
    model = AnswerModel(VOCAB, "=", lookup(rows))
    results = mano.run(context_for(model, VOCAB, corpus, tmp_path),
                       mano.ManoOptions(batch_size=128))
    assert results["accuracy"] == results["accuracy_at_max"] == 1.0 and results["n"] == 900
    assert results["per_ops"] == {str(ops): {"accuracy": 1.0, "n": 300} for ops in (1, 2, 3)}
    assert (results["length"], results["max_ops"], results["numbers"]) == (3, 3, 23)
    assert results["failures"] == {}
    lines = [json.loads(line) for line in
             (tmp_path / "eval" / mano.GENERATIONS).read_text().splitlines()]
    assert len(lines) == 900 and all(line["correct"] for line in lines)
    assert lines[0]["generated"] == str(rows[0]["value"])
    mano.plot(results, tmp_path / "mano.png")
    assert (tmp_path / "mano.png").stat().st_size > 0


def test_a_model_that_ignores_the_expression_scores_about_one_in_23(corpus, tmp_path):
    """A number drawn at random (seeded by the prompt): p = 1/23 per row; 900 rows put the
    accuracy within 0.021 (3 sd) of it, 300 rows per l within 0.036."""
    numbers = ids([str(v) for v in range(MOD)])
    model = AnswerModel(VOCAB, "=", lambda p: [prompt_random(p).choice(numbers)])
    results = mano.run(context_for(model, VOCAB, corpus, tmp_path), mano.ManoOptions())
    assert abs(results["accuracy"] - 1 / MOD) < 0.021
    assert all(abs(e["accuracy"] - 1 / MOD) < 0.036 for e in results["per_ops"].values())
    assert results["accuracy_at_max"] == results["per_ops"]["3"]["accuracy"]
    assert results["length"] == 0 and set(results["failures"]) == {"wrong_value"}


def test_the_length_and_the_accuracy_at_the_largest_l(corpus, rows, tmp_path):
    """Right on l = 1 and 2 and on a third of l = 3: length 2, accuracy at L = 1/3."""
    answers = lookup(rows)
    by_prompt = {tuple(row["prompt"]): row for row in rows}

    def respond(prompt: list[int]) -> list[int]:
        row = by_prompt[tuple(prompt)]
        right = row["ops"] < 3 or row["id"] % 3 == 0
        return answers(prompt) if right else ids([str((row["value"] + 1) % MOD)])

    results = mano.run(context_for(AnswerModel(VOCAB, "=", respond), VOCAB, corpus, tmp_path),
                       mano.ManoOptions(threshold=0.95))
    assert results["length"] == 2 and results["accuracy_at_max"] == pytest.approx(1 / 3)
    assert results["failures"] == {"wrong_value": 200}
    results = mano.run(context_for(AnswerModel(VOCAB, "=", respond), VOCAB, corpus, tmp_path),
                       mano.ManoOptions(threshold=0.3, max_rows=30))
    assert results["length"] == 3 and results["n"] == 90


def test_the_length_needs_every_smaller_l_and_l_10_is_the_largest(tmp_path):
    # l up to 10 (the shipped mano's max_ops): wrong on l = 2 and l = 10 only, so the length
    # is 1 (l = 3..9 solved do not count past l = 2), and "10" is the largest l, not "9"
    vocab = vocabulary(10)
    rows = mano_rows(per_l=20, levels=10, vocab=vocab)
    corpus = write_set(tmp_path / "corpus", vocab, mano.TEST_SET, rows)
    by_prompt, answers = {tuple(row["prompt"]): row for row in rows}, lookup(rows)

    def respond(prompt: list[int]) -> list[int]:
        row = by_prompt[tuple(prompt)]
        wrong = row["ops"] in (2, 10)
        return [vocab.token_id(str((row["value"] + 1) % MOD))] if wrong else answers(prompt)

    results = mano.run(context_for(AnswerModel(vocab, "=", respond), vocab, corpus, tmp_path),
                       mano.ManoOptions())
    assert results["max_ops"] == 10 and results["accuracy_at_max"] == 0.0
    assert results["length"] == 1 and results["per_ops"]["9"] == {"accuracy": 1.0, "n": 20}
    assert results["failures"] == {"wrong_value": 40}


@pytest.mark.parametrize("given", [["="], ["<eos>"], ["plus"]])
def test_an_answer_that_is_no_number_is_named(corpus, tmp_path, given):
    model = AnswerModel(VOCAB, "=", lambda p: ids(given))
    results = mano.run(context_for(model, VOCAB, corpus, tmp_path),
                       mano.ManoOptions(max_rows=5))
    assert results["accuracy"] == 0.0 and results["failures"] == {"not_a_number": 15}


def test_a_real_gpt_runs_and_prompts_past_its_positions_are_counted(corpus, rows, tmp_path):
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=VOCAB.vocab_size,
                            pos="learned", ctx=8))
    results = mano.run(context_for(model, VOCAB, corpus, tmp_path),
                       mano.ManoOptions(max_rows=20, batch_size=16))
    too_long = sum(len(row["prompt"]) >= 8 for row in rows if row["id"] % 300 < 20)
    assert results["n"] == 60 and results["failures"].get("prompt_too_long") == too_long > 0
    assert sum(results["failures"].values()) == 60 - round(60 * results["accuracy"])


def test_end_to_end_gen_train_evaluate_report(tmp_path):
    from launch.report import is_count, is_headline

    results, metrics = train_and_evaluate(
        tmp_path, "mano.yaml", ["max_ops=3", "samples=40", "eval_samples=4"], "mano", ctx=32)
    assert results["n"] == 12 and set(results["per_ops"]) == {"1", "2", "3"}
    assert (results["max_ops"], results["numbers"]) == (3, 23)
    assert [m for m, v in metrics.items() if is_headline(m, v)] == [
        "mano/accuracy", "mano/accuracy_at_max"]
    assert {"mano/n", "mano/length", "mano/max_ops"} <= {m for m, v in metrics.items()
                                                         if is_count(m, v)}
