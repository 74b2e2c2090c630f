"""Knowledge manipulation (Part 3.2): the bios corpus's manipulation sets and training documents,
and the `manipulation` task's forced-choice scoring: planted models that answer right score 1.0
and wrong 0.0, reasoning is checked token for token, and a model at init scores the 0.5 of a
coin."""

import json

import pytest
import torch

from corpus_gen.bios.manipulation import FORMS, QUESTIONS, answer_text, verdict_lead
from corpus_gen.bios.people import MONTHS
from corpus_gen.bios.qa import answered
from corpus_gen.core.tokenizer import Tokenizer, train_tokenizer
from tests.conftest import record_eval_set
from tests.test_qa_eval import PlantedModel, context_for
from trainer.eval import manipulation
from trainer.model import GPT, ModelConfig


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The eval sets of a 300-person corpus with manipulation sets (rows only; nothing written)."""
    from corpus_gen.bios.family import eval_sets
    from corpus_gen.core.config import load_config
    from corpus_gen.core.registry import schemas

    path = tmp_path_factory.mktemp("manipulation") / "bios.yaml"
    path.write_text("family: bios\npeople: 300\nmanipulation: true\n")
    config = load_config(path, [], schemas())
    return {name: [json.loads(json.dumps(r)) for r in rows()]
            for name, rows in eval_sets(config).items()}


@pytest.fixture(scope="module")
def tokenizer(sets) -> Tokenizer:
    """Trained on every row written as a training document writes it (both verdicts)."""
    rows = sets["manipulation_train"] + sets["manipulation_test"]
    texts = [answered(r["prompt"], answer_text(r["form"], r["reasoning"], v))
             for r in rows[:600] for v in ("yes", "no")]
    return Tokenizer(train_tokenizer(texts, vocab_size=800))


def test_each_person_gets_every_question_in_both_forms_with_true_verdicts(sets):
    forward = {(r["person"], r["attribute"]): r["answer"] for r in sets["qa_test"]}
    rows = sets["manipulation_test"]
    assert len(rows) == 150 * len(QUESTIONS) * len(FORMS)
    for row in rows:
        month, day, year = forward[(row["person"], "birth_date")].replace(",", "").split()
        want = {"even_month": (MONTHS.index(month) + 1) % 2 == 0, "even_year": int(year) % 2 == 0,
                "early_day": int(day) <= 14}.get(row["question"])
        if want is not None:
            assert row["verdict"] == ("yes" if want else "no")
            assert row["reasoning"] == {"even_month": month, "even_year": year,
                                        "early_day": f"day {day}"}[row["question"]]
        assert row["prompt"].endswith(FORMS[row["form"]])
    # comparisons: a partner of the same (held-out) half, never the person itself
    names = {r["person"]: r["name"] for r in sets["qa_test"]}
    for row in rows:
        if row["question"] == "earlier_year":
            other = row["prompt"].split(" than ")[1].split("?")[0]
            assert other in names.values() and other != names[row["person"]]
            mine, theirs = map(int, row["reasoning"].split(" and "))
            assert row["verdict"] == ("yes" if mine < theirs else "no")
    # each classification is near a fair coin over 150 people
    for kind in ("even_month", "even_year", "early_day"):
        yes = [r["verdict"] == "yes" for r in rows if r["question"] == kind and r["form"] == "cot"]
        assert 0.35 < sum(yes) / len(yes) < 0.65


def test_the_corpus_writes_manipulation_only_when_asked(bios_config):
    from corpus_gen.bios.family import eval_sets, layout, records

    assert not any(s.startswith("manipulation") for s in eval_sets(bios_config(people=20)))
    config = bios_config(people=40, mode="mix", manipulation_qa=1, qa_loss="answer",
                         manipulation_forms="[cot]")
    docs = list(records(config, 0, layout(config).records))
    assert len(docs) == 40 + 20 + 20
    taught = [d for d in docs if d.meta["kind"] == "manipulation_cot"]
    assert sorted(d.meta["person"]["id"] for d in taught) == list(range(20))  # the train half
    for doc in taught:
        assert doc.text.count("Answer step by step:") == len(QUESTIONS) == len(doc.masked)
        assert ", so yes." in doc.text or ", so no." in doc.text
    # the same config without manipulation documents: the same biographies and QA, in place
    plain = list(records(bios_config(people=40, mode="mix", qa_loss="answer"), 0, 60))
    assert [d.text for d in plain] == [d.text for d in docs[:60]]


def test_manipulation_documents_need_mix_mode_and_known_forms(bios_config):
    from corpus_gen.core.errors import ConfigError

    with pytest.raises(ConfigError, match="manipulation_qa=1: needs mode=mix or qa"):
        bios_config(people=40, manipulation_qa=1)
    with pytest.raises(ConfigError, match="manipulation_forms='cott': unknown form"):
        bios_config(people=40, manipulation_forms="[cott]")


def planted(tokenizer: Tokenizer, rows: list[dict], verdict, misreason: bool = False
            ) -> PlantedModel:
    """Greedy decoding states the true reasoning after a cot prompt (with `misreason`, its
    first token replaced by another); after that context the likelier verdict is
    `verdict(row)`."""
    table: dict[tuple[int, ...], int] = {}
    for row in rows:
        prompt = tokenizer.encode(row["prompt"])
        lead = verdict_lead(row["prompt"], row["form"], row["reasoning"])
        said = tokenizer.encode(answered(lead, verdict(row)))[len(prompt):]
        if misreason and row["form"] == "cot":
            said[0] = (said[0] + 1) % tokenizer.vocab_size
        for i, token in enumerate(said):
            table[tuple(prompt + said[:i])] = token
    return PlantedModel(tokenizer.vocab_size, table, fallback=tokenizer.eos_id)


def _other(verdict: str) -> str:
    return "no" if verdict == "yes" else "yes"


@pytest.mark.parametrize("verdict, misreason, accuracy, reasoned", [
    (lambda r: r["verdict"], False, 1.0, 1.0),
    (lambda r: _other(r["verdict"]), False, 0.0, 1.0),
    (lambda r: r["verdict"], True, 1.0, 0.0),
])
@pytest.mark.parametrize("batch_size", [1, 16])
def test_planted_models_score_their_verdicts_and_reasoning(sets, tokenizer, tmp_path, verdict,
                                                           misreason, accuracy, reasoned,
                                                           batch_size):
    rows = sets["manipulation_test"][:40]
    model = planted(tokenizer, rows, verdict, misreason)
    result = manipulation.score_rows(context_for(model, tokenizer, tmp_path), rows, batch_size)
    assert set(result) == set(FORMS)
    for form in FORMS:
        assert (result[form]["accuracy"], result[form]["n"]) == (accuracy, 20)
        assert set(result[form]["per_question"]) == set(QUESTIONS)
        assert all(q["accuracy"] == accuracy for q in result[form]["per_question"].values())
    assert result["cot"]["reasoning"] == reasoned and "reasoning" not in result["plain"]
    assert result["cot"]["reasoned_accuracy"] == (accuracy if reasoned else None)


def test_majority_is_the_share_of_the_commoner_verdict(sets, tokenizer, tmp_path):
    rows = [r for r in sets["manipulation_test"] if r["form"] == "plain"][:50]
    model = planted(tokenizer, rows, lambda r: "yes")
    result = manipulation.score_rows(context_for(model, tokenizer, tmp_path), rows, 8)
    yes = sum(r["verdict"] == "yes" for r in rows) / len(rows)
    assert result["plain"]["accuracy"] == yes  # always "yes"
    assert result["plain"]["majority"] == max(yes, 1 - yes)


def test_a_model_at_init_scores_chance(sets, tokenizer, tmp_path):
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=tokenizer.vocab_size,
                            ctx=128))
    rows = sets["manipulation_test"]
    result = manipulation.score_rows(context_for(model, tokenizer, tmp_path), rows, 64)
    for form in FORMS:
        assert result[form]["n"] == 750
        assert abs(result[form]["accuracy"] - manipulation.CHANCE) < 0.06
    assert result["cot"]["reasoning"] < 0.05


def test_the_task_reads_the_sets_and_refuses_a_corpus_without_them(sets, tokenizer, tmp_path):
    from trainer.errors import TrainError

    model = planted(tokenizer, sets["manipulation_test"][:20], lambda r: r["verdict"])
    options = manipulation.ManipulationOptions(splits=["test"], forms=["cot"], max_people=2)
    with pytest.raises(TrainError, match="manipulation_test.jsonl: missing; the manipulation "
                                         "task needs a bios corpus generated with manipulation"):
        manipulation.run(context_for(model, tokenizer, tmp_path), options)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "manipulation_test.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in sets["manipulation_test"][:20]))
    record_eval_set(tmp_path, "manipulation_test")
    result = manipulation.run(context_for(model, tokenizer, tmp_path), options)
    assert result["test"]["cot"]["accuracy"] == 1.0 and result["test"]["cot"]["n"] == 10
    assert result["chance"] == 0.5 and set(result["test"]) == {"cot"}
    manipulation.plot({"step": 1, **result}, tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 1000


def test_reasoning_wrong_only_in_its_second_token_is_wrong(sets, tokenizer, tmp_path):
    rows = [row for row in sets["manipulation_test"] if row["form"] == "cot"][:12]
    table = {}
    for row in rows:
        prompt = tokenizer.encode(row["prompt"])
        said = tokenizer.encode(answered(verdict_lead(row["prompt"], "cot", row["reasoning"]),
                                         row["verdict"]))[len(prompt):]
        said[1] = (said[1] + 1) % tokenizer.vocab_size
        table.update({tuple(prompt + said[:i]): token for i, token in enumerate(said)})
    model = PlantedModel(tokenizer.vocab_size, table, fallback=tokenizer.eos_id)
    results = manipulation.score_rows(context_for(model, tokenizer, tmp_path), rows, 5)["cot"]
    assert results["reasoning"] == 0.0 and results["reasoned_accuracy"] is None


def test_the_majority_baseline_is_the_commoner_verdict_when_it_is_no(sets, tokenizer, tmp_path):
    plain = [row for row in sets["manipulation_test"] if row["form"] == "plain"]
    rows = ([row for row in plain if row["verdict"] == "yes"][:1]
            + [row for row in plain if row["verdict"] == "no"][:3])
    model = planted(tokenizer, rows, lambda row: "yes")
    results = manipulation.score_rows(context_for(model, tokenizer, tmp_path), rows, 4)["plain"]
    assert (results["accuracy"], results["majority"]) == (0.25, 0.75)
