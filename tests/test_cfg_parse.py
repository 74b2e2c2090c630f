"""Exact membership, parsing, string probabilities and next-token distributions of layered CFGs,
against the sampler's own trees and against tiny grammars whose whole language is enumerated."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from corpus_gen.cfg.grammar import Grammar, load_grammar
from corpus_gen.cfg.parse import (
    inside,
    membership,
    next_token_distribution,
    parse,
    root_probability,
)
from corpus_gen.cfg.sample import replay, sample

# a few strings per shipped grammar (cfg3j/k strings are ~500 tokens: fewer of those)
SHIPPED = {"cfg3b": 4, "cfg3e1": 4, "cfg3e2": 4, "cfg3f": 4, "cfg3g": 4, "cfg3h": 4,
           "cfg3i": 4, "cfg3j": 2, "cfg3k": 2}

# depth 3 with unit rules (spans of every length from 1) and ambiguity; language lengths 1..14
SMALL = Grammar("small", 2, (
    (((0, 1), (1, 0, 0), (1,)),),
    (((0, 1), (1,)), ((1, 1), (0,), (0, 0, 1))),
    (((0,), (0, 1)), ((1, 0), (1,))),
))
# depth 2, rules of 1 to 3 children; language lengths 2..7
FLAT = Grammar("flat", 2, (
    (((0, 1), (1, 0), (0, 0, 1)),),
    (((0,), (0, 1)), ((1,), (1, 1), (0, 1, 0))),
))
TINY = {"small": SMALL, "flat": FLAT}


def _language(grammar: Grammar) -> dict[tuple[int, ...], Fraction]:
    """Every string of the grammar with its exact probability: the sum, over its derivations,
    of the product of the chosen rules' probabilities (1 / rules of the symbol)."""
    below = [{(t,): Fraction(1)} for t in range(grammar.terminals)]
    for level in reversed(grammar.levels):
        above = []
        for rules in level:
            strings: dict[tuple[int, ...], Fraction] = {}
            for rule in rules:
                parts = {(): Fraction(1, len(rules))}
                for child in rule:
                    joined: dict[tuple[int, ...], Fraction] = {}
                    for head, p in parts.items():
                        for tail, q in below[child].items():
                            joined[head + tail] = joined.get(head + tail, 0) + p * q
                    parts = joined
                for string, p in parts.items():
                    strings[string] = strings.get(string, 0) + p
            above.append(strings)
        below = above
    return below[0]


def _conditionals(language: dict, terminals: int) -> dict[tuple[int, ...], np.ndarray]:
    """Brute force: for every prefix of a member, the distribution of the token after it
    (terminals, then the end of the string); a prefix not listed has no continuation."""
    mass: dict[tuple[int, ...], list] = {}
    for string, p in language.items():
        for k in range(len(string) + 1):
            row = mass.setdefault(string[:k], [Fraction(0)] * (terminals + 1))
            row[string[k] if k < len(string) else terminals] += p
    return {prefix: np.array([float(m / sum(row)) for m in row]) for prefix, row in mass.items()}


@pytest.fixture(scope="module")
def languages():
    return {name: _language(grammar) for name, grammar in TINY.items()}


def test_the_tiny_languages_are_what_the_tests_assume(languages):
    small, flat = languages["small"], languages["flat"]
    assert sum(small.values()) == sum(flat.values()) == 1
    assert (len(small), min(map(len, small)), max(map(len, small))) == (379, 1, 14)
    assert (len(flat), min(map(len, flat)), max(map(len, flat))) == (21, 2, 7)
    # "0 1 1": A0(0) A1(1 1) or A0(0 1) A1(1), each 1/3 * 1/2 * 1/3
    assert flat[(0, 1, 1)] == Fraction(1, 9)
    assert [int(b[0]) for b in SMALL.yield_bounds[0]] == [1, 14]
    # by hand: "1 0" = root(A0 A1), A0(B1), B1(1), A1(B0), B0(0): 1/3 * 1/2 * 1/2 * 1/3 * 1/2;
    # "1 0 1" has two derivations: root(A1), A1(B1 B1), B1(1 0), B1(1): 1/3 * 1/3 * 1/2 * 1/2,
    # and root(A0 A1), A0(B1), B1(1), A1(B0), B0(0 1): 1/3 * 1/2 * 1/2 * 1/3 * 1/2
    assert small[(1, 0)] == Fraction(1, 72)
    assert small[(1, 0, 1)] == Fraction(1, 36) + Fraction(1, 72)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_sampled_strings_are_members_whose_trees_the_chart_holds_and_parse_rebuilds(name):
    grammar = load_grammar(name)
    drawn = sample(grammar, 2024, np.arange(SHIPPED[name]))
    for i in range(len(drawn)):
        tokens, rules = drawn.string(i), drawn.rule_list(i)
        assert membership(grammar, tokens).member
        assert membership(grammar, tokens.tolist()) == membership(grammar, tokens)
        charts = inside(grammar, tokens)
        labels = replay(grammar, [rules]).labels
        n = len(tokens)
        for level in range(grammar.depth):  # every node (level, symbol, span) of the tree
            lo = int(grammar.yield_bounds[level][0].min())
            ends = np.flatnonzero(labels.boundary[level]) + 1
            for start, end in zip(np.concatenate([[0], ends[:-1]]), ends):
                assert (labels.span[level, start:end] == labels.span[level, start]).all()
                symbol = labels.ancestor[level, start]
                assert charts[level][symbol, start, end - start - lo] > 0, (level, start, end)
        assert (charts[-1][tokens, np.arange(n), 0] > 0).all()
        found = parse(grammar, tokens)
        assert replay(grammar, [found], labels=False).string(0).tolist() == tokens.tolist()
        if n < 400:  # the unscaled probability: at least the sampled derivation's
            derivation = replay(grammar, [rules], labels=False)
            assert derivation.rules.tolist() == rules
            log_p = -sum(math.log(len(grammar.levels[level][symbol]))
                         for level, symbol in _nodes(grammar, rules))
            assert math.log(root_probability(grammar, tokens, charts)) >= log_p - 1e-9


def _nodes(grammar: Grammar, rules: list[int]):
    """(level, symbol) of every node of a derivation, level order."""
    nodes, cursor = [0], 0
    for level, table in enumerate(grammar.levels):
        for symbol in nodes:
            yield level, symbol
        picks = rules[cursor:cursor + len(nodes)]
        cursor += len(nodes)
        nodes = [c for symbol, pick in zip(nodes, picks) for c in table[symbol][pick]]


def _probes(language: dict, terminals: int, seed: int = 0) -> set[tuple[int, ...]]:
    """Strings to classify: every string up to length 10, random ones of every length up to
    the longest member + 2, and each member with one token changed (also to one outside the
    alphabet), dropped or added."""
    rng = np.random.default_rng(seed)
    longest = max(map(len, language))
    probes = {w for n in range(11) for w in itertools.product(range(terminals), repeat=n)}
    probes.update(language)
    for n in range(11, longest + 3):
        probes.update(tuple(rng.integers(0, terminals, n).tolist()) for _ in range(60))
    for w in language:
        for j in range(len(w)):
            probes.update(w[:j] + (t,) + w[j + 1:] for t in range(terminals) if t != w[j])
        j = int(rng.integers(0, len(w)))
        probes.add(w[:j] + w[j + 1:])
        probes.add(w[:j] + (int(rng.integers(0, terminals)),) + w[j:])
        probes.add(w[:j] + (int(rng.choice([-1, terminals, terminals + 7])),) + w[j + 1:])
    return probes


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_grammars_classify_exactly_as_the_enumerated_language(name, languages):
    grammar, language = TINY[name], languages[name]
    probes = _probes(language, grammar.terminals)
    assert len(probes) > 3 * len(language)  # every member, and many more non-members
    for w in probes:
        verdict = membership(grammar, w)
        assert verdict.member == (w in language), (w, verdict)
        expected = float(language.get(w, 0))
        assert root_probability(grammar, np.array(w, dtype=np.int64)) == pytest.approx(
            expected, rel=1e-12, abs=1e-300), w
        if w in language:
            found = parse(grammar, w)
            assert replay(grammar, [found], labels=False).string(0).tolist() == list(w)
        else:
            assert parse(grammar, w) is None
            assert verdict.reason


@pytest.mark.parametrize("name", sorted(TINY))
def test_next_token_distributions_are_the_exact_conditionals(name, languages):
    grammar, language = TINY[name], languages[name]
    rng = np.random.default_rng(1)
    non_members = [w for w in _probes(language, grammar.terminals) if w and w not in language]
    strings = list(language) + [non_members[k] for k in rng.choice(len(non_members), 200)]
    conditionals = _conditionals(language, grammar.terminals)
    impossible = np.zeros(grammar.terminals + 1)
    for w in strings:
        rows = next_token_distribution(grammar, np.array(w))
        assert rows.shape == (len(w) + 1, grammar.terminals + 1)
        for p in range(len(w) + 1):
            expected = conditionals.get(w[:p], impossible)
            np.testing.assert_allclose(rows[p], expected, rtol=1e-12, atol=1e-14,
                                       err_msg=f"{w} after {p} tokens")
        if w in language:  # every prefix of a member is viable
            np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_sampling_frequencies_match_the_exact_probabilities(languages):
    language, n = languages["small"], 20000
    drawn = sample(SMALL, 77, np.arange(n))
    strings = [tuple(drawn.string(i).tolist()) for i in range(n)]
    seen = {}
    for w in strings:
        seen[w] = seen.get(w, 0) + 1
    assert set(seen) <= set(language)
    for w, p in language.items():  # each string's frequency within 5 binomial std
        p = float(p)
        assert abs(seen.get(w, 0) / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9, w
    # and the next token after the commonest prefixes, as next_token_distribution predicts
    for prefix in [(), (0,), (1,), (0, 1), (1, 0), (1, 1), (0, 1, 1)]:
        following = [w[len(prefix)] if len(w) > len(prefix) else SMALL.terminals
                     for w in strings if w[:len(prefix)] == prefix]
        assert len(following) > 1000
        counts = np.bincount(following, minlength=SMALL.terminals + 1) / len(following)
        predicted = next_token_distribution(SMALL, np.array(prefix, dtype=np.int64))[-1]
        std = np.sqrt(predicted * (1 - predicted) / len(following))
        assert (np.abs(counts - predicted) <= 5 * std + 1e-9).all(), (prefix, counts, predicted)


@pytest.mark.parametrize("name", ["cfg3f", "cfg3e1", "cfg3k"])
def test_next_token_rows_of_sampled_strings_sum_to_one(name):
    grammar = load_grammar(name)
    drawn = sample(grammar, 5, np.arange(2))
    for i in range(len(drawn)):
        tokens = drawn.string(i)
        rows = next_token_distribution(grammar, tokens)
        np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=0, atol=1e-9)
        assert (rows[np.arange(len(tokens)), tokens] > 0).all()  # the actual next token
        assert rows[-1, -1] > 0 and (rows[:int(grammar.yield_bounds[0][0][0]), -1] == 0).all()


def test_next_token_rows_after_an_impossible_prefix_are_zero():
    grammar = load_grammar("cfg3f")
    tokens = sample(grammar, 6, np.arange(1)).string(0).copy()
    for j in range(len(tokens)):  # change tokens until some prefix has no continuation
        tokens[j] = (tokens[j] + 1) % 3
        rows = next_token_distribution(grammar, tokens)
        dead = np.flatnonzero(rows.sum(axis=1) == 0)
        if len(dead):
            break
    assert len(dead)
    first = dead[0]
    assert (rows[first:] == 0).all()  # no continuation of an impossible prefix
    np.testing.assert_allclose(rows[:first].sum(axis=1), 1.0, rtol=0, atol=1e-9)
    assert rows[first - 1, tokens[first - 1]] == 0  # the token that made it impossible


def test_tokens_outside_the_alphabet_have_probability_zero_and_no_continuation():
    """They once indexed the compiled chart out of bounds: -1 read as the last terminal, and a
    token past the alphabet wrote outside the array (heap corruption)."""
    grammar = load_grammar("cfg3f")
    tokens = sample(grammar, 9, np.arange(1)).string(0)
    for bad in (-1, 3, 1000):
        changed = tokens.copy()
        changed[40] = bad
        assert root_probability(grammar, changed) == 0.0
        charts = inside(grammar, changed)
        assert not charts[-1][:, 40].any() and not charts[0].any()
        rows = next_token_distribution(grammar, changed)
        np.testing.assert_allclose(rows[:41].sum(axis=1), 1.0, rtol=0, atol=1e-9)
        assert not rows[41:].any()
        assert parse(grammar, changed) is None
    # the tiny grammar: "-1" is not terminal 1
    rows = next_token_distribution(SMALL, np.array([-1, 0]))
    assert rows[0].tolist() == pytest.approx([11 / 18, 7 / 18, 0]) and not rows[1:].any()
    assert root_probability(SMALL, np.array([-1])) == root_probability(SMALL, np.array([2])) == 0


def test_non_members_name_why():
    grammar = load_grammar("cfg3f")
    tokens = sample(grammar, 8, np.arange(1)).string(0)
    assert membership(grammar, []).reason == "empty string"
    assert membership(grammar, np.array([], dtype=np.int64)).reason == "empty string"
    assert membership(grammar, tokens).kind == "member"
    assert [membership(grammar, w).kind for w in ([], [3] * 100, tokens[:63])] == [
        "empty", "alphabet", "length"]
    bad = tokens.copy()
    bad[10] = 3
    assert membership(grammar, bad).reason == "token 3 outside the alphabet 0..2"
    bad[10] = -1
    assert membership(grammar, bad).reason == "token -1 outside the alphabet 0..2"
    assert membership(grammar, tokens[:63]).reason == "length 63 outside the language's [64, 729]"
    assert membership(grammar, np.zeros(730, dtype=np.int64)).reason == (
        "length 730 outside the language's [64, 729]")
    verdicts = []
    for j in range(0, len(tokens), 7):  # single-token changes of a member
        changed = tokens.copy()
        changed[j] = (changed[j] + 1) % 3
        verdicts.append(membership(grammar, changed))
    refused = [v for v in verdicts if not v.member]
    assert refused and all(v.reason == "no derivation" and v.kind == "no_derivation"
                           for v in refused)
    assert membership(grammar, np.concatenate([tokens, tokens[:5]])).reason == "no derivation" \
        or membership(grammar, np.concatenate([tokens, tokens[:5]])).member
    for w in ([], [3, 0]):
        assert parse(grammar, w) is None
    assert root_probability(grammar, tokens[:63]) == 0.0


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_non_members_name_why(name, languages):
    grammar, language = TINY[name], languages[name]
    low, high = min(map(len, language)), max(map(len, language))
    assert membership(grammar, []).reason == "empty string"
    assert membership(grammar, [0, 2]).reason == "token 2 outside the alphabet 0..1"
    assert membership(grammar, [0] * (high + 1)).reason == (
        f"length {high + 1} outside the language's [{low}, {high}]")
    for n in range(low, high + 1):
        outside = [w for w in itertools.product(range(2), repeat=n) if w not in language]
        assert all(membership(grammar, w).reason == "no derivation" for w in outside[:20])
