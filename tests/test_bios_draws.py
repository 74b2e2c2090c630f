"""Biography draws meant to be independent are: each QA document's question order is drawn
(permute or not) and is its text's order, apart from the person's biography order, and each
attribute's template is its own draw."""
import numpy as np
import pytest

from corpus_gen.bios import biographies
from corpus_gen.bios.family import layout, records
from corpus_gen.bios.people import ATTRIBUTES, draw_people, full_name
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.qa import QUESTIONS
from corpus_gen.bios.stream import doc_key
from corpus_gen.bios.templates import MODES
from corpus_gen.bios.units import _PLAN_START
from corpus_gen.core.config import load_config
from corpus_gen.core.registry import schemas


@pytest.fixture
def bios_config(tmp_path):
    def make(**overrides):
        (tmp_path / "bios.yaml").write_text("family: bios\n")
        items = {"people": 300, "tokenizer.vocab_size": 1000, "tokenizer.sample_records": 500}
        items.update(overrides)
        return load_config(tmp_path / "bios.yaml", [f"{k}={v}" for k, v in items.items()],
                           schemas())
    return make


def _docs(config):
    return list(records(config, 0, layout(config).records))


def test_qa_documents_are_shuffled_even_without_permute_and_follow_their_order(bios_config):
    qa = [d for d in _docs(bios_config(people=200, mode="mix")) if d.meta["kind"] == "qa"]
    assert len(qa) == 100
    for doc in qa:
        name = full_name(doc.meta["person"])
        where = [doc.text.index(QUESTIONS[a].format(name=name)) for a in ATTRIBUTES]
        assert tuple(np.argsort(where)) == tuple(doc.meta["order"])
    # 100 draws of 720 orders: about 93 distinct
    assert len({tuple(d.meta["order"]) for d in qa}) >= 80


def test_a_persons_qa_order_is_independent_of_their_biography_order(bios_config):
    # QA and biography documents have their own keys: the orders agree 100/720 times by chance
    docs = _docs(bios_config(people=200, mode="mix", variant="permute"))
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
