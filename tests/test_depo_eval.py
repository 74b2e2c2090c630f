"""The depo evaluation task on rows built here in the contract's format: a planted oracle scores
1.0 and depth K, a model that answers a random word of the context scores about 1/n, the first
complete word decides, the depth rule, a real tiny GPT runs through it, bad options are named."""

import json
import random

import pytest

import trainer.eval.depo as depo
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.vocabulary import Vocabulary
from corpus_gen.core.words import letter_names, split_words
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
from trainer.errors import TrainError
from trainer.eval.answers import largest_solved
from trainer.model import GPT, ModelConfig

K, MINI_VOCAB = 4, 3
NAMES = ("<eos>", "<bos>", *(f"hop{k}" for k in range(1, K + 1)), "=>",
         *letter_names(MINI_VOCAB))
VOCAB = Vocabulary(NAMES, "depo test")


def ids(names: list[str]) -> list[int]:
    return [VOCAB.token_id(name) for name in names]


def random_word(rng: random.Random) -> tuple[str, ...]:
    """A word of 1-2 letters: inner letters, then an end letter."""
    inner = [f"w{rng.randint(1, MINI_VOCAB)}" for _ in range(rng.randint(0, 1))]
    return (*inner, f"w{rng.randint(1, MINI_VOCAB)}.")


def depo_rows(n: int, ks: list[int], per_k: int, seed: int = 0) -> list[dict]:
    """`per_k` rows per k: n distinct words on a random cycle, pairs shuffled, one query."""
    rng = random.Random(seed)
    rows = []
    for k in ks:
        for _ in range(per_k):
            words: list[tuple[str, ...]] = []
            while len(words) < n:
                word = random_word(rng)
                words += [word] if word not in words else []
            successor = {w: words[(i + 1) % n] for i, w in enumerate(words)}
            pairs = rng.sample(list(successor.items()), n)
            query = rng.choice(words)
            answer = query
            for _ in range(k):
                answer = successor[answer]
            prompt = ["<bos>", *(name for pair in pairs for word in pair for name in word),
                      f"hop{k}", *query, "=>"]
            rows.append({"id": len(rows), "prompt": ids(prompt), "answer": ids(list(answer)),
                         "n": n, "k": k, "query": " ".join(query),
                         "edges": [[" ".join(a), " ".join(b)] for a, b in pairs]})
    return rows


def context_words(prompt: list[int]) -> list[list[int]]:
    """The words of the prompt's context (the pairs), as ids, each once."""
    names = [NAMES[i] for i in prompt]
    words, _ = split_words(names[1:names.index(next(n for n in names if n.startswith("hop")))])
    return [ids(list(word)) for word in dict.fromkeys(words)]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return depo_rows(n=5, ks=[1, 2, 4], per_k=200)


@pytest.fixture
def corpus(tmp_path, rows):
    return write_set(tmp_path / "corpus", VOCAB, depo.TEST_SET, rows)


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "depo", depo, depo.DepoOptions)


@pytest.mark.parametrize("bad", ["max_rows=-1", "batch_size=0", "threshold=0",
                                 "threshold=1.5", "max_new_tokens=0"])
def test_bad_options_are_named(tmp_path, bad):
    key = bad.split("=")[0]
    with pytest.raises(ConfigError, match=f"depo.{key}"):
        load_experiment(tiny_experiment_file(tmp_path), ["eval=depo", f"eval.depo.{bad}"])


def test_a_planted_oracle_scores_one_and_depth_k(corpus, rows, tmp_path):
    model = AnswerModel(VOCAB, "=>", lookup(rows))
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path),
                       depo.DepoOptions(batch_size=32))
    assert results["accuracy"] == 1.0 and results["n"] == 600 and results["failures"] == {}
    assert results["per_k"] == {str(k): {"accuracy": 1.0, "n": 200} for k in (1, 2, 4)}
    assert results["depth"] == 4 and results["words"] == 5
    lines = [json.loads(line) for line in
             (tmp_path / "eval" / depo.GENERATIONS).read_text().splitlines()]
    assert len(lines) == 600 and all(line["correct"] for line in lines)
    assert lines[0]["generated"] == VOCAB.decode(rows[0]["answer"])  # EOS cut off
    depo.plot(results, tmp_path / "depo.png")
    assert (tmp_path / "depo.png").stat().st_size > 0


def test_a_model_that_ignores_the_query_scores_about_one_over_n(corpus, tmp_path):
    """A word of the context drawn at random (seeded by the prompt): right with p = 1/5 per row;
    600 rows put the accuracy within 0.05 (3 sd) of 0.2, 200 rows per k within 0.09."""
    model = AnswerModel(VOCAB, "=>", lambda p: prompt_random(p).choice(context_words(p)))
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path), depo.DepoOptions())
    assert abs(results["accuracy"] - 0.2) < 0.05
    assert all(abs(entry["accuracy"] - 0.2) < 0.09 for entry in results["per_k"].values())
    assert results["depth"] == 0 and results["failures"] == {
        "wrong_word": 600 - round(600 * results["accuracy"])}


def test_the_first_complete_word_decides():
    answer = ["w1", "w2."]
    assert depo.verdict(["w1", "w2.", "w3."], answer) is None  # what follows is ignored
    assert depo.verdict(["w1", "w2"], answer) == "no_word"  # no end letter: no word yet
    assert depo.verdict([], answer) == "no_word"
    assert depo.verdict(["w2."], answer) == "wrong_word"  # a suffix of the answer is another word
    assert depo.verdict(["w3.", "w1", "w2."], answer) == "wrong_word"  # the answer comes too late
    assert depo.verdict(["=>", "w1", "w2."], answer) == "wrong_word"
    assert depo.verdict(None, answer) == "prompt_too_long"


@pytest.mark.parametrize(("length", "reason"), [(8, "wrong_word"), (9, "no_word"),
                                               (21, "no_word")])
def test_a_word_longer_than_the_budget_is_no_word(corpus, rows, tmp_path, length, reason):
    # a word of exactly max_new_tokens tokens is still read (and wrong: answers have 1-2)
    model = AnswerModel(VOCAB, "=>", lambda p: ids(["w1"] * (length - 1) + ["w1."]))
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path),
                       depo.DepoOptions(max_new_tokens=8))
    assert results["accuracy"] == 0.0 and results["failures"] == {reason: 600}


@pytest.mark.parametrize(("accuracies", "depth"), [
    ({1: 1.0, 2: 0.95, 4: 0.5, 8: 0.95}, 2),  # 8 reaches it, but 4 does not: depth 2
    ({1: 0.89, 2: 1.0}, 0),  # k = 1 fails
    ({1: 0.9, 2: 0.9, 4: 1.0, 8: 0.92, 16: 0.91}, 16),  # the threshold itself reaches it
    ({1: 1.0, 2: None}, 1),  # a k without rows solves nothing
    ({}, 0)])
def test_depth_is_the_largest_k_with_every_smaller_k_solved(accuracies, depth):
    per_k = {str(k): {"accuracy": a, "n": 10} for k, a in accuracies.items()}
    assert largest_solved(per_k, 0.9) == depth


def test_run_reports_the_depth_of_its_threshold_with_every_smaller_k_solved(corpus, rows,
                                                                           tmp_path):
    # right everywhere except half of the k = 2 rows, where it answers the query (never its own
    # 2nd successor on a 5-cycle): k = 4 is solved, k = 2 is not
    by_prompt, answers = {tuple(row["prompt"]): row for row in rows}, lookup(rows)

    def answer(prompt: list[int]) -> list[int]:
        row = by_prompt[tuple(prompt)]
        return ids(row["query"].split()) if row["k"] == 2 and row["id"] % 2 else answers(prompt)

    model = AnswerModel(VOCAB, "=>", answer)
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path), depo.DepoOptions())
    assert results["per_k"] == {"1": {"accuracy": 1.0, "n": 200}, "2": {"accuracy": 0.5, "n": 200},
                                "4": {"accuracy": 1.0, "n": 200}}
    assert results["depth"] == 1
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path),
                       depo.DepoOptions(threshold=0.5))
    assert results["depth"] == 4


def test_max_rows_takes_the_first_rows_of_each_k(corpus, rows, tmp_path):
    model = AnswerModel(VOCAB, "=>", lookup(rows))
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path), depo.DepoOptions(max_rows=7))
    assert {k: e["n"] for k, e in results["per_k"].items()} == {"1": 7, "2": 7, "4": 7}
    logged = [json.loads(line)["id"] for line in
              (tmp_path / "eval" / depo.GENERATIONS).read_text().splitlines()]
    assert logged == [*range(7), *range(200, 207), *range(400, 407)]


def test_a_real_gpt_runs_and_prompts_past_its_positions_are_counted(corpus, rows, tmp_path):
    """An untrained GPT with learned positions, too few for the longest prompts: those are
    scored prompt_too_long without generating; the others decode with the KV cache."""
    lengths = sorted(len(row["prompt"]) for row in rows)
    ctx = lengths[len(lengths) // 2]
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=len(NAMES), pos="learned",
                            ctx=ctx))
    results = depo.run(context_for(model, VOCAB, corpus, tmp_path),
                       depo.DepoOptions(max_rows=20, batch_size=16))
    assert results["n"] == 60 and 0 <= results["accuracy"] <= 1
    too_long = sum(len(row["prompt"]) >= ctx for row in rows if row["id"] % 200 < 20)
    assert results["failures"].get("prompt_too_long", 0) == too_long > 0
    assert sum(results["failures"].values()) == 60 - round(60 * results["accuracy"])


def test_rows_that_are_no_depo_rows_are_named(tmp_path, rows):
    corpus = write_set(tmp_path / "bad", VOCAB, depo.TEST_SET,
                       [{**rows[0], "prompt": []}])
    with pytest.raises(TrainError, match="depo_test row 0: 'prompt' must be a non-empty list"):
        depo.run(context_for(None, VOCAB, corpus, tmp_path), depo.DepoOptions())
    with pytest.raises(TrainError, match="depo_test.jsonl: missing; the depo task needs a depo"):
        depo.run(context_for(None, VOCAB, tmp_path / "none", tmp_path), depo.DepoOptions())


def test_end_to_end_gen_train_evaluate_report(tmp_path):
    from launch.report import is_count, is_headline

    results, metrics = train_and_evaluate(
        tmp_path, "depo1.yaml", ["max_n=6", "max_k=4", "mini_vocab=4", "samples=40",
                                 "eval_samples=3"], "depo", ctx=128)
    assert results["n"] == 9 and set(results["per_k"]) == {"1", "2", "4"}
    assert results["words"] == 6 and 0 <= results["depth"] <= 4
    assert [m for m, v in metrics.items() if is_headline(m, v)] == ["depo/accuracy"]
    assert {"depo/n", "depo/depth", "depo/words"} <= {m for m, v in metrics.items()
                                                      if is_count(m, v)}
