"""The bioR grammar: reading, checking and compiling ``data/bio_r.yaml``.

The sentences, word pools and nickname table of bioR biographies are data (the file's header
explains the placeholders). ``load_grammar`` checks every entry, naming the file and the entry
that is wrong, and compiles each sentence into parts the renderer (``bio_r.py``) walks: literal
text, a name, a fixed (present, past) pair or a draw from a pool. It also enumerates, once, every
way of grouping the attributes into units with its probability, so that a biography picks its
grouping with a single random draw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # PyYAML, installed with omegaconf

from corpus_gen.bios.people import ATTRIBUTES
from corpus_gen.bios.templates import SUBJECT_SLOTS
from corpus_gen.core.errors import CorpusError

GRAMMAR_FILE = Path(__file__).parent / "data" / "bio_r.yaml"

_Word = str | tuple[str, str]  # a word, or a (present, past) pair


@dataclass(frozen=True)
class _Draw:
    """A placeholder that draws one of ``alternatives``."""

    alternatives: tuple[_Word, ...]
    article: bool = False  # "a"/"an" in front of the word drawn
    other: bool = False  # redraw while equal to the draw just before it in the sentence


# Words of one biography that sentences name, after the five mention forms (SUBJECT_SLOTS):
# a compiled sentence refers to either by its index in _NAMES, so the renderer passes a
# biography's values in this order.
WORDS = ("full", "nick", "he", "his", "him", "man", *ATTRIBUTES)
_NAMES = (*SUBJECT_SLOTS, *WORDS)
_PERSON = (*SUBJECT_SLOTS, "he", "his", "him", "man")  # what any sentence may name
_STAGES = ("birth", "education", "work")

# A compiled sentence: literal text, a name (index in _NAMES), a fixed (present, past) pair or
# a draw, in reading order.
_Part = str | int | tuple[str, str] | _Draw
Sentence = tuple[_Part, ...]
_Pools = dict[str, tuple[_Word, ...]]
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Unit:
    """Attributes stated together in one sentence (see ``units`` in the grammar file)."""

    attributes: tuple[int, ...]  # indexes in ATTRIBUTES
    stage: int  # index in _STAGES
    lead: tuple[Sentence, ...]
    sentences: tuple[Sentence, ...]  # lead, then free
    events: tuple[Sentence, ...]


@dataclass(frozen=True)
class Grammar:
    """A checked, compiled bioR grammar (``load_grammar``)."""

    openers: tuple[Sentence, ...]
    nick_opener: Sentence
    nick_intros: tuple[Sentence, ...]
    fillers: tuple[tuple[Sentence, ...], ...]  # by category
    forward: tuple[str, ...]  # connectors
    backward: tuple[str, ...]
    same: tuple[str, ...]
    nicknames: dict[str, str]
    partitions: tuple[tuple[Unit, ...], ...]  # every way to group the attributes into units
    partition_cdf: tuple[float, ...]


class _Malformed(Exception):
    """A grammar entry that is not what the format allows; the message names the entry."""


def load_grammar(path: Path = GRAMMAR_FILE) -> Grammar:
    """Read, check and compile a bioR grammar file. Raises CorpusError naming the file and the
    entry that is wrong: an unknown placeholder or pool, a missing or unknown section, a unit
    sentence that does not state its attributes, ..."""
    try:
        # libyaml's loader where PyYAML has it: 10x faster, and every command imports this
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        return _compile_grammar(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CorpusError(f"{path}: cannot read the bioR grammar: {' '.join(str(exc).split())}"
                          ) from None
    except _Malformed as exc:
        raise CorpusError(f"{path}: {exc}") from None


_SECTIONS = ("openers", "nick_opener", "nick_intros", "units", "fillers", "connectors",
             "nicknames", "pools")
_CONNECTORS = ("forward", "backward", "same")


def _compile_grammar(data: object) -> Grammar:
    top = _mapping(data, "top level", _SECTIONS)
    pools = {name: _pool(name, words) for name, words in _mapping(top["pools"], "pools").items()}
    openers = _sentences(top["openers"], "openers", (*_PERSON, "full"), pools)
    nick_opener = _sentence(top["nick_opener"], "nick_opener", (*_PERSON, "full", "nick"), pools)
    nick_intros = _sentences(top["nick_intros"], "nick_intros", (*_PERSON, "nick"), pools)
    fillers = tuple(_sentences(sentences, f"fillers.{category}", _PERSON, pools)
                    for category, sentences in _mapping(top["fillers"], "fillers").items())
    connectors = _mapping(top["connectors"], "connectors", _CONNECTORS)
    forward, backward, same = (_strings(connectors[key], f"connectors.{key}")
                               for key in _CONNECTORS)
    nicknames = _mapping(top["nicknames"], "nicknames")
    for name, short in nicknames.items():
        if not isinstance(short, str) or not short:
            raise _Malformed(f"nicknames.{name}: expected a nickname, got {short!r}")
    singles, combos = _units(_list(top["units"], "units"), pools)
    partitions, cdf = _build_partitions(singles, combos)
    return Grammar(openers, nick_opener, nick_intros, fillers, forward, backward, same,
                   nicknames, partitions, cdf)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(value: object, where: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``value`` as a mapping with string keys; exactly ``keys`` when given."""
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        raise _Malformed(f"{where}: expected a mapping of names to entries, got {_show(value)}")
    if keys is not None and set(value) != set(keys):
        missing, unknown = set(keys) - set(value), set(value) - set(keys)
        wrong = [f"{what} {sorted(names)}"
                 for what, names in (("missing", missing), ("unknown", unknown)) if names]
        raise _Malformed(f"{where}: {', '.join(wrong)}; expected the keys {list(keys)}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise _Malformed(f"{where}: expected a non-empty list, got {_show(value)}")
    return value


def _strings(value: object, where: str) -> tuple[str, ...]:
    items = _list(value, where)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _Malformed(f"{where}[{i}]: expected a string (quote it), got {_show(item)}")
    return tuple(items)


def _pool(name: str, value: object) -> tuple[_Word, ...]:
    where = f"pools.{name}"
    if not name.isupper():
        raise _Malformed(f"{where}: a pool's name is upper case (lower-case placeholders name "
                         "the person or an attribute)")
    return tuple(_alternative(word, f"{where}[{i}]")
                 for i, word in enumerate(_strings(value, where)))


def _alternative(word: str, where: str) -> _Word:
    """A word, or a (present, past) pair written "works/worked"."""
    if "/" not in word:
        return word
    tenses = word.split("/")
    if len(tenses) != 2:
        raise _Malformed(f"{where}: {word!r} is not one present/past pair")
    return tenses[0], tenses[1]


def _sentences(value: object, where: str, names: tuple[str, ...], pools: _Pools,
               ) -> tuple[Sentence, ...]:
    return tuple(_sentence(text, f"{where}[{i}]", names, pools)
                 for i, text in enumerate(_list(value, where)))


def _sentence(text: object, where: str, names: tuple[str, ...], pools: _Pools) -> Sentence:
    """Compile one sentence whose placeholders may name ``names`` and draw from ``pools``."""
    if not isinstance(text, str) or not text:
        raise _Malformed(f"{where}: expected a sentence (a string), got {_show(text)}")
    parts: list[_Part] = []
    last_pool = None  # the pool of the previous draw, which an {other POOL} must repeat
    for i, piece in enumerate(_PLACEHOLDER.split(text)):
        if i % 2 == 0:  # literal text between placeholders
            if "{" in piece or "}" in piece:
                raise _Malformed(f"{where}: unbalanced brace in {text!r}")
            if piece:
                parts.append(piece)
        elif "|" in piece:
            parts.append(_Draw(tuple(_alternative(word, where) for word in piece.split("|"))))
            last_pool = None
        elif "/" in piece:
            parts.append(_alternative(piece, where))
        elif piece in names:
            parts.append(_NAMES.index(piece))
        else:
            modifier, _, pool = piece.rpartition(" ")
            if pool not in pools or modifier not in ("", "a", "other"):
                raise _Malformed(f"{where}: unknown placeholder {{{piece}}} in {text!r}; known "
                                 f"here: {', '.join(names)}, a pool or an inline {{x|y}}")
            if modifier == "other" and last_pool != pool:
                raise _Malformed(f"{where}: {{{piece}}} must follow a {{{pool}}} in {text!r}")
            parts.append(_Draw(pools[pool], article=modifier == "a", other=modifier == "other"))
            last_pool = pool
    return tuple(parts)


def _units(entries: list[Any], pools: _Pools) -> tuple[list[Unit], list[tuple[Unit, float]]]:
    """The single-attribute units (one per attribute) and the others with their odds."""
    singles: list[Unit] = []
    combos: list[tuple[Unit, float]] = []
    for i, entry in enumerate(entries):
        unit, odds = _unit(entry, f"units[{i}]", pools)
        if odds is None:
            singles.append(unit)
        else:
            combos.append((unit, odds))
    stated = sorted(a for unit in singles for a in unit.attributes)
    if stated != list(range(len(ATTRIBUTES))):
        raise _Malformed(f"units: every attribute needs exactly one unit of its own "
                         f"({list(ATTRIBUTES)}); got {[ATTRIBUTES[a] for a in stated]}")
    return singles, combos


def _unit(entry: object, where: str, pools: _Pools) -> tuple[Unit, float | None]:
    """One unit and its odds (None for a single attribute, which is always available)."""
    required, optional = {"attributes", "stage", "lead", "free"}, {"events", "odds"}
    if not isinstance(entry, dict) or not required <= set(entry) <= required | optional:
        keys = sorted(entry) if isinstance(entry, dict) else _show(entry)
        raise _Malformed(f"{where}: expected the keys {sorted(required)} and optionally "
                         f"{sorted(optional)}, got {keys}")
    attributes = _list(entry["attributes"], f"{where}.attributes")
    if any(a not in ATTRIBUTES for a in attributes) or len(set(attributes)) < len(attributes):
        raise _Malformed(f"{where}.attributes: {attributes!r} are not distinct attributes of "
                         f"{list(ATTRIBUTES)}")
    if entry["stage"] not in _STAGES:
        raise _Malformed(f"{where}.stage: {entry['stage']!r} is not one of {list(_STAGES)}")
    names = (*_PERSON, *attributes)
    groups = {kind: _sentences(entry[kind], f"{where}.{kind}", names, pools)
              for kind in ("lead", "free", "events") if kind in entry}
    for kind, group in groups.items():
        for j, sentence in enumerate(group):
            _check_unit_sentence(sentence, kind, attributes, f"{where}.{kind}[{j}]")
    unit = Unit(tuple(ATTRIBUTES.index(a) for a in attributes), _STAGES.index(entry["stage"]),
                 groups["lead"], groups["lead"] + groups["free"], groups.get("events", ()))
    odds = entry.get("odds")
    if len(attributes) == 1:
        if odds is not None:
            raise _Malformed(f"{where}.odds: a unit of one attribute is always available")
        return unit, None
    if not isinstance(odds, (int, float)) or isinstance(odds, bool) or odds <= 0:
        raise _Malformed(f"{where}.odds: a unit of several attributes needs odds > 0, "
                         f"got {odds!r}")
    return unit, float(odds)


def _check_unit_sentence(sentence: Sentence, kind: str, attributes: list[str],
                         where: str) -> None:
    # Every attribute value must appear verbatim in a biography; a connector is glued in front
    # of lead and event sentences with the mention lowered, so those start with the mention.
    named = {_NAMES[part] for part in sentence if isinstance(part, int)}
    if not named >= set(attributes):
        missing = [a for a in attributes if a not in named]
        raise _Malformed(f"{where}: does not state {missing}; every sentence of a unit states "
                         f"all of its attributes {attributes}")
    if kind != "free" and sentence[0] not in (SUBJECT_SLOTS.index("Subj"),
                                              SUBJECT_SLOTS.index("Poss")):
        raise _Malformed(f"{where}: a {kind} sentence starts with {{Subj}} or {{Poss}}")


def _build_partitions(singles: list[Unit], combos: list[tuple[Unit, float]],
                      ) -> tuple[tuple[tuple[Unit, ...], ...], tuple[float, ...]]:
    """All disjoint combo choices (rest as single units) and their cumulative probabilities,
    enumerated once so that a bio picks its partition with a single random draw."""
    partitions: list[tuple[Unit, ...]] = []
    weights: list[float] = []
    for bits in range(1 << len(combos)):
        mask, weight, chosen = 0, 1.0, []
        for i, (unit, odds) in enumerate(combos):
            if bits >> i & 1:
                unit_mask = sum(1 << a for a in unit.attributes)
                if mask & unit_mask:
                    break
                mask |= unit_mask
                weight *= odds
                chosen.append(unit)
        else:
            rest = [u for u in singles if not mask & (1 << u.attributes[0])]
            partitions.append(tuple(chosen + rest))
            weights.append(weight)
    total = sum(weights)
    cumulative: list[float] = []
    acc = 0.0
    for w in weights:
        acc += w / total
        cumulative.append(acc)
    cumulative[-1] = 1.0
    return tuple(partitions), tuple(cumulative)
