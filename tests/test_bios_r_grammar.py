"""The bioR grammar file: it loads, every placeholder resolves, and a broken entry is reported
with the file and the entry."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from corpus_gen.bios.bio_r_grammar import GRAMMAR_FILE, load_grammar
from corpus_gen.bios.people import ATTRIBUTES
from corpus_gen.bios.templates import SUBJECT_SLOTS
from corpus_gen.core.errors import CorpusError

RAW = yaml.safe_load(GRAMMAR_FILE.read_text(encoding="utf-8"))
PERSON_WORDS = {*SUBJECT_SLOTS, "full", "nick", "he", "his", "him", "man", *ATTRIBUTES}


def _all_sentences(raw: dict) -> list[str]:
    units = [s for unit in raw["units"] for kind in ("lead", "free", "events")
             for s in unit.get(kind, [])]
    fillers = [s for sentences in raw["fillers"].values() for s in sentences]
    return [*raw["openers"], raw["nick_opener"], *raw["nick_intros"], *units, *fillers]


def test_the_packaged_grammar_loads() -> None:
    grammar = load_grammar()
    assert len(grammar.openers) == len(RAW["openers"])
    assert len(grammar.fillers) == len(RAW["fillers"])
    assert grammar.nicknames["Robert"] == "Bob"
    assert grammar.partition_cdf[-1] == 1.0
    for partition in grammar.partitions:  # each partition states every attribute once
        stated = sorted(a for unit in partition for a in unit.attributes)
        assert stated == list(range(len(ATTRIBUTES)))


def test_every_placeholder_names_a_pool_or_a_word_and_every_pool_is_used() -> None:
    used = set()
    for sentence in _all_sentences(RAW):
        for key in re.findall(r"\{([^{}]*)\}", sentence):
            if "|" in key or "/" in key:  # inline alternatives or a present/past pair
                continue
            name = key.removeprefix("a ").removeprefix("other ")
            assert name in PERSON_WORDS or name in RAW["pools"], (key, sentence)
            used.add(name)
    assert set(RAW["pools"]) <= used, set(RAW["pools"]) - used


def _load_changed(tmp_path: Path, change) -> CorpusError:
    raw = copy.deepcopy(RAW)
    change(raw)
    path = tmp_path / "grammar.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    with pytest.raises(CorpusError) as caught:
        load_grammar(path)
    return caught.value


def _set(path: tuple, value: object):
    def change(raw: dict) -> None:
        node = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


@pytest.mark.parametrize("change, entry, says", [
    (_set(("fillers", "hobbies", 0), "{Subj} enjoys {HOBBYS}."), "fillers.hobbies[0]",
     "unknown placeholder {HOBBYS}"),
    (_set(("openers", 0), "{Subj} is {a COLOUR} person."), "openers[0]",
     "unknown placeholder {a COLOUR}"),
    (_set(("fillers", "pets", 0), "{Subj} calls {nick} often."), "fillers.pets[0]",
     "unknown placeholder {nick}"),  # a filler may not assume a nickname
    (_set(("fillers", "travel", 0), "{Subj} went to {birth_city}."), "fillers.travel[0]",
     "unknown placeholder {birth_city}"),  # fillers name no attribute
    (_set(("openers", 1), "{full} is {ADJ."), "openers[1]", "unbalanced brace"),
    (_set(("openers", 2), "{full} is {other ADJ}."), "openers[2]", "must follow a {ADJ}"),
    (_set(("openers", 3), {"Subj": None}), "openers[3]", "expected a sentence"),
    (_set(("pools", "ADJ", 2), False), "pools.ADJ[2]", "expected a string (quote it)"),
    (_set(("pools", "WORKS_FOR", 0), "works/worked/will work"), "pools.WORKS_FOR[0]",
     "not one present/past pair"),
    (_set(("pools", "colours"), ["red"]), "pools.colours", "upper case"),
    (_set(("pools", "ADJ"), []), "pools.ADJ", "non-empty list"),
    (_set(("units", 0, "lead", 0), "{Subj} was born."), "units[0].lead[0]",
     "does not state ['birth_date']"),
    (_set(("units", 0, "lead", 1), "On {birth_date}, {subj} was born."), "units[0].lead[1]",
     "starts with {Subj} or {Poss}"),
    (_set(("units", 0, "stage"), "childhood"), "units[0].stage", "not one of"),
    (_set(("units", 0, "attributes"), ["birthday"]), "units[0].attributes",
     "not distinct attributes"),
    (_set(("units", 0, "odds"), 0.5), "units[0].odds", "always available"),
    (_set(("units", 6, "odds"), 0), "units[6].odds", "needs odds > 0"),
    (_set(("units", 0, "leads"), []), "units[0]", "expected the keys"),
    (lambda raw: raw["units"].pop(0), "units", "every attribute needs exactly one unit"),
    (lambda raw: raw.pop("connectors"), "top level", "missing ['connectors']"),
    (_set(("templates",), []), "top level", "unknown ['templates']"),
    (_set(("connectors", "later"), ["Later, "]), "connectors", "unknown ['later']"),
    (_set(("nicknames", "Robert"), None), "nicknames.Robert", "expected a nickname"),
])
def test_a_broken_entry_is_named_with_the_file(tmp_path, change, entry, says) -> None:
    error = _load_changed(tmp_path, change)
    assert str(error).startswith(f"{tmp_path / 'grammar.yaml'}: {entry}: "), str(error)
    assert says in str(error)


def test_unreadable_yaml_names_the_file(tmp_path) -> None:
    path = tmp_path / "grammar.yaml"
    path.write_text("openers: [\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape(str(path))):
        load_grammar(path)
    with pytest.raises(CorpusError, match="missing.yaml"):
        load_grammar(tmp_path / "missing.yaml")
