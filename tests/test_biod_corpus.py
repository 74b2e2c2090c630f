"""The biod family (Part 3.3's bioD): its information in bits against brute-force counts and
exact binomials, its population (distinct names, dictionaries, values) and every document read
back by name, the layout of renderings and junk, the eval rows' spans, and the usual
independence of workers and shard size and refusal of bad input."""

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from corpus_gen.biod import population
from corpus_gen.biod.information import information
from corpus_gen.core.counting import log2_binomial
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.seeding import derive_key, randint
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    chi_square_p,
    eval_rows,
    family_config,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent
P_FLOOR = 1e-5  # a chi-square p-value below this fails (fixed seeds: the test is deterministic)
SMALL = ("people=60", "name_pools=[5,4,4]", "attributes=3", "chunks=2", "dictionary=5",
         "chunk_len=2", "alphabet=4")


def _config(*overrides: str):
    return family_config("biod", *overrides)


def _names(config) -> list[str]:
    return list(get_family("biod").vocabulary(config))


def _parse(text: str, config, dictionaries: list) -> dict:
    """A biography read back by token name: its name's pool indices, then per attribute in
    the document's order `<ak>` and C chunks, each looked up in attribute k's dictionary."""
    words = text.split()
    useful = words[0] == "<useful>"
    words = words[useful:]
    pools = len(config.name_pools)
    name = tuple(int(w.split("_")[1]) for w in words[:pools])
    assert [w.split("_")[0] for w in words[:pools]] == [f"n{j}" for j in range(pools)]
    stride = 1 + config.chunks * config.chunk_len
    body = words[pools:]
    assert len(body) == config.attributes * stride
    order, values = [], {}
    for s in range(config.attributes):
        group = body[s * stride:(s + 1) * stride]
        k = int(group[0][2:-1])
        assert group[0] == f"<a{k}>"
        tokens = [int(w[1:]) for w in group[1:]]
        assert all(w[0] == "t" for w in group[1:])
        chunks = [tokens[c:c + config.chunk_len] for c in range(0, len(tokens), config.chunk_len)]
        values[k] = [dictionaries[k].index(chunk) for chunk in chunks]
        order.append(k)
    assert sorted(order) == list(range(config.attributes))
    return {"useful": useful, "name": name, "order": order,
            "values": [values[k] for k in range(config.attributes)]}


def _dictionaries(config) -> list:
    return population.dictionaries(config).tolist()


def _people(config) -> dict[tuple, dict]:
    """name -> eval row of each person (the truth)."""
    names = _names(config)
    return {tuple(int(names[t].split("_")[1]) for t in row["tokens"][slice(*row["name_span"])]):
            row for row in eval_rows(config)}


def test_the_vocabulary_names_each_token_once_with_eos_first():
    config = _config("people=3", "name_pools=[2,3]", "attributes=2", "dictionary=2",
                     "alphabet=3")
    assert _names(config) == ["<eos>", "n0_0", "n0_1", "n1_0", "n1_1", "n1_2", "<a0>", "<a1>",
                              "t0", "t1", "t2", "<useful>"]


def test_information_bits_count_every_possible_population_of_a_tiny_space():
    # N0 = 4 names, N = 2, K = 1, C = 1, D = 2 chunks of L = 1 token over T = 3
    config = _config("people=2", "name_pools=[2,2]", "attributes=1", "chunks=1",
                     "dictionary=2", "chunk_len=1", "alphabet=3")
    name_sets = list(itertools.combinations(range(4), 2))
    chunk_space = list(itertools.product(range(3), repeat=1))
    dictionary_sets = list(itertools.product(itertools.combinations(chunk_space, 2), repeat=1))
    value_tables = list(itertools.product(range(2), repeat=2 * 1 * 1))
    corpora = set(itertools.product(name_sets, dictionary_sets, value_tables))
    bits = information(config)
    assert len(corpora) == 72
    assert 2 ** bits["information_bits"] == pytest.approx(len(corpora), rel=1e-12)
    assert 2 ** bits["name_bits"] == pytest.approx(len(name_sets), rel=1e-12)
    assert 2 ** bits["dictionary_bits"] == pytest.approx(len(dictionary_sets), rel=1e-12)
    assert 2 ** bits["value_bits"] == pytest.approx(len(value_tables), rel=1e-12)
    # what is drawn is one of those corpora
    row_names = {tuple(r["tokens"][:2]) for r in eval_rows(config)}
    assert len(row_names) == 2


def test_information_terms_count_each_part_of_a_small_space():
    # N0 = 6, N = 3; K = 2 dictionaries of D = 3 of the 2**2 chunks; C = 2 values each
    config = _config("people=3", "name_pools=[2,3]", "attributes=2", "chunks=2",
                     "dictionary=3", "chunk_len=2", "alphabet=2")
    names = sum(1 for _ in itertools.combinations(range(6), 3))
    one = sum(1 for _ in itertools.combinations(itertools.product(range(2), repeat=2), 3))
    values = sum(1 for _ in itertools.product(range(3), repeat=3 * 2 * 2))
    bits = information(config)
    assert 2 ** bits["name_bits"] == pytest.approx(names, rel=1e-12)
    assert 2 ** bits["dictionary_bits"] == pytest.approx(one ** 2, rel=1e-12)
    assert 2 ** bits["value_bits"] == pytest.approx(values, rel=1e-12)


@pytest.mark.parametrize("n, k", [(64_000, 2000), (160_000_000, 20_000), (10 ** 12, 20_000),
                                  (343, 50),
                                  (10 ** 120, 50), (2 ** 40, 2 ** 40 - 3), (7, 0), (7, 7),
                                  (1000, 500)])
def test_log2_binomial_matches_the_exact_integer_binomial(n, k):
    assert log2_binomial(n, k) == pytest.approx(math.log2(math.comb(n, k)), rel=1e-12,
                                                abs=1e-9)


def test_the_terms_of_a_larger_corpus_match_exact_integer_binomials():
    config = _config("people=2000", "name_pools=[40,40,40]", "attributes=3", "chunks=2",
                     "dictionary=50", "chunk_len=3", "alphabet=7")
    bits = information(config)
    assert bits["name_bits"] == pytest.approx(math.log2(math.comb(64_000, 2000)), rel=1e-12)
    assert bits["dictionary_bits"] == pytest.approx(3 * math.log2(math.comb(343, 50)),
                                                    rel=1e-12)
    assert bits["value_bits"] == pytest.approx(2000 * 3 * 2 * math.log2(50), rel=1e-12)
    assert bits["information_bits"] == pytest.approx(
        bits["name_bits"] + bits["dictionary_bits"] + bits["value_bits"], rel=1e-15)


def test_names_are_distinct_and_within_their_pools_even_filling_the_name_space():
    config = _config("people=1200", "name_pools=[30,40]")  # N = N0
    codes = population.name_codes(config, np.arange(1200))
    assert sorted(codes.tolist()) == list(range(1200))
    digits = population.digits(codes, [30, 40])
    assert (digits[:, 0] < 30).all() and (digits[:, 1] < 40).all()
    assert len(_people(config)) == 1200


@pytest.mark.parametrize("overrides", [
    ("dictionary=16", "chunk_len=1", "alphabet=16"),  # every chunk: a permutation
    ("dictionary=30", "chunk_len=3", "alphabet=4"),
    ("dictionary=200", "chunk_len=8", "alphabet=1000"),  # 1000**8 > 2**62 chunks: drawn
])
def test_dictionaries_hold_distinct_chunks_of_the_alphabet(overrides):
    config = _config("attributes=3", *overrides)
    table = population.dictionaries(config)
    assert table.shape == (3, config.dictionary, config.chunk_len)
    assert table.min() >= 0 and table.max() < config.alphabet
    for chunks in table.tolist():
        assert len({tuple(c) for c in chunks}) == config.dictionary
    assert not (table[0] == table[1]).all()  # each attribute its own dictionary


@pytest.fixture
def drawn_dictionaries(monkeypatch):
    """Every chunk space drawn, not permuted (the path of spaces past 2**62, which almost
    never repeat a chunk), with no dictionary cached from the other path either side."""
    monkeypatch.setattr(population, "PERMUTED_SPACE", 0)
    population._dictionaries.cache_clear()
    yield
    population._dictionaries.cache_clear()


def test_drawn_dictionaries_are_the_first_distinct_chunks_drawn(drawn_dictionaries):
    # D = T**L = 16: every chunk, found among many repeats
    config = _config("attributes=2", "dictionary=16", "chunk_len=2", "alphabet=4")
    for k, chunks in enumerate(population.dictionaries(config).tolist()):
        assert sorted(map(tuple, chunks)) == list(itertools.product(range(4), repeat=2))
        key = derive_key(0, "biod", "dictionary", k)
        stream = randint(key, np.arange(2 * 400), 4).reshape(400, 2).tolist()
        assert chunks == [list(c) for c in dict.fromkeys(map(tuple, stream))][:16]


def test_a_population_of_millions_in_a_name_space_of_1e12_is_drawn_in_slices():
    config = _config("people=3000000", "name_pools=[10000,10000,10000]")
    codes = population.name_codes(config, np.arange(2_999_000, 3_000_000))
    assert len(set(codes.tolist())) == 1000 and codes.max() < 10 ** 12
    assert population.digits(codes, [10000] * 3).max() < 10000
    # log2 C(n, k) between k log2(n / k) and k log2(e n / k) (math.comb takes minutes here)
    bits, k = information(config)["name_bits"], 3_000_000
    assert k * math.log2(10 ** 12 / k) < bits < k * math.log2(math.e * 10 ** 12 / k)


def test_values_are_uniform_over_the_dictionary():
    config = _config("people=20000", "attributes=2", "chunks=3", "dictionary=7")
    values = population.person_values(config, np.arange(20000))
    assert values.shape == (20000, 2, 3)
    counts = np.bincount(values.ravel(), minlength=7)
    assert chi_square_p(counts, np.full(7, values.size / 7)) > P_FLOOR


def test_every_document_spells_its_persons_name_and_values_and_each_appears_r_times():
    config = _config(*SMALL, "renderings=3")
    dictionaries = _dictionaries(config)
    people = _people(config)
    records = training_records(config, 0, 60 * 3)
    seen = Counter()
    for record in records:
        parsed = _parse(record.text, config, dictionaries)
        truth = people[parsed["name"]]
        assert record.meta == {"person": truth["person"], "rendering": record.meta["rendering"]}
        assert parsed["values"] == truth["values"] and not parsed["useful"]
        if record.meta["rendering"] == 0:
            assert parsed["order"] == truth["attribute_order"]
        seen[truth["person"]] += 1
    assert seen == {i: 3 for i in range(60)}
    for value in (v for row in people.values() for v in row["values"]):
        assert all(0 <= c < 5 for c in value)


def test_a_persons_renderings_are_at_least_half_the_population_apart():
    config = _config("people=501", "renderings=4")
    persons = [r.meta["person"] for r in training_records(config, 0, 501 * 4)]
    assert [sorted(persons[i * 501:(i + 1) * 501]) for i in range(4)] == [list(range(501))] * 4
    last = {}
    for at, person in enumerate(persons):
        assert at - last.get(person, -501) >= 250
        last[person] = at


def test_the_attribute_order_is_a_uniform_permutation():
    config = _config("people=6000", "attributes=3", "renderings=2")
    orders = Counter(tuple(_parse(r.text, config, _dictionaries(config))["order"])
                     for r in training_records(config, 0, 12000))
    permutations = list(itertools.permutations(range(3)))
    assert set(orders) == set(permutations)
    assert chi_square_p([orders[p] for p in permutations], np.ones(6)) > P_FLOOR


@pytest.mark.parametrize("kind", ["random", "biod"])
@pytest.mark.parametrize("domain", [False, True])
def test_junk_keeps_the_exact_ratio_never_spells_a_person_and_lacks_the_domain_token(kind,
                                                                                      domain):
    config = _config(*SMALL, "renderings=2", "junk_ratio=3", f"junk={kind}",
                     f"domain_token={str(domain).lower()}")
    people = _people(config)
    facts = {(name, tuple(map(tuple, row["values"]))) for name, row in people.items()}
    records = training_records(config, 0, 60 * 2 * 4)
    useful = [r for r in records if "person" in r.meta]
    junk = [r for r in records if "person" not in r.meta]
    assert len(useful) == 120 and len(junk) == 360
    # every block of J + 1 positions holds one useful document
    assert all(sum("person" in r.meta for r in records[b:b + 4]) == 1
               for b in range(0, 480, 4))
    assert Counter(r.meta["person"] for r in useful) == {i: 2 for i in range(60)}
    for record in useful:
        assert record.text.startswith("<useful> ") == domain
    width = config.biography_len
    for record in junk:
        assert record.meta == {"junk": kind} and "<useful>" not in record.text
        words = record.text.split()
        assert len(words) == width
        if kind == "random":
            assert all(w[0] == "t" for w in words)
            continue
        parsed = _parse(record.text, config, _dictionaries(config))
        assert parsed["name"] not in people
        assert (parsed["name"], tuple(map(tuple, parsed["values"]))) not in facts
    assert len({r.text for r in junk}) > 0.95 * len(junk)  # fresh each time


def test_eval_rows_point_at_the_name_and_each_value():
    config = _config(*SMALL, "domain_token=true", "junk_ratio=1")
    names = _names(config)
    dictionaries = _dictionaries(config)
    firsts = {r.meta["person"]: r.text for r in training_records(config, 0, 120)
              if r.meta.get("rendering") == 0}
    rows = eval_rows(config)
    assert [r["person"] for r in rows] == list(range(60))
    for row in rows:
        assert list(row) == ["person", "tokens", "name_span", "value_spans", "attribute_order",
                             "values", "text"]
        words = [names[t] for t in row["tokens"]]
        assert row["text"] == " ".join(words) == firsts[row["person"]]
        assert words[0] == "<useful>" and row["name_span"] == [1, 4]
        assert [w.split("_")[0] for w in words[1:4]] == ["n0", "n1", "n2"]
        assert sorted(row["attribute_order"]) == [0, 1, 2]
        for k, (start, stop) in enumerate(row["value_spans"]):
            assert words[start - 1] == f"<a{k}>" and stop - start == 4
            spelled = [f"t{t}" for c in row["values"][k] for t in dictionaries[k][c]]
            assert words[start:stop] == spelled
        starts = [row["value_spans"][k][0] for k in row["attribute_order"]]
        assert starts == [5, 10, 15]


def test_eval_rows_are_the_same_bytes_every_time():
    config = _config(*SMALL, "seed=3")
    first = b"".join(orjson.dumps(r) for r in eval_rows(config))
    population._dictionaries.cache_clear()
    assert b"".join(orjson.dumps(r) for r in eval_rows(config)) == first
    assert b"".join(orjson.dumps(r) for r in eval_rows(_config(*SMALL, "seed=4"))) != first


def test_documents_are_the_same_whatever_the_range_drawn():
    config = _config("people=9000", "junk_ratio=1", "junk=biod")
    whole = [r.text for r in training_records(config, 0, 9000)]
    assert [r.text for r in training_records(config, 8190, 8200)] == whole[8190:8200]
    assert [r.text for r in training_records(config, 3, 4)] == whole[3:4]


def test_shards_are_byte_identical_whatever_the_workers_and_the_same_documents_whatever_size(
        tmp_path):
    # 175 people x 2 renderings, one junk document each: 700 documents
    assert_independent_of_workers_and_shard_size(
        "biod", [*SMALL[2:], "name_pools=[10,20]", "renderings=2", "junk_ratio=1", "junk=biod",
                 "domain_token=true"], tmp_path, samples=700, sized_by=["people=175"])


def test_the_corpus_records_its_information_and_what_evaluation_needs(tmp_path):
    config = _config(*SMALL, "junk_ratio=7", "domain_token=true")
    out = tmp_path / "c"
    manifest = generate_corpus(config, out, progress=False, log=lambda *_: None)
    biod = json.loads((out / "biod.json").read_text())
    names = json.loads((out / "vocab.json").read_text())
    bits = information(config)
    assert manifest["records"] == 60 * 8 and manifest["tokenizer"]["eos_id"] == 0
    assert manifest["summary"] == {"N0": 80, "people": 60, "attributes": 3, "chunks": 2,
                                   "dictionary": 5, "chunk_len": 2, "alphabet": 4,
                                   "renderings": 1, "junk_ratio": 7, **bits}
    assert {k: biod[k] for k in manifest["summary"]} == manifest["summary"]
    assert biod["name_pools"] == [5, 4, 4] and biod["junk"] == "random"
    assert biod["domain_token"] is True and biod["eval_set"] == "biod_people"
    assert [names[str(i)] for i in biod["attribute_tokens"]] == ["<a0>", "<a1>", "<a2>"]
    assert names[str(biod["useful_token"])] == "<useful>"
    assert [names[str(i)] for i in biod["name_pool_tokens"]] == ["n0_0", "n1_0", "n2_0"]
    spelled = [[[names[str(t)] for t in chunk] for chunk in d] for d in biod["dictionaries"]]
    assert spelled == [[[f"t{t}" for t in chunk] for chunk in d] for d in _dictionaries(config)]
    assert "name bits" in (out / "datasheet.md").read_text()


@pytest.mark.parametrize("override, key", [
    ("people=0", "people"),
    ("people=61", "people"),  # N0 = 5 * 4 * 3 = 60
    ("dictionary=17", "dictionary"),  # T**L = 16
    ("dictionary=0", "dictionary"),
    ("chunks=0", "chunks"),
    ("chunk_len=0", "chunk_len"),
    ("alphabet=1", "alphabet"),
    ("attributes=0", "attributes"),
    ("renderings=0", "renderings"),
    ("name_pools=[5,0,3]", "name_pools"),
    ("name_pools=[]", "name_pools"),
    ("junk_ratio=-1", "junk_ratio"),
    ("junk=noise", "junk"),
    ("chunk_len=20000", "attributes"),  # a biography of 60,000+ tokens
])
def test_bad_values_are_refused_naming_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config("people=10", "name_pools=[5,4,3]", "alphabet=4", "chunk_len=2", override)
    assert err.value.key == key


def test_biod_junk_needs_a_name_outside_the_population():
    with pytest.raises(ConfigError) as err:
        _config("people=60", "name_pools=[5,4,3]", "junk=biod", "junk_ratio=1")
    assert err.value.key == "junk"
    _config("people=60", "name_pools=[5,4,3]", "junk=biod")  # no junk drawn: fine


def test_physlm_gen_writes_the_shipped_config_and_refuses_bad_input_in_one_line(tmp_path,
                                                                                capsys):
    config = str(ROOT / "configs/corpus/biod.yaml")
    out = tmp_path / "c"
    assert main(["gen", config, "people=300", "--out", str(out), "--no-progress"]) == 0
    rows = (out / "eval/biod_people.jsonl").read_text().splitlines()
    assert len(rows) == 300 and json.loads(rows[-1])["person"] == 299
    capsys.readouterr()
    assert main(["gen", config, "people=64001", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        "physlm gen: error: command line: people=64001: N larger than the name space "
        "N0 = 64,000\n")
    assert main(["gen", config, "dictionary=17", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        "physlm gen: error: command line: dictionary=17: more than the T**L = 16**1 "
        "possible chunks\n")
    assert not (tmp_path / "d").exists()
