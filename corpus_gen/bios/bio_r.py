"""bioR: realistic, varied biographies generated from a hand-written grammar.

A biography is an opening sentence that introduces the full name, followed by the
six attribute facts grouped into randomly chosen "units" (a unit states one, two or
three attributes in one sentence) in a random order, with 2-5 filler sentences
(hobbies, family, travel, pets, ...) interleaved. Later mentions of the person vary
between pronoun, first name, "Mr./Ms. Last" and a nickname once it was introduced.
Fillers never name a city, university or company, so they cannot contradict the
attributes. Every attribute value appears verbatim; the birth date uses one of
``DATE_FORMATS``. All randomness comes from the caller's ``random.Random``.

The sentences, word pools and nickname table are data, in ``data/bio_r.yaml`` (its header
explains the placeholders); this module checks and compiles them once at import, and decides
which sentences a biography uses, in which order and how each mentions the person.

Speed (one core, Python 3.11): ~45K bios/s (~22 us per bio) at a quiet moment, ~28K/s on a
busy machine; one ``rng.random()`` draw per choice, partitions precomputed at import.
"""

from __future__ import annotations

import random
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # PyYAML, installed with omegaconf

from corpus_gen.bios.people import ATTRIBUTES, MONTHS
from corpus_gen.bios.templates import PRONOUNS, SUBJECT_SLOTS
from corpus_gen.core.errors import CorpusError

__all__ = ["DATE_FORMATS", "GRAMMAR_FILE", "Grammar", "format_date", "load_grammar", "nickname",
           "render_bio_r"]

GRAMMAR_FILE = Path(__file__).parent / "data" / "bio_r.yaml"

# Birth-date styles; ``format_date``'s ``style`` indexes this tuple.
DATE_FORMATS: tuple[str, ...] = (
    "{month} {day}, {year}",  # October 2, 1996
    "{day} {month} {year}",  # 2 October 1996
    "{month} {ordinal}, {year}",  # October 2nd, 1996
    "the {ordinal} of {month}, {year}",  # the 2nd of October, 1996
    "{month_num}/{day}/{year}",  # 10/2/1996
)


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return f"{day}th"
    return f"{day}{('th', 'st', 'nd', 'rd')[day % 10] if day % 10 < 4 else 'th'}"


def format_date(month: int, day: int, year: int, style: int) -> str:
    """Format a birth date in one of the ``DATE_FORMATS`` styles (index ``style``)."""
    if not 0 <= style < len(DATE_FORMATS):
        raise ValueError(f"date style must be in [0, {len(DATE_FORMATS)}), got {style}")
    return DATE_FORMATS[style].format(
        month=MONTHS[month - 1],
        day=day,
        ordinal=_ordinal(day),
        year=year,
        month_num=month,
    )


_VOWELS = "aeiouAEIOU"
# Final consonant of a one-syllable stem -> spelling before the "-y"/"-ie" ending.
_DIMINUTIVE_JOIN = {
    "b": "bb", "d": "dd", "g": "gg", "m": "mm", "n": "nn", "p": "pp", "t": "tt",
    "c": "ck", "k": "ck", "l": "ll", "z": "zz",
}  # fmt: skip
_NICKNAME_CACHE: dict[tuple[str, str], str | None] = {}


def nickname(first: str, gender: str) -> str | None:
    """Derive a nickname from a first name (deterministic), or None if none sounds right.

    Known names use a familiar short form from the grammar's table ("Robert" -> "Bob");
    otherwise the first syllable (up to the first consonant after the first vowel group) either
    stands alone when it is a plausible short form ("Christopher" -> "Chris", "Bradley" ->
    "Brad") or gets a "-y"/"-ie" ending ("Jonathan" -> "Jonny", "Madeline" -> "Maddie",
    "Olivia" -> "Ollie").
    """
    key = (first, gender)
    if key in _NICKNAME_CACHE:
        return _NICKNAME_CACHE[key]
    nick = _GRAMMAR.nicknames.get(first)
    if nick is None and len(first) >= 5 and first.isalpha():
        n = len(first)
        i = 0
        while i < n and first[i] not in _VOWELS:
            i += 1
        onset = i
        while i < n and first[i] in _VOWELS:
            i += 1
        if 0 < i - onset <= 1 and i < n - 1:
            stem = first[: i + 1]
            if len(stem) >= 4:
                # Consonant-cluster stems ("Chris", "Brad") only work bare, and only with a
                # soft final consonant ("Grac", "Step" would not).
                nick = stem if stem[-1] in "dlmnsx" else None
            elif stem[-1] in _DIMINUTIVE_JOIN:
                ending = "ie" if gender == "female" else "y"
                nick = stem[:-1] + _DIMINUTIVE_JOIN[stem[-1]] + ending
    _NICKNAME_CACHE[key] = nick
    return nick


def _an(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


# ---------------------------------------------------------------------------------------------
# The grammar, compiled.
# ---------------------------------------------------------------------------------------------
_Word = str | tuple[str, str]  # a word, or a (present, past) pair


@dataclass(frozen=True)
class _Draw:
    """A placeholder that draws one of ``alternatives``."""

    alternatives: tuple[_Word, ...]
    article: bool = False  # "a"/"an" in front of the word drawn
    other: bool = False  # redraw while equal to the draw just before it in the sentence


# Words of one biography that sentences name, after the five mention forms (SUBJECT_SLOTS):
# a compiled sentence refers to either by its index in _NAMES.
_WORDS = ("full", "nick", "he", "his", "him", "man", *ATTRIBUTES)
_NAMES = (*SUBJECT_SLOTS, *_WORDS)
_PERSON = (*SUBJECT_SLOTS, "he", "his", "him", "man")  # what any sentence may name
_STAGES = ("birth", "education", "work")

# A compiled sentence: literal text, a name (index in _NAMES), a fixed (present, past) pair or
# a draw, in reading order.
_Part = str | int | tuple[str, str] | _Draw
_Sentence = tuple[_Part, ...]
_Pools = dict[str, tuple[_Word, ...]]
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class _Unit:
    """Attributes stated together in one sentence (see ``units`` in the grammar file)."""

    attributes: tuple[int, ...]  # indexes in ATTRIBUTES
    stage: int  # index in _STAGES
    lead: tuple[_Sentence, ...]
    sentences: tuple[_Sentence, ...]  # lead, then free
    events: tuple[_Sentence, ...]


@dataclass(frozen=True)
class Grammar:
    """A checked, compiled bioR grammar (``load_grammar``)."""

    openers: tuple[_Sentence, ...]
    nick_opener: _Sentence
    nick_intros: tuple[_Sentence, ...]
    fillers: tuple[tuple[_Sentence, ...], ...]  # by category
    forward: tuple[str, ...]  # connectors
    backward: tuple[str, ...]
    same: tuple[str, ...]
    nicknames: dict[str, str]
    partitions: tuple[tuple[_Unit, ...], ...]  # every way to group the attributes into units
    partition_cdf: tuple[float, ...]


class _Malformed(Exception):
    """A grammar entry that is not what the format allows; the message names the entry."""


def load_grammar(path: Path = GRAMMAR_FILE) -> Grammar:
    """Read, check and compile a bioR grammar file. Raises CorpusError naming the file and the
    entry that is wrong: an unknown placeholder or pool, a missing or unknown section, a unit
    sentence that does not state its attributes, ..."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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
               ) -> tuple[_Sentence, ...]:
    return tuple(_sentence(text, f"{where}[{i}]", names, pools)
                 for i, text in enumerate(_list(value, where)))


def _sentence(text: object, where: str, names: tuple[str, ...], pools: _Pools) -> _Sentence:
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


def _units(entries: list[Any], pools: _Pools) -> tuple[list[_Unit], list[tuple[_Unit, float]]]:
    """The single-attribute units (one per attribute) and the others with their odds."""
    singles: list[_Unit] = []
    combos: list[tuple[_Unit, float]] = []
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


def _unit(entry: object, where: str, pools: _Pools) -> tuple[_Unit, float | None]:
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
    unit = _Unit(tuple(ATTRIBUTES.index(a) for a in attributes), _STAGES.index(entry["stage"]),
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


def _check_unit_sentence(sentence: _Sentence, kind: str, attributes: list[str],
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


def _build_partitions(singles: list[_Unit], combos: list[tuple[_Unit, float]],
                      ) -> tuple[tuple[tuple[_Unit, ...], ...], tuple[float, ...]]:
    """All disjoint combo choices (rest as single units) and their cumulative probabilities,
    enumerated once so that a bio picks its partition with a single random draw."""
    partitions: list[tuple[_Unit, ...]] = []
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


_GRAMMAR = load_grammar()

# ---------------------------------------------------------------------------------------------
# Rendering.
# ---------------------------------------------------------------------------------------------
_Ref = tuple[str, ...]  # a mention's five forms, in SUBJECT_SLOTS order
_Pick = Callable[[Sequence[Any]], Any]  # one draw from a sequence


def _say(sentence: _Sentence, values: tuple[str | None, ...], tense: int, pick: _Pick) -> str:
    """Render a compiled sentence; ``values`` are the mention's forms then the _WORDS."""
    out = []
    drawn = None
    # Exact class tests rather than isinstance: this loop is where rendering spends its time.
    for part in sentence:
        kind = part.__class__
        if kind is str:
            out.append(part)
        elif kind is int:
            out.append(values[part])
        elif kind is tuple:
            out.append(part[tense])
        else:
            word = pick(part.alternatives)
            while part.other and word == drawn:
                word = pick(part.alternatives)
            drawn = word
            if word.__class__ is tuple:
                word = word[tense]
            out.append(_an(word) if part.article else word)
    return "".join(out)


_NICK_INTRO = -1  # body marker for a nickname-introduction sentence
_TITLES = {"male": "Mr.", "female": "Ms."}
_MIN_WORDS = 50
_MAX_WORDS = 200


def _name_ref(name: str) -> _Ref:
    poss = name + "'s"
    return (name, name, poss, poss, name)


def _lower(ref: _Ref) -> _Ref:
    return (ref[1], ref[1], ref[3], ref[3], ref[4])


def render_bio_r(person: Mapping[str, object], rng: random.Random) -> str:
    """Render one bioR biography (50-200 words) stating every attribute of ``person``."""
    r = rng.random

    def p(seq: Sequence[Any]) -> Any:
        return seq[int(r() * len(seq))]

    grammar = _GRAMMAR
    first = str(person["first"])
    gender = str(person["gender"])
    if gender not in PRONOUNS:
        raise ValueError(f"gender must be 'male' or 'female', got {gender!r}")
    full = f"{first} {person['middle']} {person['last']}"
    date = format_date(
        int(person["birth_month"]),  # type: ignore[call-overload]
        int(person["birth_day"]),  # type: ignore[call-overload]
        int(person["birth_year"]),  # type: ignore[call-overload]
        int(r() * len(DATE_FORMATS)),
    )
    tense = 0 if r() < 0.5 else 1  # present or past for the work facts
    nick = nickname(first, gender)
    pron = PRONOUNS[gender]
    bio_words = (full, nick, pron[1], pron[3], pron[4], "man" if gender == "male" else "woman",
                 date, *(str(person[a]) for a in ATTRIBUTES[1:]))  # in _WORDS order

    def say(sentence: _Sentence, ref: _Ref) -> str:
        return _say(sentence, ref + bio_words, tense, p)

    full_ref = _name_ref(full)
    first_ref = _name_ref(first)
    title_ref = _name_ref(f"{_TITLES[gender]} {person['last']}")
    nick_ref = _name_ref(nick) if nick else pron
    nick_known = False

    # Partition the six attributes into units (one, two or three attributes per sentence).
    units = list(grammar.partitions[bisect_right(grammar.partition_cdf, r())])
    # Order: sometimes chronological (stable by life stage), otherwise fully shuffled.
    for i in range(len(units) - 1, 0, -1):
        j = int(r() * (i + 1))
        units[i], units[j] = units[j], units[i]
    if r() < 0.35:
        units.sort(key=lambda u: u.stage)

    # Opening sentence: always introduces the full name, often while stating a first fact.
    sentences: list[str] = []
    prev_stage = -1
    x = r()
    if x < 0.55:
        unit = units.pop(0)
        sentences.append(say(p(unit.sentences), full_ref))
        prev_stage = unit.stage
    elif nick is not None and x > 0.9:
        sentences.append(say(grammar.nick_opener, full_ref))
        nick_known = True
    else:
        sentences.append(say(p(grammar.openers), full_ref))

    # Body: remaining units plus 2-5 fillers from distinct categories at random positions;
    # sometimes the first filler is replaced by a nickname introduction.
    cats = list(range(len(grammar.fillers)))
    n_fill = 2 + int(r() * 4)
    body: list[_Unit | int] = list(units)
    for k in range(n_fill):
        j = k + int(r() * (len(cats) - k))
        cats[k], cats[j] = cats[j], cats[k]
        body.insert(int(r() * (len(body) + 1)), cats[k])
    if nick is not None and not nick_known and r() < 0.4:
        body[body.index(cats[0])] = _NICK_INTRO

    fillers_at: list[int] = []
    for item in body:
        y = r()
        if y < 0.5:
            ref = pron
        elif y < 0.68:
            ref = first_ref
        elif y < 0.82:
            ref = title_ref
        elif y < 0.97 and nick_known:
            ref = nick_ref
        elif y >= 0.97:
            ref = full_ref
        else:
            ref = pron
        if isinstance(item, int):
            prev_stage = -1  # a temporal connector must follow a fact sentence directly
            if item == _NICK_INTRO:
                sentences.append(say(p(grammar.nick_intros), first_ref if y < 0.3 else pron))
                nick_known = True
            else:
                fillers_at.append(len(sentences))
                sentences.append(say(p(grammar.fillers[item]), ref))
        else:
            connectors: tuple[str, ...] = ()
            events = item.events
            if prev_stage >= 0 and r() < 0.4:
                if item.stage == prev_stage:
                    connectors, events = grammar.same, item.lead
                elif events:
                    connectors = grammar.forward if item.stage > prev_stage else grammar.backward
            if connectors:
                connector = p(connectors)
                sentences.append(connector + say(p(events), _lower(ref)))
            else:
                sentences.append(say(p(item.sentences), ref))
            prev_stage = item.stage

    text = " ".join(sentences)
    words = text.count(" ") + 1
    if words < _MIN_WORDS:
        # Top up with fillers from unused categories (appended: they reference nothing earlier).
        k = n_fill
        while words < _MIN_WORDS:
            cat = cats[k % len(cats)]
            k += 1
            extra = say(p(grammar.fillers[cat]), pron)
            sentences.append(extra)
            words += extra.count(" ") + 1
        text = " ".join(sentences)
    elif words > _MAX_WORDS:
        # Drop fillers from the end until the bio fits; facts are never dropped.
        for idx in reversed(fillers_at):
            words -= sentences[idx].count(" ") + 1
            sentences[idx] = ""
            if words <= _MAX_WORDS:
                break
        text = " ".join(s for s in sentences if s)
    return text
