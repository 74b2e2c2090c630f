"""CFG grammars: the shipped cfg3 tables, physlm's grammar.json, checks and random grammars."""

import copy
import json
import re

import pytest

from corpus_gen.cfg.grammar import (
    DATA,
    MAX_STRING_LENGTH,
    Grammar,
    GrammarError,
    grammar_from_dict,
    load_grammar,
    random_grammar,
)
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.registry import schemas

# name: (depth, symbols per level root first and terminals last, rules per symbol min/max,
# rule length min/max), as published (Physics of LMs Part 1, the cfg3 configs)
SHIPPED = {
    "cfg3b": (6, [1, 3, 3, 3, 3, 3, 3], (2, 2), (2, 3)),
    "cfg3e1": (6, [1, 3, 9, 27, 81, 27, 9], (3, 3), (2, 3)),
    "cfg3e2": (6, [1, 3, 9, 27, 27, 9, 4], (3, 3), (2, 3)),
    "cfg3f": (6, [1, 3, 3, 3, 3, 3, 3], (3, 4), (2, 3)),
    "cfg3g": (6, [1, 3, 3, 3, 3, 3, 3], (3, 3), (2, 3)),
    "cfg3h": (6, [1, 3, 3, 3, 3, 3, 3], (2, 3), (2, 3)),
    "cfg3i": (6, [1, 3, 3, 3, 3, 3, 3], (2, 2), (2, 3)),
    "cfg3j": (7, [1, 3, 3, 3, 3, 3, 3, 3], (3, 3), (2, 3)),
    "cfg3k": (7, [1, 3, 3, 3, 3, 3, 3, 3], (3, 4), (2, 3)),
}

# root -> (A, B); A -> (t0) | (t1, t0); B -> (t1): the language {t0 t1, t1 t0 t1}
TINY = {"name": "tiny", "terminals": 2,
        "levels": [[[[0, 1]]], [[[0], [1, 0]], [[1]]]]}


def _rule_stats(grammar: Grammar):
    counts = [len(rules) for level in grammar.levels for rules in level]
    lengths = [len(rule) for level in grammar.levels for rules in level for rule in rules]
    return (min(counts), max(counts)), (min(lengths), max(lengths))


def _reachable(grammar: Grammar) -> list[set[int]]:
    """Per level below the root (terminals last): the symbols some derivation from the root uses."""
    reach, result = {0}, []
    for level in grammar.levels:
        reach = {c for s in reach for rule in level[s] for c in rule}
        result.append(reach)
    return result


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_grammar_loads_with_its_published_shape(name):
    depth, sizes, rules, rule_length = SHIPPED[name]
    grammar = load_grammar(name)
    published = json.loads((DATA / f"{name}.json").read_text())
    assert grammar.name == name
    assert grammar.depth == depth == published["depth"]
    assert grammar.sizes == sizes == published["sizes"]
    assert grammar.terminals == sizes[-1]
    assert _rule_stats(grammar) == (rules, rule_length)
    assert rules == (published["deg_min"], published["deg_max"])
    assert rule_length == (published["len_min"], published["len_max"])
    # the tables are the published ones: children of symbol k of level l, as listed
    for level, symbols in zip(grammar.levels, published["all"]):
        assert [[list(rule) for rule in rules] for rules in level] == [
            s["children"] for s in symbols]


def test_cfg3f_has_3_to_4_rules_per_symbol_of_length_2_to_3():
    grammar = load_grammar("cfg3f")
    assert {len(rules) for level in grammar.levels for rules in level} == {3, 4}
    assert {len(rule) for level in grammar.levels for rules in level for rule in rules} == {2, 3}
    assert grammar.levels[0] == (((1, 2), (1, 0, 2), (2, 0, 0), (1, 1)),)


def test_only_cfg3e1_leaves_symbols_unreachable_and_it_loads_as_published():
    """cfg3e1's tables derive no rule to some symbols; every other shipped grammar (cfg3e2
    included) reaches every symbol, so it also loads as a physlm grammar without the allowance."""
    for name in SHIPPED:
        grammar = load_grammar(name)
        unreached = [size - len(reach)
                     for size, reach in zip(grammar.sizes[1:], _reachable(grammar))]
        data = {**json.loads(grammar.to_json()), "allow_unreachable": False}
        if name == "cfg3e1":
            assert unreached == [0, 1, 3, 9, 0, 0]
            with pytest.raises(GrammarError, match="symbol of level 2 4 is unreachable"):
                grammar_from_dict(data, "e1.json")
        else:
            assert unreached == [0] * grammar.depth
            assert grammar_from_dict(data, "x.json") == grammar


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_to_json_and_back_gives_the_same_grammar(name, tmp_path):
    grammar = load_grammar(name)
    again = grammar_from_dict(json.loads(grammar.to_json()), "round.json")
    assert again == grammar
    assert (again.name, again.allow_unreachable) == (name, True)  # as published
    assert again.tables[0].first.tolist() == grammar.tables[0].first.tolist()
    path = tmp_path / f"{name}-copy.json"
    path.write_text(grammar.to_json())
    assert load_grammar(str(path)) == grammar


def test_a_physlm_grammar_round_trips_and_keeps_its_name():
    grammar = grammar_from_dict(TINY, "tiny.json")
    assert grammar.levels == ((((0, 1),),), (((0,), (1, 0)), ((1,),)))
    assert grammar.sizes == [1, 2, 2] and grammar.depth == 2
    assert grammar.allow_unreachable is False
    data = json.loads(grammar.to_json())
    assert data == {**TINY, "allow_unreachable": False}
    assert grammar_from_dict(data, "again.json") == grammar
    assert [b.tolist() for b in grammar.yield_bounds[0]] == [[2], [3]]


def _mutated(change):
    data = copy.deepcopy(TINY)
    change(data)
    return data


@pytest.mark.parametrize("change, message", [
    (lambda d: d["levels"][1][0].append([0, 2]),
     re.escape("tiny.json: symbol 0 of level 1: rule [0, 2] names child 2 but level 2 has 2 "
               "symbols (dangling child index)")),
    (lambda d: d["levels"][0][0].append([0, 5]), "names child 5 .*dangling child index"),
    (lambda d: d["levels"][0][0].append([-1]), "names child -1 .*dangling child index"),
    (lambda d: d["levels"][1].__setitem__(1, []), "tiny.json: symbol 1 of level 1 has no rules"),
    (lambda d: d["levels"][1][0].append([]), "tiny.json: symbol 0 of level 1 has an empty rule"),
    (lambda d: d["levels"][1][0].append([1, 0]),
     "tiny.json: symbol 0 of level 1 lists a rule twice"),
    (lambda d: d["levels"][1].append([[0]]),
     "tiny.json: symbol of level 1 2 is unreachable: no rule of level 0 derives it"),
    (lambda d: d.__setitem__("terminals", 3),
     "tiny.json: terminal 2 is unreachable: no rule of level 1 derives it"),
    (lambda d: d["levels"][1][1].append([0, "1"]), "child index '1' is not an integer"),
    (lambda d: d["levels"][1][1].append([0, 1.0]), "child index 1.0 is not an integer"),
    (lambda d: d["levels"][1][1].append([True]), "child index True is not an integer"),
    (lambda d: d["levels"][1][1].append(7), r"tiny.json: malformed grammar \(TypeError"),
    (lambda d: d.__setitem__("terminals", "2"), "terminals='2': must be an integer"),
    (lambda d: d.__setitem__("terminals", 0), "terminals=0: must be >= 1"),
    (lambda d: d.pop("terminals"), r"tiny.json: malformed grammar \(KeyError"),
    (lambda d: d.__setitem__("levels", 5), r"tiny.json: malformed grammar \(TypeError"),
    (lambda d: d["levels"].insert(0, [[[0]], [[0]]]),
     "level 0 must hold exactly one symbol, the root"),
    (lambda d: d.__setitem__("levels", []), "level 0 must hold exactly one symbol, the root"),
])
def test_bad_grammars_are_grammar_errors_naming_the_problem(change, message):
    with pytest.raises(GrammarError, match=message):
        grammar_from_dict(_mutated(change), "tiny.json")


def _chain(levels: int, terminals: int = 1) -> dict:
    """A grammar of `levels` levels whose every symbol has the one rule (0, 0): its one string
    has 2**levels terminals."""
    return {"name": "chain", "terminals": terminals, "levels": [[[[0, 0]]]] * levels}


@pytest.mark.parametrize("data, message", [
    (_chain(60), "chain.json: 60 levels of nonterminals; at most 32 (MAX_DEPTH)"),
    (_chain(20), "chain.json: its longest string has 1,048,576 terminals (20 levels of rules); "
                 "at most 65,536 (MAX_STRING_LENGTH): use fewer levels or shorter rules"),
    (_chain(1, 100_000), "chain.json: terminals=100000: at most 65,536 (MAX_SYMBOLS: each "
                         "terminal is a token)"),
    (_chain(1, 1_000_000_000), "chain.json: terminals=1000000000: at most 65,536 (MAX_SYMBOLS"),
    ({"terminals": 1, "levels": [[[[0]]], [[[0]]] * 70_000]},
     "chain.json: level 1 has 70,000 symbols and 70,000 rules; at most 65,536 symbols"),
])
def test_a_grammar_asking_for_more_than_the_limits_is_refused_before_sampling(data, message):
    allowed = {**data, "allow_unreachable": True}
    with pytest.raises(GrammarError) as caught:
        grammar_from_dict(allowed, "chain.json")
    assert str(caught.value).startswith(message)


def test_a_grammar_at_the_limits_loads():
    grammar = grammar_from_dict(_chain(16), "chain.json")  # 2**16 terminals, the most allowed
    assert int(grammar.yield_bounds[0][1][0]) == MAX_STRING_LENGTH == 2**16


def test_a_grammar_file_nested_too_deep_is_one_line_naming_it(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"levels": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(GrammarError, match=f"^{path}: not JSON \\(maximum "
                                           "recursion depth exceeded"):
        load_grammar(str(path))


def test_unreachable_symbols_load_only_when_allowed():
    data = _mutated(lambda d: d["levels"][1].append([[0]]))
    grammar = grammar_from_dict({**data, "allow_unreachable": True}, "tiny.json")
    assert grammar.sizes == [1, 3, 2]
    # the allowance does not excuse a dangling index
    data = _mutated(lambda d: d["levels"][1].append([[2]]))
    with pytest.raises(GrammarError, match="dangling child index"):
        grammar_from_dict({**data, "allow_unreachable": True}, "tiny.json")
    with pytest.raises(GrammarError, match="unreachable"):
        Grammar("direct", 2, ((((0, 1),),), (((0,),), ((1,),), ((0,),))))
    assert Grammar("direct", 2, ((((0, 1),),), (((0,),), ((1,),), ((0,),))),
                   allow_unreachable=True).sizes == [1, 3, 2]


def test_the_official_format_needs_terminals_on_the_last_level():
    official = {"all": [[{"children": [[0, 1]]}], [{"children": None}, {"children": None}]]}
    assert grammar_from_dict(official, "o.json", "o").sizes == [1, 2]
    official["all"][1][0]["children"] = [[0]]
    with pytest.raises(GrammarError, match="o.json: the last level of `all` must be terminals"):
        grammar_from_dict(official, "o.json")
    # a nonterminal without children has no rules
    official = {"all": [[{"children": None}], [{"children": None}]]}
    with pytest.raises(GrammarError, match="symbol 0 of level 0 has no rules"):
        grammar_from_dict(official, "o.json")


@pytest.mark.parametrize("text, message", [
    ("{not json", "broken.json: not JSON \\(Expecting property name"),
    ("[1, 2]", "a grammar JSON has `levels` \\(physlm\\) or `all` \\(cfg3 tables\\)"),
    ('{"name": "x"}', "a grammar JSON has `levels`"),
    ('{"all": 3}', "malformed grammar"),
    ('{"all": [[{"kids": [[0]]}], [{"children": null}]]}', "malformed grammar \\(KeyError"),
])
def test_malformed_files_are_grammar_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(GrammarError, match=message) as caught:
        load_grammar(str(path))
    assert str(path) in str(caught.value)


def test_missing_files_and_unknown_shipped_names_are_grammar_errors(tmp_path):
    with pytest.raises(GrammarError, match="nope.json: cannot read a grammar JSON"):
        load_grammar(str(tmp_path / "nope.json"))
    with pytest.raises(GrammarError) as caught:
        load_grammar("cfg3z")
    assert str(caught.value) == ("grammar 'cfg3z': not a file and not a shipped grammar "
                                 "(cfg3b, cfg3e1, cfg3e2, cfg3f, cfg3g, cfg3h, cfg3i, cfg3j, "
                                 "cfg3k)")


def _config(tmp_path, text, overrides=()):
    path = tmp_path / "cfg.yaml"
    path.write_text("family: cfg\n" + text)
    return load_config(path, list(overrides), schemas())


def test_config_loads_shipped_file_and_random_grammars(tmp_path):
    assert _config(tmp_path, "").load_grammar() == load_grammar("cfg3f")
    assert _config(tmp_path, "", ["grammar=cfg3b"]).load_grammar() is load_grammar("cfg3b")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(TINY))
    assert _config(tmp_path, f"grammar: {path}\n").load_grammar().name == "tiny"
    config = _config(tmp_path, "grammar: random\nrandom:\n  sizes: [1, 2, 4, 2]\n  seed: 5\n")
    grammar = config.load_grammar()
    assert grammar == random_grammar("random-5", (1, 2, 4, 2), (3, 4), (2, 3), 5)
    assert grammar.sizes == [1, 2, 4, 2]


@pytest.mark.parametrize("text, overrides, key, reason", [
    ("grammar: cfg3z\n", [], "grammar", "not a file and not a shipped grammar"),
    ("", ["grammar=/nonexistent/g.json"], "grammar", "cannot read a grammar JSON"),
    ("grammar: random\nrandom:\n  sizes: [2, 3]\n", [], "random.sizes", "root \\(1\\) first"),
    ("grammar: random\nrandom:\n  sizes: [1]\n", [], "random.sizes", "root \\(1\\) first"),
    ("grammar: random\nrandom:\n  sizes: [1, 0, 3]\n", [], "random.sizes", "each >= 1"),
    ("grammar: random\nrandom:\n  rules: [4, 3]\n", [], "random.rules", "1 <= min <= max"),
    ("grammar: random\nrandom:\n  rules: [3]\n", [], "random.rules", "\\[min, max\\]"),
    ("grammar: random\n", ["random.rule_length=[0,2]"], "random.rule_length", "1 <= min"),
    ("grammar: random\nrandom:\n  sizes: [1, 9, 2]\n  rules: [1, 1]\n  rule_length: [1, 1]\n",
     [], "grammar", "never used all 9 symbols"),
    ("grammar: random\nrandom:\n  sizes: [1, 2, 2]\n  rules: [5, 5]\n  rule_length: [1, 1]\n",
     [], "grammar", "cannot have 5 distinct rules"),
    ("grammar: random\nrandom:\n  sizes: [1, 2, 2]\n  size: 3\n", [], "random.size",
     "unknown key"),
    # what a random grammar may ask for, bounded before it is drawn
    ("grammar: random\n", [f"random.sizes=[1{',3' * 60}]"], "random.sizes",
     "60 levels of nonterminals; at most 32 \\(MAX_DEPTH\\)"),
    ("grammar: random\n", ["random.sizes=[1,3,1000000000]"], "random.sizes",
     "at most 65,536 symbols a level"),
    ("grammar: random\n", ["random.sizes=[1,3,3]", "random.rules=[1,1000000]"], "random.rules",
     "up to 3,000,000 rules a level; at most 1,048,576 \\(MAX_RULES\\)"),
    ("grammar: random\n", [f"random.sizes=[1{',3' * 12}]"], "random.rule_length",
     "over 12 levels allows strings of 531,441 terminals; at most 65,536"),
])
def test_bad_grammar_and_random_specs_are_config_errors_naming_the_key(
        tmp_path, text, overrides, key, reason):
    with pytest.raises(ConfigError, match=reason) as caught:
        _config(tmp_path, text, overrides)
    assert caught.value.key == key
    assert key in str(caught.value)


def test_a_grammar_file_with_a_bad_rule_is_a_config_error_naming_grammar(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutated(lambda d: d["levels"][1][0].append([0, 0]) or
                                        d["levels"][1][0].append([0, 0]))))
    with pytest.raises(ConfigError, match="lists a rule twice") as caught:
        _config(tmp_path, f"grammar: {path}\n")
    assert caught.value.key == "grammar"


def test_random_grammar_is_a_pure_function_of_its_parameters():
    args = ("r", (1, 3, 3, 3, 3), (3, 4), (2, 3), 11)
    first = random_grammar.__wrapped__(*args)
    again = random_grammar.__wrapped__(*args)
    assert again == first and again is not first
    assert random_grammar(*args) == first
    others = {random_grammar.__wrapped__("r", *args[1:4], seed) for seed in range(12, 17)}
    assert first not in others and len(others) == 5


@pytest.mark.parametrize("sizes, rules, rule_length, seed", [
    ((1, 3, 3, 3, 3, 3, 3), (3, 4), (2, 3), 0),
    ((1, 3, 9, 27, 9, 4), (2, 3), (1, 3), 1),
    ((1, 5, 2), (1, 2), (2, 4), 2),
    ((1, 2), (2, 2), (1, 1), 3),
])
def test_random_grammars_respect_their_parameters_and_reach_every_symbol(
        sizes, rules, rule_length, seed):
    grammar = random_grammar(f"g{seed}", sizes, rules, rule_length, seed)
    assert grammar.sizes == list(sizes) and grammar.terminals == sizes[-1]
    assert grammar.depth == len(sizes) - 1 and grammar.allow_unreachable is False
    (low, high), (short, long) = _rule_stats(grammar)
    assert rules[0] <= low <= high <= rules[1]
    assert rule_length[0] <= short <= long <= rule_length[1]
    for k, level in enumerate(grammar.levels):
        for symbol_rules in level:
            assert len(set(symbol_rules)) == len(symbol_rules)
            assert all(0 <= c < sizes[k + 1] for rule in symbol_rules for c in rule)
    assert [len(r) for r in _reachable(grammar)] == list(sizes[1:])


def test_random_grammar_draws_the_whole_range_of_rules_and_lengths():
    grammar = random_grammar("wide", (1, 6, 6, 6, 6, 6, 3), (2, 4), (1, 3), 7)
    counts = [len(rules) for level in grammar.levels for rules in level]
    lengths = [len(rule) for level in grammar.levels for rules in level for rule in rules]
    assert set(counts) == {2, 3, 4} and set(lengths) == {1, 2, 3}


def test_impossible_random_specs_are_grammar_errors():
    with pytest.raises(GrammarError, match="x: 10 draws of level 0 never used all 9 symbols"):
        random_grammar("x", (1, 9, 2), (1, 1), (1, 1), 0, attempts=10)
    with pytest.raises(GrammarError, match="a symbol cannot have 3 distinct rules of length "
                                           r"\[1, 1\] over 2 symbols"):
        random_grammar("x", (1, 2, 2), (3, 3), (1, 1), 0)
