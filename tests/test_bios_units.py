"""bioS biographies spelled in text units: the same text as the templates, the same tokens as
SentencePiece, and batches that tile the stream."""

import hashlib

import numpy as np
import orjson
import pytest

from corpus_gen.bios.family import batches, eval_sets, layout, records
from corpus_gen.bios.people import (
    ATTRIBUTES,
    draw_people,
    full_name,
    person_dicts,
    person_json,
)
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.templates import MODES, TEMPLATES, render_template
from corpus_gen.bios.units import plan_index, spell, spelling, value_matrix
from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import BATCH, UnitBatch, Units
from corpus_gen.core.registry import schemas
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer


def test_every_plan_spells_the_sentence_its_template_renders():
    pools = load_pools(None)
    people = draw_people(7, np.arange(3000), pools)
    truth = person_dicts(people, pools)
    units = spelling(pools)
    rng = np.random.default_rng(0)
    # every (attribute, template, mode) at least once, each as one sentence of a document
    plans = [(a, t, m) for a in range(len(ATTRIBUTES)) for t in range(len(TEMPLATES[ATTRIBUTES[a]]))
             for m in range(len(MODES))]
    rows = rng.permutation(np.resize(np.arange(len(plans)), 6 * 3000)).reshape(3000, 6)
    numbers = np.array([[plan_index(*plans[k]) for k in row] for row in rows])
    ids, offsets = spell(units, numbers, value_matrix(people))
    for i, row in enumerate(rows):
        person = truth[i]
        # a plan's mode is the pronouns' gender, or "name"
        expected = [render_template(TEMPLATES[ATTRIBUTES[a]][t], name=full_name(person),
                                    gender=MODES[m], use_name=MODES[m] == "name",
                                    value=person[ATTRIBUTES[a]])
                    for a, t, m in (plans[k] for k in row)]
        got = " ".join(units.units.strings[ids[offsets[i]:offsets[i + 1]]])
        assert got == " ".join(expected)


def test_the_vocabulary_stays_small_for_any_number_of_people():
    # a unit per template run and per value of each slot: independent of the population
    assert len(spelling(load_pools(None)).units) < 20_000


def test_units_must_be_single_space_separated_words():
    for bad in ("", " lead", "trail ", "two  spaces"):
        with pytest.raises(ValueError, match="single-space"):
            Units(["ok", bad])


def test_batches_tile_the_stream_and_agree_with_records(bios_config):
    config = bios_config(people=700, mode="mix", qa_copies=2, celebrities=40)
    total = layout(config).records
    texts, kinds = [], []
    for batch in batches(config, 100, total):
        assert 0 < len(batch) <= BATCH
        if isinstance(batch, UnitBatch):
            texts += batch.texts()
            kinds += [orjson.loads(m)["kind"] for m in batch.metas]
        else:
            texts += [r.text for r in batch]
            kinds += [r.meta["kind"] for r in batch]
        assert len({m for m in kinds[-len(batch):]}) == 1  # bios and QA never share a batch
    docs = list(records(config, 100, total))
    assert texts == [d.text for d in docs] and kinds == [d.meta["kind"] for d in docs]
    assert set(kinds) == {"bio", "qa"}


@pytest.mark.parametrize("variant", ["single", "multi2+permute+fullname"])
def test_shards_hold_exactly_the_sentencepiece_tokens_of_their_text(bios_config, tmp_path,
                                                                   variant):
    config = bios_config(people=600, variant=variant, celebrities=30)
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    processor = Tokenizer.load(tmp_path / "c" / "tokenizer.model").processor
    seen = 0
    for shard in manifest["shards"]:
        for sample in read_shard(tmp_path / "c" / shard["name"]):
            assert sample["ids"].tolist() == processor.encode(sample["json"]["text"])
            assert sample["mask"].all()
            seen += 1
    assert seen == manifest["records"]


def test_values_that_json_must_escape_are_stored_exactly(bios_config, tmp_path):
    # a user's pools may hold quotes, backslashes and non-ASCII letters: the JSON written
    # directly from text must be what orjson writes, and read back to the same strings
    data = tmp_path / "pools"
    data.mkdir()
    for name in ("first_name_male", "first_name_female", "middle_name", "last_name", "city",
                 "university", "field"):
        (data / f"{name}.txt").write_text("\n".join(f"{name[:3]}{k}" for k in range(12)))
    (data / "city.txt").write_text('Qu"ote City\nBack\\slash\nSão Paulo\nÅre, SE\n')
    (data / "company.txt").write_text('"Acme" Corp; Ni\\ce, FR\nZürich AG; Zürich, CH\n')
    pools = load_pools(str(data))
    people = draw_people(0, np.arange(500), pools)
    assert [orjson.dumps(p).decode() for p in person_dicts(people, pools)] == person_json(
        people, pools)
    config = bios_config(people=500, data_dir=str(data), variant="multi2+fullname")
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    docs = iter(records(config, 0, manifest["records"]))
    for shard in manifest["shards"]:
        for sample in read_shard(tmp_path / "c" / shard["name"]):
            doc = next(docs)
            assert sample["json"] == {"text": doc.text, **doc.meta}
    assert {"Qu\"ote City", "Back\\slash", "São Paulo"} & {
        d.meta["person"]["birth_city"] for d in records(config, 0, 40)}


# sha256 of every document (text, ground truth, loss spans) and eval-set row of small configs,
# as the generator before text units wrote them (commit 7a17849): the rewrite, and any later
# speed work, must keep the corpus the same. Changing these is a change of the data.
GOLDEN = {
    "single": (["people=300"],
               "209facfe1fe17041e829f28a32f449a499ad8b13f1c19369f8a7b46722ffad00"),
    "multi3_permute_fullname": (["people=200", "variant=multi3+permute+fullname"],
                                "4e2b82c5685e131ddc823ed9014e76deb62047454ec4e63ee82e6560adb34a1a"),
    "mix_celebrity": (["people=300", "celebrities=40", "mode=mix", "qa_copies=2",
                       "qa_loss=answer"],
                      "4a99f3cab0b321498f21bb1dc9675954531623e4566244b150b82a8f1a73390a"),
    "bior_mix": (["people=120", "style=r", "mode=mix"],
                 "de3b255e1248afda0020637321e0932a780e23055f894bd398d004c3d83d70d8"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_documents_and_eval_sets_are_those_of_earlier_versions(tmp_path, case):
    overrides, expected = GOLDEN[case]
    (tmp_path / "bios.yaml").write_text("family: bios\n")
    config = load_config(tmp_path / "bios.yaml", overrides, schemas())
    digest = hashlib.sha256()
    for doc in records(config, 0, layout(config).records):
        # "no_loss": the field's name when these digests were recorded
        digest.update(orjson.dumps({"text": doc.text, **doc.meta, "no_loss": doc.masked}) + b"\n")
    for rows in eval_sets(config).values():
        for row in rows():
            digest.update(orjson.dumps(row) + b"\n")
    assert digest.hexdigest() == expected
