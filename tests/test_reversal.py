"""Inverse search (Part 3.2): the bios corpus's inverse eval sets, and the `reversal` task
scored through real greedy generation with planted models: one that names every person scores
1.0, one right only in the first name scores first_name 1.0 and full_name 0.0, one that names
another person scores 0.0. A question that fits two people is not asked, and counted."""

import json
from collections import Counter

import pytest

from corpus_gen.bios import inverse
from corpus_gen.bios.inverse import LEVELS, inverse_rows
from corpus_gen.bios.people import ATTRIBUTES, full_name
from corpus_gen.bios.qa import eval_rows, qa_document
from corpus_gen.core.tokenizer import Tokenizer, train_tokenizer
from tests.conftest import record_eval_set
from tests.test_qa_eval import ELSEWHERE, PEOPLE, context_for, plant
from trainer.eval import reversal


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = [qa_document(p, tuple(range(len(ATTRIBUTES))), False)[0] for p in PEOPLE]
    texts += [f"{row['prompt']} {row['answer']}." for p in PEOPLE
              for row in inverse_rows(p, "x", tuple(LEVELS))]
    return Tokenizer(train_tokenizer(texts, vocab_size=700))


def _inverse(split="test"):
    return [json.loads(json.dumps(row)) for p in PEOPLE
            for row in inverse_rows(p, split, tuple(LEVELS))]


def test_the_corpus_writes_inverse_sets_only_when_asked(bios_config):
    from corpus_gen.bios.family import eval_sets

    assert set(eval_sets(bios_config(people=20))) == {"qa_train", "qa_test"}
    sets = eval_sets(bios_config(people=20, inverse=True))
    rows = list(sets["inverse_test"]())
    forward = list(sets["qa_test"]())
    assert len(rows) == len(LEVELS) * len(forward) // len(ATTRIBUTES) > 0
    assert [r["level"] for r in rows[:5]] == [1, 2, 3, 4, 5]
    person = {r["attribute"]: r["answer"] for r in forward if r["person"] == rows[0]["person"]}
    assert rows[0]["prompt"] == f"Who was born on {person['birth_date']}?\nAnswer:"
    assert all(person[a] in rows[4]["prompt"] for a in ATTRIBUTES)
    assert rows[0]["answer"] == forward[0]["name"] and \
        rows[0]["first_name"] == rows[0]["answer"].split(" ")[0]


def _score_inverse(tokenizer, tmp_path, rows: list[dict], answers: list[str],
                   batch_size: int = 4) -> dict:
    model = plant(tokenizer, rows, answers)
    return reversal.score_inverse(context_for(model, tokenizer, tmp_path), rows, batch_size)


@pytest.mark.parametrize("answer, full, first", [
    (lambda row: row["answer"], 1.0, 1.0),
    (lambda row: f"{row['first_name']} {ELSEWHERE}", 0.0, 1.0),
    (lambda row: full_name(PEOPLE[(row["person"] + 1) % len(PEOPLE)]), 0.0, 0.0),
])
@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_inverse_accuracy_of_planted_models(tokenizer, tmp_path, answer, full, first,
                                            batch_size):
    rows = _inverse()
    result = _score_inverse(tokenizer, tmp_path, rows, [answer(r) for r in rows], batch_size)
    assert (result["full_name"], result["first_name"], result["n"]) == (full, first, 15)
    assert result["per_level"] == {str(level): {"full_name": full, "first_name": first, "n": 3}
                                   for level in LEVELS}


def _write_sets(corpus, forward: list[dict], inverse: list[dict]) -> None:
    (corpus / "eval").mkdir()
    for name, rows in (("qa_test", forward), ("inverse_test", inverse)):
        (corpus / "eval" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
        record_eval_set(corpus, name)


def _run_both(tokenizer, tmp_path, forward_answer, inverse_answer,
              inverse: list[dict] | None = None, **options) -> dict:
    """The task's test split with the forward questions of PEOPLE and `inverse` (default: every
    inverse question), each answered as the two functions say."""
    forward = [json.loads(json.dumps(row)) for person in PEOPLE
               for row in eval_rows(person, "test")]
    inverse = _inverse() if inverse is None else inverse
    _write_sets(tmp_path, forward, inverse)
    model = plant(tokenizer, forward + inverse, [forward_answer(row) for row in forward]
                  + [inverse_answer(row) for row in inverse])
    return reversal.run(context_for(model, tokenizer, tmp_path),
                        reversal.ReversalOptions(splits=["test"], batch_size=8,
                                                 **options))["test"]


def test_the_task_puts_forward_and_inverse_side_by_side(tokenizer, tmp_path):
    """A model that answers forward questions and not inverse ones: the reversal curse."""
    result = _run_both(tokenizer, tmp_path, lambda r: r["answer"],
                       lambda r: full_name(PEOPLE[(r["person"] + 1) % len(PEOPLE)]))
    assert result["forward_exact"] == 1.0 and result["forward_n"] == 18
    assert result["inverse_full_name"] == result["inverse_first_name"] == 0.0
    assert result["inverse_n"] == 15 and result["inverse_dropped"] == 0
    assert all(level["dropped"] == 0 for level in result["per_level"].values())


# 800 people of seed 0: five birth dates are each shared by two people, one pair across the
# train (0..399) and test halves
SHARED_DATES = {"September 16, 2031": (13, 758), "February 26, 2060": (83, 520),
                "January 1, 1992": (216, 554), "February 24, 1994": (295, 428),
                "January 18, 1936": (516, 562)}


def test_a_question_that_fits_two_people_is_not_asked(bios_config):
    from corpus_gen.bios.family import eval_sets

    sets = eval_sets(bios_config(people=800, inverse=True))
    forward = [r for split in ("train", "test") for r in sets[f"qa_{split}"]()]
    dates = Counter(r["answer"] for r in forward if r["attribute"] == "birth_date")
    assert {date for date, n in dates.items() if n > 1} == set(SHARED_DATES)
    sharing = sorted(p for pair in SHARED_DATES.values() for p in pair)
    rows = {split: list(sets[f"inverse_{split}"]()) for split in ("train", "test")}
    for split, people in (("train", range(400)), ("test", range(400, 800))):
        asked = Counter(r["level"] for r in rows[split])
        shared = len([p for p in sharing if p in people])
        assert asked == {1: 400 - shared, 2: 400, 3: 400, 4: 400, 5: 400}
    every = rows["train"] + rows["test"]
    assert sorted(set(range(800)) - {r["person"] for r in every if r["level"] == 1}) == sharing
    # every question asked has one right answer: no two rows of a level share a prompt
    assert all(n == 1 for n in Counter((r["level"], r["prompt"]) for r in every).values())


def test_inverse_qa_documents_leave_out_the_questions_that_fit_two_people(bios_config):
    from corpus_gen.bios.family import layout, records

    config = bios_config(people=800, mode="mix", inverse_qa=1, qa_loss="answer")
    docs = [d for d in records(config, 0, layout(config).records) if d.meta["kind"] == "inverse"]
    questions = {d.meta["person"]["id"]: d.text.count("Who ") for d in docs}
    assert len(questions) == 400 and all(len(d.masked) == d.text.count("Who ") for d in docs)
    assert {p: n for p, n in questions.items() if n != len(LEVELS)} == {13: 4, 83: 4, 216: 4,
                                                                        295: 4}
    shared = next(d for d in docs if d.meta["person"]["id"] == 295)
    assert shared.text.startswith(inverse.inverse_question(shared.meta["person"], 2))


def test_the_count_is_exact_and_the_same_by_array_or_by_sorting(monkeypatch):
    """At the paper's 100K people most birth dates are shared: level 1 is mostly not asked,
    levels 2 and 3 a few hundred times; counted in arrays or by sorting, the same people."""
    by_array = inverse._population_levels.__wrapped__(0, 100_000, None)
    monkeypatch.setattr(inverse, "_DENSE", 0)
    assert (inverse._population_levels.__wrapped__(0, 100_000, None) == by_array).all()
    unasked = [int((by_array >> (level - 1) & 1 == 0).sum()) for level in LEVELS]
    assert unasked == [77405, 739, 1191, 0, 0]


def test_the_task_reports_the_questions_not_asked_per_level(tokenizer, tmp_path):
    """Person 0's level-1 question and everyone's level-3 question fit someone else too: the
    corpus left them out, the task counts them and scores the others."""
    inverse = [r for r in _inverse() if r["level"] != 3 and (r["level"], r["person"]) != (1, 0)]
    result = _run_both(tokenizer, tmp_path, lambda r: r["answer"], lambda r: r["answer"], inverse)
    assert (result["inverse_n"], result["inverse_dropped"], result["inverse_full_name"]) == \
        (11, 4, 1.0)
    assert {level: (s["n"], s["dropped"], s["full_name"])
            for level, s in result["per_level"].items()} == {
        "1": (2, 1, 1.0), "2": (3, 0, 1.0), "3": (0, 3, None), "4": (3, 0, 1.0),
        "5": (3, 0, 1.0)}


def test_mix_mode_can_train_inverse_qa_of_the_train_half(bios_config):
    from corpus_gen.bios.family import layout, records

    config = bios_config(people=40, mode="mix", inverse_qa=1, qa_loss="answer")
    docs = list(records(config, 0, layout(config).records))
    inverse = [d for d in docs if d.meta["kind"] == "inverse"]
    assert len(docs) == 40 + 20 + 20 and len(inverse) == 20
    assert sorted(d.meta["person"]["id"] for d in inverse) == list(range(20))  # the train half
    for doc in inverse:
        person = doc.meta["person"]
        name = f"{person['first']} {person['middle']} {person['last']}"
        assert doc.text.count("Who ") == len(LEVELS) == doc.text.count(f"Answer: {name}.")
        assert len(doc.masked) == len(LEVELS)  # every question masked, every answer counted
        kept = "".join(doc.text[b:e] for (_, b), (e, _) in
                       zip(doc.masked, [*doc.masked[1:], (len(doc.text), 0)]))
        assert kept.split() == f"{name}. {name}. {name}. {name}. {name}.".split()
    # the same config without inverse QA has the same biographies and QA, position for position
    plain = list(records(bios_config(people=40, mode="mix", qa_loss="answer"), 0, 60))
    assert [d.text for d in plain] == [d.text for d in docs[:60]]


def test_inverse_qa_needs_mix_mode(bios_config):
    from corpus_gen.core.errors import ConfigError

    with pytest.raises(ConfigError, match="inverse_qa=1: needs mode=mix or qa"):
        bios_config(people=40, inverse_qa=1)


def test_a_full_name_needs_its_period(tokenizer, tmp_path):
    rows = _inverse()
    results = _score_inverse(tokenizer, tmp_path, rows,
                             [f"{row['answer']} {ELSEWHERE}" for row in rows])
    assert (results["full_name"], results["first_name"]) == (0.0, 1.0)


def test_the_overall_rate_pools_rows_not_levels(tokenizer, tmp_path):
    # level 1 keeps one row, answered wrong: 12 of 13 rows right (a mean of the levels: 0.8)
    rows = [row for row in _inverse() if row["level"] != 1 or row["person"] == 2]
    answers = [full_name(PEOPLE[(row["person"] + 1) % 3]) if row["level"] == 1
               else row["answer"] for row in rows]
    results = _score_inverse(tokenizer, tmp_path, rows, answers)
    assert results["n"] == 13 and results["per_level"]["1"]["full_name"] == 0.0
    assert results["full_name"] == results["first_name"] == pytest.approx(12 / 13)


def test_a_first_name_of_several_tokens_must_match_whole(tokenizer, tmp_path):
    person = {**PEOPLE[1], "first": "Boada"}  # Bo|a|da
    rows = [json.loads(json.dumps(row)) for row in inverse_rows(person, "test", tuple(LEVELS))]
    assert len(tokenizer.encode(" Boada")) > 1
    results = _score_inverse(tokenizer, tmp_path, rows, [f"Bo {ELSEWHERE}"] * len(rows))
    assert (results["full_name"], results["first_name"]) == (0.0, 0.0)


def test_the_headlines_are_their_own_fields(tokenizer, tmp_path):
    results = _run_both(tokenizer, tmp_path,
                        lambda row: f"{row['answer'].split(' ')[0]} {ELSEWHERE}",
                        lambda row: f"{row['first_name']} {ELSEWHERE}")
    assert results["forward_exact"] == 0.0  # the forward answers' first tokens are right
    assert (results["inverse_full_name"], results["inverse_first_name"]) == (0.0, 1.0)


def test_max_people_bounds_the_inverse_rows_too(tokenizer, tmp_path):
    results = _run_both(tokenizer, tmp_path, lambda row: row["answer"],
                        lambda row: row["answer"], max_people=2)
    assert (results["forward_n"], results["inverse_n"], results["inverse_dropped"]) == (12, 10, 0)
