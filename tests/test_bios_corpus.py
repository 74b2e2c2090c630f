"""Each bios variant, checked on the documents the family produces, and the draws meant to be
independent are: QA orders apart from biography orders, each attribute's template its own."""

import re
from collections import defaultdict

import numpy as np

from corpus_gen.bios import biographies
from corpus_gen.bios.bio_r import format_date
from corpus_gen.bios.family import eval_sets, layout, records
from corpus_gen.bios.people import ATTRIBUTES, draw_people, full_name
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.qa import QUESTIONS
from corpus_gen.bios.stream import doc_key
from corpus_gen.bios.templates import MODES
from corpus_gen.bios.units import _PLAN_START


def _all(config):
    return list(records(config, 0, layout(config).records))


def _sentences(text):
    return re.split(r"(?<=\.)(?<!St\.)(?<!C\.H\.) (?=[A-Z])", text)  # "St. Louis" is no end


def test_single_gives_each_person_one_biography_stating_all_six_attributes(bios_config):
    docs = _all(bios_config(people=400))
    assert sorted(d.meta["person"]["id"] for d in docs) == list(range(400))
    for doc in docs:
        person = doc.meta["person"]
        assert doc.text.startswith(full_name(person)) or full_name(person) in _sentences(
            doc.text)[0]
        assert doc.text.count(full_name(person)) == 1  # pronouns after the first sentence
        for attribute in ATTRIBUTES:
            assert person[attribute] in doc.text
        assert doc.meta["order"] == [0, 1, 2, 3, 4, 5]  # as JSON gives it back
        assert "  " not in doc.text and doc.text == doc.text.strip()


def test_multi_gives_independently_templated_copies(bios_config):
    docs = _all(bios_config(people=200, variant="multi5"))
    by_person = defaultdict(list)
    for doc in docs:
        by_person[doc.meta["person"]["id"]].append(doc)
    assert all(len(v) == 5 for v in by_person.values())
    assert all(sorted(d.meta["copy"] for d in v) == list(range(5)) for v in by_person.values())
    distinct = sum(len({d.text for d in v}) == 5 for v in by_person.values())
    assert distinct >= 195


def test_permute_shuffles_sentences_and_names_the_person_first(bios_config):
    docs = _all(bios_config(people=300, variant="multi2_permute"))
    orders = {tuple(doc.meta["order"]) for doc in docs}
    assert len(orders) > 100
    for doc in docs:
        person = doc.meta["person"]
        first = _sentences(doc.text)[0]
        assert full_name(person) in first
        assert person[ATTRIBUTES[doc.meta["order"][0]]] in first


def test_fullname_puts_the_name_in_every_sentence(bios_config):
    for doc in _all(bios_config(people=100, variant="single_fullname")):
        assert doc.text.count(full_name(doc.meta["person"])) == 6


def test_bior_states_every_attribute_in_50_to_200_words(bios_config):
    docs = _all(bios_config(people=300, style="r", variant="multi2"))
    for doc in docs:
        p = doc.meta["person"]
        dates = {format_date(p["birth_month"], p["birth_day"], p["birth_year"], style)
                 for style in range(5)}
        assert any(date in doc.text for date in dates)
        for attribute in ATTRIBUTES[1:]:
            assert p[attribute] in doc.text
        assert 50 <= len(doc.text.split()) <= 200
    assert len({d.text for d in docs}) == len(docs)


def test_qa_eval_sets_split_people_and_answer_from_the_ground_truth(bios_config):
    config = bios_config(people=300, qa_train_fraction=0.6)
    truth = {d.meta["person"]["id"]: d.meta["person"] for d in _all(config)}
    sets = {name: list(rows()) for name, rows in eval_sets(config).items()}
    train_people = {r["person"] for r in sets["qa_train"]}
    test_people = {r["person"] for r in sets["qa_test"]}
    assert train_people == set(range(180)) and test_people == set(range(180, 300))
    assert len(sets["qa_train"]) == 6 * 180 and len(sets["qa_test"]) == 6 * 120
    for row in sets["qa_train"] + sets["qa_test"]:
        person = truth[row["person"]]
        assert row["answer"] == person[row["attribute"]]
        question = QUESTIONS[row["attribute"]].format(name=full_name(person))
        assert row["question"] == question and row["prompt"] == question + "\nAnswer:"


def test_mix_mode_adds_qa_documents_with_answer_only_loss(bios_config):
    config = bios_config(people=200, mode="mix", qa_loss="answer", qa_copies=2)
    docs = _all(config)
    qa_docs = [d for d in docs if d.meta["kind"] == "qa"]
    assert len(qa_docs) == 2 * 100 and {d.meta["split"] for d in qa_docs} == {"train"}
    for doc in qa_docs:
        person = doc.meta["person"]
        assert len(doc.masked) == 6
        for start, end in doc.masked:
            assert doc.text[start:end].endswith("\nAnswer:")
        answers = [doc.text[end:].split(".", 1)[0].strip() for _, end in doc.masked]
        # dates contain no '.', so the text up to the next '.' is the answer
        assert sorted(answers) == sorted(person[a].split(".")[0] for a in ATTRIBUTES)


def test_celebrities_get_augmented_biographies_and_are_the_qa_train_people(bios_config):
    config = bios_config(people=500, celebrities=100, variant="single",
                         celebrity_variant="multi3_permute")
    docs = _all(config)
    celebrity_docs = [d for d in docs if d.meta["celebrity"]]
    assert len(celebrity_docs) == 300 and len(docs) == 300 + 400
    assert all(d.meta["split"] == ("train" if d.meta["celebrity"] else "test") for d in docs)
    assert len({tuple(d.meta["order"]) for d in celebrity_docs}) > 50
    assert {tuple(d.meta["order"]) for d in docs if not d.meta["celebrity"]} == {(0, 1, 2, 3, 4, 5)}
    qa_train = list(eval_sets(config)["qa_train"]())
    assert {r["person"] for r in qa_train} == set(range(100))


def test_qa_documents_are_shuffled_even_without_permute_and_follow_their_order(bios_config):
    qa = [d for d in _all(bios_config(people=200, mode="mix")) if d.meta["kind"] == "qa"]
    assert len(qa) == 100
    for doc in qa:
        name = full_name(doc.meta["person"])
        where = [doc.text.index(QUESTIONS[a].format(name=name)) for a in ATTRIBUTES]
        assert tuple(np.argsort(where)) == tuple(doc.meta["order"])
    # 100 draws of 720 orders: about 93 distinct
    assert len({tuple(d.meta["order"]) for d in qa}) >= 80


def test_a_persons_qa_order_is_independent_of_their_biography_order(bios_config):
    # QA and biography documents have their own keys: the orders agree 100/720 times by chance
    docs = _all(bios_config(people=200, mode="mix", variant="permute"))
    bio = {d.meta["person"]["id"]: d.meta["order"] for d in docs if d.meta["kind"] == "bio"}
    qa = {d.meta["person"]["id"]: d.meta["order"] for d in docs if d.meta["kind"] == "qa"}
    assert len(qa) == 100
    same = sum(qa[p] == bio[p] for p in qa)
    assert same <= 3


def test_each_attributes_template_is_its_own_draw(bios_config):
    # birth_city and major have 51 templates each: the same index for 1/51 of the people
    config = bios_config(people=2000)
    pools = load_pools(config.data_dir)
    index = np.arange(2000)
    people = draw_people(config.seed, index, pools)
    keys = doc_key(index, False, 0)
    plans = biographies.bio_s_plans(config, pools, people, keys, np.zeros(2000, dtype=np.int64))
    # the canonical order: column a is attribute a's plan
    template = (plans - _PLAN_START[np.arange(6)]) // len(MODES)
    city, major = ATTRIBUTES.index("birth_city"), ATTRIBUTES.index("major")
    assert (template[:, city] == template[:, major]).sum() < 100
    assert len({tuple(row) for row in template.tolist()}) == 2000
