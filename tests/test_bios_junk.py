"""Junk mixes for bios corpora (Part 3.3): J junk documents per useful one, one useful at its
keyed place in each run of J + 1, the useful documents in exactly the order of the corpus
without junk; junk biographies of people outside the population (names no real person has),
never in a split or an eval set; `<useful>` first in exactly the useful documents, one token;
the usual independence of workers and shard size, and refusal of bad input naming the key."""

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from corpus_gen.bios.family import eval_sets, layout, records
from corpus_gen.bios.people import ATTRIBUTES, draw_people, full_name, person_dicts
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.seeding import derive_key, randint
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer
from launch.cli import main
from tests.integer_task_corpus import assert_corpus_independent_of_workers_and_shard_size

ROOT = Path(__file__).resolve().parent.parent
PIECE = "\u2581<useful>"


def _stream(config) -> list:
    return list(records(config, 0, layout(config).records))


def _tiny_pools(tmp_path: Path) -> str:
    """Pools of 2 + 2 first, 2 middle and 3 last names: a name space of 24."""
    names = {"first_name_male": "Al\nBo\n", "first_name_female": "Cy\nDi\n",
             "middle_name": "Max\nNed\n", "last_name": "Xu\nYi\nZo\n"}
    for name in ("city", "university", "field"):
        (tmp_path / f"{name}.txt").write_text(f"{name.title()} A\n{name.title()} B\n")
    (tmp_path / "company.txt").write_text("Acme; Springfield, IL\nBolt; Salem, OR\n")
    for name, text in names.items():
        (tmp_path / f"{name}.txt").write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("overrides, kinds", [
    ({"people": 60, "junk_ratio": 3}, {"bio": 60, "junk": 180}),
    ({"people": 40, "variant": "multi2_permute", "mode": "mix", "junk_ratio": 2},
     {"bio": 80, "qa": 20, "junk": 200}),
    ({"people": 30, "style": "r", "junk_ratio": 1}, {"bio": 30, "junk": 30}),
])
def test_each_run_of_j_plus_one_holds_one_useful_document_at_its_keyed_place(bios_config,
                                                                             overrides, kinds):
    config = bios_config(**overrides)
    period = config.junk_ratio + 1
    docs = _stream(config)
    total = sum(kinds.values())
    assert layout(config).records == len(docs) == total
    assert Counter(d.meta["kind"] for d in docs) == kinds
    useful = total - kinds["junk"]
    summary = layout(config).summary
    assert (summary["useful_documents"], summary["junk_documents"], summary["junk_ratio"]) == (
        useful, kinds["junk"], config.junk_ratio)
    assert summary["biographies"] == kinds["bio"]  # what train.exposures counts: no junk
    places = [[i for i in range(period) if docs[u * period + i].meta["kind"] != "junk"]
              for u in range(useful)]
    assert all(len(p) == 1 for p in places)
    drawn = randint(derive_key(config.seed, "bios", "mix"), np.arange(useful), period)
    assert [p[0] for p in places] == drawn.tolist()
    assert set(drawn.tolist()) == set(range(period))  # every place of a run is used


@pytest.mark.parametrize("overrides, digest", [
    ({"people": 50}, "9919cdff5386e0dce1cbeb654c5af517fc90936bf329fe3da83bef396da33cab"),
    ({"people": 40, "variant": "multi2_permute", "mode": "mix", "qa_loss": "answer"},
     "0d846cbc43a44e06fccf893c4d4a33ebca6f344b9a2bbd6d42fbfd3874fe4818"),
    ({"people": 30, "style": "r", "mode": "mix"},
     "fcdb5c093a05533de0aa0d89e34b28464149f6acffc0e285bfebca0693f8acd6"),
])
def test_the_useful_documents_are_the_stream_without_junk_in_its_order(bios_config, overrides,
                                                                       digest):
    plain = _stream(bios_config(**overrides, junk_ratio=0))
    # the stream as bios wrote it before junk mixes existed (family version 2)
    written = hashlib.sha256()
    for doc in plain:
        written.update(orjson.dumps([doc.text, doc.meta, doc.masked]))
    assert written.hexdigest() == digest
    for ratio in (1, 4):
        mixed = _stream(bios_config(**overrides, junk_ratio=ratio))
        useful = [d for d in mixed if d.meta["kind"] != "junk"]
        assert len(mixed) == len(plain) * (ratio + 1)
        assert [(d.text, d.meta, d.masked) for d in useful] == [
            (d.text, d.meta, d.masked) for d in plain]


def test_junk_names_are_the_names_outside_the_population(bios_config, tmp_path):
    data = _tiny_pools(tmp_path)
    config = bios_config(people=20, junk_ratio=7, data_dir=data)
    pools = load_pools(data)
    every = [full_name(p) for p in person_dicts(draw_people(config.seed, np.arange(24), pools),
                                                pools)]
    assert len(set(every)) == 24  # the bijection: 24 people, 24 names
    real, outside = set(every[:20]), set(every[20:])
    junk = [d for d in _stream(config) if d.meta["kind"] == "junk"]
    assert len(junk) == 140
    assert sorted({d.meta["person"]["id"] for d in junk}) == [20, 21, 22, 23]
    names = Counter(full_name(d.meta["person"]) for d in junk)
    assert set(names) == outside and not set(names) & real
    assert min(names.values()) >= 20  # uniform over the 4: 35 each expected
    for doc in junk:
        assert not any(name in doc.text for name in real)


def test_junk_is_a_fresh_person_biography_without_split(bios_config):
    config = bios_config(people=3000, junk_ratio=3, variant="single+fullname")
    pools = load_pools(None)
    real = {full_name(p) for p in person_dicts(draw_people(config.seed, np.arange(3000), pools),
                                               pools)}
    junk = [d for d in _stream(config) if d.meta["kind"] == "junk"]
    assert len(junk) == 9000
    ids = [d.meta["person"]["id"] for d in junk]
    assert min(ids) >= 3000 and max(ids) < pools.name_space
    assert len(set(ids)) > 0.999 * len(ids)  # 9,000 draws of 160M: repeats are rare
    truth = {p["id"]: p for p in person_dicts(draw_people(config.seed, np.array(ids), pools),
                                              pools)}
    for doc in junk:
        person = doc.meta["person"]
        assert set(doc.meta) == {"kind", "junk", "person", "order"}  # no split, no celebrity
        assert doc.meta["junk"] == "bios" and person == truth[person["id"]]
        assert full_name(person) not in real
        assert doc.text.count(full_name(person)) == 6  # fullname: the variant's rendering
        for attribute in ATTRIBUTES:
            assert person[attribute] in doc.text


def test_qa_documents_and_eval_sets_hold_only_the_real_population(bios_config):
    config = bios_config(people=80, mode="mix", junk_ratio=3)
    docs = _stream(config)
    qa = [d.meta["person"]["id"] for d in docs if d.meta["kind"] == "qa"]
    assert sorted(qa) == list(range(40))
    assert all(d.meta["split"] in ("train", "test") for d in docs if d.meta["kind"] != "junk")
    sets = eval_sets(config)
    assert {r["person"] for r in sets["qa_train"]()} == set(range(40))
    assert {r["person"] for r in sets["qa_test"]()} == set(range(40, 80))


def test_documents_are_the_same_whatever_the_range_drawn(bios_config):
    config = bios_config(people=700, junk_ratio=1, domain_token=True, mode="mix")
    whole = _stream(config)
    assert len(whole) == 2100
    for start, stop in ((3, 4), (511, 1030), (1399, 1401), (2099, 2100)):
        part = list(records(config, start, stop))
        assert [(d.text, d.meta) for d in part] == [(d.text, d.meta) for d in whole[start:stop]]


def _shard_documents(out: Path, manifest: dict) -> list[dict]:
    return [s for shard in manifest["shards"] for s in read_shard(out / shard["name"])]


@pytest.mark.parametrize("style", ["s", "r"])
def test_domain_token_starts_exactly_the_useful_documents_as_one_token(bios_config, tmp_path,
                                                                        style):
    config = bios_config(people=120, style=style, mode="mix", qa_loss="answer", junk_ratio=3,
                         domain_token=True, records_per_shard=200)
    out = tmp_path / "c"
    manifest = generate_corpus(config, out, progress=False, log=lambda *_: None)
    assert manifest["tokenizer"]["user_symbols"] == [PIECE]
    tokenizer = Tokenizer.load(out / "tokenizer.model")
    useful_id = tokenizer.token_id(PIECE)
    assert useful_id is not None and tokenizer.encode("<useful>") == [useful_id]
    documents = _shard_documents(out, manifest)
    kinds = Counter(d["json"]["kind"] for d in documents)
    assert kinds == {"bio": 120, "qa": 60, "junk": 540}
    for doc in documents:
        ids, text = doc["ids"].tolist(), doc["json"]["text"]
        assert ids == tokenizer.processor.encode(text)  # SentencePiece itself agrees
        if doc["json"]["kind"] == "junk":
            assert useful_id not in ids and "<useful>" not in text
            continue
        assert ids[0] == useful_id and ids.count(useful_id) == 1
        assert text.startswith("<useful> ") and text.count("<useful>") == 1
        # answer-only QA: the token is out of the loss with the question it opens
        assert doc["mask"][0] == (doc["json"]["kind"] == "bio")
    # without junk, every document is useful
    plain = bios_config(people=50, domain_token=True)
    assert all(d.text.startswith("<useful> ") for d in _stream(plain))
    assert layout(plain).user_symbols == (PIECE,)
    assert layout(bios_config(people=50, junk_ratio=3)).user_symbols == ()


def test_corpus_is_byte_identical_whatever_the_workers_and_the_shard_size(bios_config,
                                                                          tmp_path):
    # (200 biographies + 50 QA) x (1 + 3)
    assert_corpus_independent_of_workers_and_shard_size(
        lambda per_shard: bios_config(people=100, variant="multi2", mode="mix", junk_ratio=3,
                                      domain_token=True, records_per_shard=per_shard),
        tmp_path, 1000)


@pytest.mark.parametrize("overrides, key", [
    ({"junk_ratio": -1}, "junk_ratio"),
    ({"junk_ratio": 1024}, "junk_ratio"),
    ({"junk": "random"}, "junk"),
    ({"junk": "noise", "junk_ratio": 1}, "junk"),
])
def test_bad_values_are_refused_naming_their_key(bios_config, overrides, key):
    with pytest.raises(ConfigError) as err:
        bios_config(**overrides)
    assert err.value.key == key


def test_junk_needs_names_outside_the_population(bios_config, tmp_path):
    data = _tiny_pools(tmp_path)
    with pytest.raises(ConfigError) as err:
        bios_config(people=24, junk_ratio=1, data_dir=data)
    assert err.value.key == "junk"
    assert bios_config(people=24, data_dir=data).junk_ratio == 0  # no junk drawn: fine
    assert bios_config(people=23, junk_ratio=1, data_dir=data).junk_ratio == 1


def test_physlm_gen_refuses_bad_junk_in_one_line(tmp_path, capsys):
    config = str(ROOT / "configs/corpus/bios_junk.yaml")
    out = tmp_path / "d"
    for override, line in (
            ("junk_ratio=-1", "command line: junk_ratio=-1: must be in [0, 1023]"),
            ("junk=noise", "command line: junk='noise': one of bios"),
            ("people=160000000", f"{config}: junk='bios': bios junk needs names outside the "
                                 "population: people < the 160,000,000 names the pools allow")):
        assert main(["gen", config, override, "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"physlm gen: error: {line}\n"
    assert not out.exists()
