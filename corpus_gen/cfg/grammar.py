"""Layered context-free grammars: the cfg3 family and random grammars drawn by parameters.

A grammar has `depth` levels of nonterminals, root first (level 0 holds the root alone), then the
terminals. Every rule of a level-l symbol lists children of level l+1, so every leaf sits at depth
`depth`, no symbol can derive itself (cycles are unrepresentable) and the language is finite.
Symbols are addressed by (level, index within the level); terminal k is spelled str(k + 1), as the
papers' token ids 1..3.

Two JSON forms load: the official cfg3 tables (`all[level][k].children`, see data/NOTICE.md) and
physlm's own `grammar.json`, which a corpus directory holds: {"name", "terminals", "levels"} with
levels[l][s] the list of rules of symbol s of level l.

What a grammar may ask for is bounded before anything is sampled: its depth, its symbols and
rules per level, and its longest string (from the rule lengths, level by level), each against a
limit below; a random grammar's parameters are checked before it is drawn.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import parse_json

DATA = Path(__file__).parent / "data"
Rule = tuple[int, ...]

MAX_DEPTH = 32  # levels of nonterminals (the cfg3 grammars have 6 or 7)
MAX_SYMBOLS = 65_536  # symbols of one level, terminals included (each terminal is a token)
MAX_RULES = 1 << 20  # rules of one level
# terminals of the longest string (cfg3k's: 2,187); the sampler holds a batch of strings at
# once and numbers a string's nodes of one level below 2**22
MAX_STRING_LENGTH = 65_536


class GrammarError(CorpusError):
    """A grammar file or spec that does not describe a layered CFG."""


@dataclass(frozen=True)
class LevelTables:
    """One level's rules as arrays: symbol s has rules first[s] .. first[s+1]-1; rule r has
    length[r] children child[r, :length[r]] (-1 beyond) and is chosen with probability
    weight[r] = 1 / (rules of its symbol)."""

    first: np.ndarray  # int64 [S + 1]
    length: np.ndarray  # int64 [R]
    child: np.ndarray  # int64 [R, longest rule]
    weight: np.ndarray  # float64 [R]
    parent: np.ndarray  # int64 [R]: the symbol each rule belongs to


@dataclass(frozen=True)
class Grammar:
    name: str
    terminals: int
    levels: tuple[tuple[tuple[Rule, ...], ...], ...]  # levels[l][s]: the rules of symbol (l, s)
    source: str = field(default="", compare=False)
    # the published cfg3e1 table leaves some symbols underived; kept as published, it is
    # allowed there and an error in any grammar a user writes or draws
    allow_unreachable: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def depth(self) -> int:
        return len(self.levels)

    @property
    def sizes(self) -> list[int]:
        """Symbols per level, root first, terminals last (the official `sizes`)."""
        return [len(level) for level in self.levels] + [self.terminals]

    @cached_property
    def tables(self) -> list[LevelTables]:
        result = []
        for level in self.levels:
            rules = [rule for symbol in level for rule in symbol]
            counts = [len(symbol) for symbol in level]
            child = np.full((len(rules), max(map(len, rules))), -1, dtype=np.int64)
            for r, rule in enumerate(rules):
                child[r, : len(rule)] = rule
            parent = np.repeat(np.arange(len(level)), counts)
            result.append(LevelTables(
                first=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                length=np.array([len(rule) for rule in rules], dtype=np.int64),
                child=child,
                weight=1.0 / np.array(counts, dtype=np.float64)[parent],
                parent=parent.astype(np.int64)))
        return result

    @cached_property
    def yield_bounds(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per level (terminals last): each symbol's shortest and longest yield."""
        low = high = np.ones(self.terminals, dtype=np.int64)
        bounds = [(low, high)]
        for level in reversed(self.levels):
            low = np.array([min(sum(low[c] for c in rule) for rule in rules) for rules in level])
            high = np.array([max(sum(high[c] for c in rule) for rule in rules) for rules in level])
            bounds.append((low, high))
        return bounds[::-1]

    @cached_property
    def token_scale(self) -> float:
        """exp(expected -log P(derivation) per terminal): probabilities of spans are kept
        multiplied by token_scale ** length, which is exact (lengths add up along a derivation)
        and keeps a typical string's probability near 1 instead of underflowing (cfg3f: ~1e-80)."""
        length = np.ones(self.terminals)
        surprise = np.zeros(self.terminals)
        for level in reversed(self.levels):
            length = np.array([np.mean([length[list(r)].sum() for r in rules]) for rules in level])
            surprise = np.array([math.log(len(rules)) + np.mean([surprise[list(r)].sum()
                                                                 for r in rules])
                                 for rules in level])
        return float(math.exp(surprise[0] / length[0]))

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "terminals": self.terminals,
                           "allow_unreachable": self.allow_unreachable,
                           "levels": [[[list(rule) for rule in rules] for rules in level]
                                      for level in self.levels]}) + "\n"


def _check(grammar: Grammar) -> None:
    """Every way the tables can fail to be a layered grammar, or ask for more than the limits
    allow, named."""
    where = grammar.source or grammar.name
    if grammar.terminals < 1:
        raise GrammarError(f"{where}: terminals={grammar.terminals}: must be >= 1")
    if grammar.terminals > MAX_SYMBOLS:
        raise GrammarError(f"{where}: terminals={grammar.terminals}: at most {MAX_SYMBOLS:,} "
                           "(MAX_SYMBOLS: each terminal is a token)")
    if not grammar.levels or len(grammar.levels[0]) != 1:
        raise GrammarError(f"{where}: level 0 must hold exactly one symbol, the root")
    if grammar.depth > MAX_DEPTH:
        raise GrammarError(f"{where}: {grammar.depth} levels of nonterminals; at most "
                           f"{MAX_DEPTH} (MAX_DEPTH)")
    for k, level in enumerate(grammar.levels):
        rules = sum(map(len, level))
        if len(level) > MAX_SYMBOLS or rules > MAX_RULES:
            raise GrammarError(f"{where}: level {k} has {len(level):,} symbols and {rules:,} "
                               f"rules; at most {MAX_SYMBOLS:,} symbols (MAX_SYMBOLS) and "
                               f"{MAX_RULES:,} rules (MAX_RULES) a level")
    for k, level in enumerate(grammar.levels):
        below = grammar.sizes[k + 1]
        used: set[int] = set()
        for s, rules in enumerate(level):
            if not rules:
                raise GrammarError(f"{where}: symbol {s} of level {k} has no rules")
            if len(set(rules)) != len(rules):
                raise GrammarError(f"{where}: symbol {s} of level {k} lists a rule twice")
            for rule in rules:
                if not rule:
                    raise GrammarError(f"{where}: symbol {s} of level {k} has an empty rule")
                bad = [c for c in rule if not 0 <= c < below]
                if bad:
                    raise GrammarError(
                        f"{where}: symbol {s} of level {k}: rule {list(rule)} names child {bad[0]}"
                        f" but level {k + 1} has {below} symbols (dangling child index)")
                used.update(rule)
        unused = sorted(set(range(below)) - used)
        if unused and not grammar.allow_unreachable:
            kind = "terminal" if k + 1 == grammar.depth else f"symbol of level {k + 1}"
            raise GrammarError(f"{where}: {kind} {unused[0]} is unreachable: no rule of level "
                               f"{k} derives it")
    longest = _longest_string(grammar)
    if longest > MAX_STRING_LENGTH:
        raise GrammarError(f"{where}: its longest string has {longest:,} terminals ({grammar.depth}"
                           f" levels of rules); at most {MAX_STRING_LENGTH:,} "
                           "(MAX_STRING_LENGTH): use fewer levels or shorter rules")


def _longest_string(grammar: Grammar) -> int:
    """Terminals in the grammar's longest string, in Python integers (no overflow)."""
    longest = [1] * grammar.terminals
    for level in reversed(grammar.levels):
        longest = [max(sum(longest[c] for c in rule) for rule in rules) for rules in level]
    return longest[0]


def load_grammar(name_or_path: str) -> Grammar:
    """A shipped grammar by name (cfg3b, cfg3f, ...) or a JSON file in either form (read once
    per process while the file is unchanged)."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = DATA / f"{name_or_path}.json"
        if not path.is_file():
            shipped = sorted(p.stem for p in DATA.glob("*.json"))
            raise GrammarError(f"grammar {name_or_path!r}: not a file and not a shipped grammar "
                               f"({', '.join(shipped)})")
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise GrammarError(f"{path}: cannot read a grammar JSON: {exc}") from None
    return _read_grammar(str(path), stamp)


@cache
def _read_grammar(path: str, stamp: int) -> Grammar:
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise GrammarError(f"{path}: cannot read a grammar JSON: {exc}") from None
    data = parse_json(text, path, GrammarError)
    return grammar_from_dict(data, path, Path(path).stem)


def grammar_from_dict(data: object, source: str, default_name: str = "grammar") -> Grammar:
    try:
        if isinstance(data, dict) and "all" in data:  # the official cfg3 tables
            *nonterminal, terminal = data["all"]
            if any(symbol.get("children") for symbol in terminal):
                raise GrammarError(f"{source}: the last level of `all` must be terminals "
                                   "(children null)")
            levels = [[symbol["children"] or [] for symbol in level] for level in nonterminal]
            return _build(default_name, len(terminal), levels, source, allow_unreachable=True)
        if isinstance(data, dict) and "levels" in data:
            return _build(data.get("name", default_name), data["terminals"], data["levels"],
                          source, bool(data.get("allow_unreachable", False)))
    except (KeyError, TypeError, AttributeError) as exc:
        raise GrammarError(f"{source}: malformed grammar ({type(exc).__name__}: {exc})") from None
    raise GrammarError(f"{source}: a grammar JSON has `levels` (physlm) or `all` (cfg3 tables)")


def _build(name: str, terminals: int, levels: list, source: str,
           allow_unreachable: bool = False) -> Grammar:
    if not isinstance(terminals, int) or isinstance(terminals, bool):
        raise GrammarError(f"{source}: terminals={terminals!r}: must be an integer")
    table = tuple(tuple(tuple(tuple(_index(c, source) for c in rule) for rule in symbol)
                        for symbol in level) for level in levels)
    return Grammar(name, terminals, table, source, allow_unreachable)


def _index(value: object, source: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise GrammarError(f"{source}: child index {value!r} is not an integer")
    return value


@cache
def random_grammar(name: str, sizes: tuple[int, ...], rules: tuple[int, int],
                   rule_length: tuple[int, int], seed: int, attempts: int = 1000) -> Grammar:
    """A layered grammar drawn by parameters: sizes = symbols per level, root (1) first,
    terminals last; each symbol gets a uniform number of distinct rules in `rules`, each rule a
    uniform length in `rule_length` and uniform children. A level is redrawn until every symbol
    below it is used (at most `attempts` times). Parameters that allow more than the limits
    are refused before drawing."""
    problem = parameter_problem(sizes, rules, rule_length)
    if problem:
        knob, reason = problem
        value = {"sizes": sizes, "rules": rules, "rule_length": rule_length}[knob]
        raise GrammarError(f"{name}: {knob}={list(value)}: {reason}")
    rng = random.Random(f"cfg-grammar/{seed}")
    levels = []
    for k in range(len(sizes) - 1):
        for _ in range(attempts):
            level = [_draw_rules(rng, sizes[k + 1], rules, rule_length) for _ in range(sizes[k])]
            if len({c for symbol in level for rule in symbol for c in rule}) == sizes[k + 1]:
                levels.append(level)
                break
        else:
            raise GrammarError(f"{name}: {attempts} draws of level {k} never used all "
                               f"{sizes[k + 1]} symbols below it: raise rules or rule_length")
    return Grammar(name, sizes[-1], tuple(tuple(tuple(map(tuple, s)) for s in level)
                                         for level in levels))


def parameter_problem(sizes: tuple[int, ...], rules: tuple[int, int],
                      rule_length: tuple[int, int]) -> tuple[str, str] | None:
    """(knob, reason) where a random grammar of these parameters may ask for more than the
    limits allow; None where it may not."""
    depth = len(sizes) - 1
    if depth > MAX_DEPTH:
        return "sizes", f"{depth} levels of nonterminals; at most {MAX_DEPTH} (MAX_DEPTH)"
    if max(sizes) > MAX_SYMBOLS:
        return "sizes", (f"at most {MAX_SYMBOLS:,} symbols a level (MAX_SYMBOLS: each terminal "
                         "is a token)")
    if max(sizes[:-1]) * rules[1] > MAX_RULES:
        return "rules", (f"up to {max(sizes[:-1]) * rules[1]:,} rules a level; at most "
                         f"{MAX_RULES:,} (MAX_RULES)")
    if rule_length[1] ** depth > MAX_STRING_LENGTH:
        return "rule_length", (f"over {depth} levels allows strings of "
                               f"{rule_length[1] ** depth:,} terminals; at most "
                               f"{MAX_STRING_LENGTH:,} (MAX_STRING_LENGTH): use fewer levels "
                               "(sizes) or shorter rules")
    return None


def _draw_rules(rng: random.Random, below: int, rules: tuple[int, int],
                rule_length: tuple[int, int]) -> list[Rule]:
    count = rng.randint(*rules)
    possible = sum(below ** n for n in range(rule_length[0], rule_length[1] + 1))
    if count > possible:
        raise GrammarError(f"rules={list(rules)}: a symbol cannot have {count} distinct rules of "
                           f"length {list(rule_length)} over {below} symbols")
    drawn: list[Rule] = []
    while len(drawn) < count:
        rule = tuple(rng.randrange(below) for _ in range(rng.randint(*rule_length)))
        if rule not in drawn:
            drawn.append(rule)
    return drawn
