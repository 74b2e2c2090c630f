"""The brevo evaluation task on rows built here in the contract's format: a planted oracle scores
1.0 in the rows' order and in another topological order, a model that ignores the context (or
only the query) scores about 0, each failure reason is found, bad options are named."""

import json
import random

import pytest

import trainer.eval.brevo as brevo
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
from trainer.model import GPT, ModelConfig

MINI_VOCAB, N = 3, 9
NAMES = ("<eos>", "<bos>", "?", "=>", *letter_names(MINI_VOCAB))
VOCAB = Vocabulary(NAMES, "brevo test")
WORDS = [f"w{a} w{b}." for a in range(1, 4) for b in range(1, 4)]  # the 9 words of 2 letters


def ids(text: str) -> list[int]:
    return [VOCAB.token_id(name) for name in text.split()]


def random_dag(rng: random.Random) -> tuple[list[str], list[tuple[str, str]]]:
    """N words in a random order; the first r are roots, each later one takes 1..4 parents among
    the earlier words with fewer than 4 children (none left: it stays a root)."""
    nodes = rng.sample(WORDS, N)
    roots = rng.randint(1, (N - 1) // 4 + 1)
    children = dict.fromkeys(nodes, 0)
    edges = []
    for i, node in enumerate(nodes[roots:], roots):
        free = [p for p in nodes[:i] if children[p] < 4]
        for parent in rng.sample(free, rng.randint(1, min(4, len(free))) if free else 0):
            children[parent] += 1
            edges.append((parent, node))
    return nodes, edges


def depth_of(edges: list[tuple[str, str]], node: str) -> int:
    """The longest path, in edges, from a root to `node`."""
    return max((depth_of(edges, p) + 1 for p, c in edges if c == node), default=0)


def brevo_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        nodes, edges = random_dag(rng)
        query = rng.choice(sorted({child for _, child in edges}))
        wanted = brevo.ancestry(brevo.parents_of(edges), query)
        answer = [node for node in nodes if node in wanted]  # creation order is topological
        context = rng.sample(edges, len(edges))
        rows.append({"id": i, "prompt": ids(" ".join(["<bos>", *(f"{p} {c}" for p, c in context),
                                                      "?", query, "=>"])),
                     "answer": ids(" ".join(answer)), "n": N, "query": query,
                     "depth": depth_of(edges, query), "edges": [list(e) for e in context]})
    return rows


def read_prompt(prompt: list[int]) -> tuple[list[tuple[str, str]], str]:
    """The edges and the query a prompt holds."""
    names = [NAMES[i] for i in prompt]
    words, _ = split_words(names[1:names.index("?")])
    edges = [(" ".join(words[i]), " ".join(words[i + 1])) for i in range(0, len(words), 2)]
    return edges, " ".join(names[names.index("?") + 1 : -1])


def by_depth(prompt: list[int], query: str | None = None) -> list[int]:
    """The answer for `query` (default: the prompt's) in another topological order: by depth,
    then alphabetically."""
    edges, asked = read_prompt(prompt)
    wanted = brevo.ancestry(brevo.parents_of(edges), query or asked)
    return ids(" ".join(sorted(wanted, key=lambda node: (depth_of(edges, node), node))))


def any_nonroot(prompt: list[int]) -> list[int]:
    """The right answer for a non-root node drawn at random: the query is not read."""
    edges, _ = read_prompt(prompt)
    return by_depth(prompt, prompt_random(prompt).choice(sorted({c for _, c in edges})))


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return brevo_rows(300)


@pytest.fixture
def corpus(tmp_path, rows):
    return write_set(tmp_path / "corpus", VOCAB, brevo.TEST_SET, rows)


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "brevo", brevo, brevo.BrevoOptions)


@pytest.mark.parametrize("bad", ["max_rows=-1", "batch_size=0", "max_new_tokens=-1"])
def test_bad_options_are_named(tmp_path, bad):
    with pytest.raises(ConfigError, match=f"brevo.{bad.split('=')[0]}"):
        load_experiment(tiny_experiment_file(tmp_path), ["eval=brevo", f"eval.brevo.{bad}"])


@pytest.mark.parametrize("order", ["rows", "by_depth"])
def test_a_planted_oracle_scores_one_in_either_valid_order(corpus, rows, tmp_path, order):
    respond = lookup(rows) if order == "rows" else by_depth
    model = AnswerModel(VOCAB, "=>", respond)
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path),
                        brevo.BrevoOptions(batch_size=64))
    assert results["accuracy"] == 1.0 and results["n"] == 300 and results["failures"] == {}
    assert results["per_n"] == {str(N): {"accuracy": 1.0, "n": 300}}
    depths = {row["depth"] for row in rows}
    assert set(results["per_depth"]) == {str(d) for d in depths} and len(depths) >= 3
    assert sum(e["n"] for e in results["per_depth"].values()) == 300
    lines = [json.loads(line) for line in
             (tmp_path / "eval" / brevo.GENERATIONS).read_text().splitlines()]
    assert len(lines) == 300 and all(line["correct"] for line in lines)
    assert " ".join(lines[0]["generated"]) == VOCAB.decode(respond(rows[0]["prompt"]))


def test_the_two_orders_differ_for_some_rows(rows):
    assert sum(by_depth(row["prompt"]) != row["answer"] for row in rows) > 30


def test_a_model_that_ignores_the_context_scores_zero(corpus, tmp_path):
    model = AnswerModel(VOCAB, "=>", lambda p: ids(WORDS[0]))
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path), brevo.BrevoOptions())
    assert results["accuracy"] == 0.0
    assert set(results["failures"]) <= {"missing", "extra"} and sum(
        results["failures"].values()) == 300


def test_a_model_that_ignores_the_query_scores_about_its_chance(corpus, rows, tmp_path):
    """The answer of a random non-root node is right with p = 1 / (the row's non-roots); over
    300 rows the accuracy is within 3 sd of the mean of those."""
    model = AnswerModel(VOCAB, "=>", any_nonroot)
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path), brevo.BrevoOptions())
    chances = [1 / len({child for _, child in row["edges"]}) for row in rows]
    mean = sum(chances) / len(rows)
    sd = sum(p * (1 - p) for p in chances) ** 0.5 / len(rows)
    assert abs(results["accuracy"] - mean) < 3 * sd and mean < 0.2
    assert set(results["failures"]) <= {"missing", "extra"}


def test_per_depth_scores_each_depth_apart(corpus, rows, tmp_path):
    # right up to depth 1; deeper, the answer without its last word (the query): missing
    by_prompt, answers = {tuple(row["prompt"]): row for row in rows}, lookup(rows)
    model = AnswerModel(VOCAB, "=>", lambda p: answers(p) if by_prompt[tuple(p)]["depth"] <= 1
                        else answers(p)[:-2])
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path), brevo.BrevoOptions())
    counts = {depth: sum(row["depth"] == depth for row in rows)
              for depth in sorted({row["depth"] for row in rows})}
    assert len(counts) >= 3 and counts[1] > 0  # the fixture has shallow and deep queries
    assert results["per_depth"] == {str(depth): {"accuracy": 1.0 if depth <= 1 else 0.0, "n": n}
                                    for depth, n in counts.items()}
    assert results["failures"] == {"missing": sum(n for d, n in counts.items() if d > 1)}


# a DAG by hand: a -> c, b -> c, c -> d, a -> d, e -> f (words of the test's letters)
A, B, C, D, E, F = "w1 w1.", "w1 w2.", "w1 w3.", "w2 w1.", "w2 w2.", "w2 w3."
EDGES = [[C, D], [A, C], [E, F], [B, C], [A, D]]


@pytest.mark.parametrize(("words", "stopped", "reason"), [
    ([A, B, C, D], True, None),
    ([B, A, C, D], True, None),  # another topological order
    ([A, B, C], True, "missing"),
    ([A, B, C, D, E], True, "extra"),
    ([A, B, C, "w3.", D], True, "extra"),  # a word that is no node
    ([A, C, B, D], True, "order"),  # c before its parent b
    ([A, B, D, C], True, "order"),  # the query before its parent c
    ([A, B, C, C, D], True, "duplicate"),
    ([A, B, D, C, F], True, "extra"),  # out of order too: the docstring's first reason counts
    ([A, B, C, E, E, D], True, "duplicate"),  # an extra word twice: duplicate comes first
    ([A, B, C, D, D], False, "duplicate"),  # a loop that hits the budget: duplicate first
    ([A, B], False, "unfinished"),  # right so far, cut by the budget
    ([A, B, C, D], False, "unfinished"),  # the whole answer, but no EOS within the budget
    ([], True, "missing"),
    (None, False, "prompt_too_long")])
def test_each_failure_reason_is_found(words, stopped, reason):
    assert brevo.verdict(EDGES, D, words, stopped) == reason


def test_an_unfinished_word_is_extra_before_eos_and_cut_at_the_budget():
    tokens = A.split() + ["w3"]
    assert brevo.answer_words(tokens, stopped=True) == [A, "w3"]
    assert brevo.answer_words(tokens, stopped=False) == [A]
    assert brevo.verdict(EDGES, C, brevo.answer_words(tokens, stopped=True), True) == "extra"


def test_a_model_that_never_stops_is_unfinished_at_the_budget(corpus, tmp_path):
    model = AnswerModel(VOCAB, "=>", lambda p: ids("w1") * 500)
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path),
                        brevo.BrevoOptions(max_rows=10, max_new_tokens=20))
    assert results["failures"] == {"unfinished": 10}


@pytest.mark.parametrize(("filler", "reason"), [(7, "extra"), (8, "unfinished")])
def test_the_default_budget_is_twice_the_answer_plus_eight(corpus, rows, tmp_path, filler,
                                                           reason):
    """The answer, then len(answer) + `filler` inner letters (no word), then EOS: with 7 the EOS
    is the budget's last token (the letters before it are an unfinished word: extra); with 8 it
    is one past the budget (unfinished)."""
    answers = lookup(rows)
    model = AnswerModel(VOCAB, "=>",
                        lambda p: answers(p) + ids("w1") * (len(answers(p)) + filler))
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path),
                        brevo.BrevoOptions(max_rows=40, batch_size=16))
    assert results["failures"] == {reason: 40}


def test_a_real_gpt_runs(corpus, tmp_path):
    model = GPT(ModelConfig(n_layer=1, n_head=2, d_model=16, vocab_size=len(NAMES), pos="none"))
    results = brevo.run(context_for(model, VOCAB, corpus, tmp_path),
                        brevo.BrevoOptions(max_rows=16, batch_size=8))
    assert results["n"] == 16 and 0 <= results["accuracy"] <= 1
    assert sum(results["failures"].values()) == 16 - round(16 * results["accuracy"])
    brevo.plot(results, tmp_path / "brevo.png")
    assert (tmp_path / "brevo.png").stat().st_size > 0


def test_end_to_end_gen_train_evaluate_report(tmp_path):
    from launch.report import is_count, is_headline

    results, metrics = train_and_evaluate(
        tmp_path, "brevo2.yaml", ["max_n=6", "samples=40", "eval_samples=8"], "brevo", ctx=128)
    assert results["n"] == 8 and set(results["per_n"]) == {"6"}
    assert sum(entry["n"] for entry in results["per_depth"].values()) == 8
    assert sum(results["failures"].values()) == 8 - round(8 * results["accuracy"])
    assert [m for m, v in metrics.items() if is_headline(m, v)] == ["brevo/accuracy"]
    assert "brevo/n" in {m for m, v in metrics.items() if is_count(m, v)}
