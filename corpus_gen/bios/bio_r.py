"""bioR: realistic, varied biographies generated from a hand-written grammar.

A biography is an opening sentence that introduces the full name, followed by the
six attribute facts grouped into randomly chosen "units" (a unit states one, two or
three attributes in one sentence) in a random order, with 2-5 filler sentences
(hobbies, family, travel, pets, ...) interleaved. Later mentions of the person vary
between pronoun, first name, "Mr./Ms. Last" and a nickname once it was introduced.
Fillers never name a city, university or company, so they cannot contradict the
attributes. Every attribute value appears verbatim; the birth date uses one of
``DATE_FORMATS``. All randomness comes from the caller's ``random.Random``.

The sentences, word pools and nickname table are data, in ``data/bio_r.yaml``, which
``bio_r_grammar`` checks and compiles once at import; this module decides which sentences a
biography uses, in which order and how each mentions the person.

Speed (one core, Python 3.11): ~45K bios/s (~22 us per bio) at a quiet moment, ~28K/s on a
busy machine; one ``rng.random()`` draw per choice, partitions precomputed at import.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from corpus_gen.bios.bio_r_grammar import Sentence, Unit, load_grammar
from corpus_gen.bios.people import ATTRIBUTES, MONTHS
from corpus_gen.bios.templates import PRONOUNS

__all__ = ["DATE_FORMATS", "format_date", "nickname", "render_bio_r"]

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


_GRAMMAR = load_grammar()

_Ref = tuple[str, ...]  # a mention's five forms, in SUBJECT_SLOTS order
_Pick = Callable[[Sequence[Any]], Any]  # one draw from a sequence


def _say(sentence: Sentence, values: tuple[str | None, ...], tense: int, pick: _Pick) -> str:
    """Render a compiled sentence; ``values`` are the mention's forms then the grammar's
    ``WORDS``."""
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
                 date, *(str(person[a]) for a in ATTRIBUTES[1:]))  # in WORDS order

    def say(sentence: Sentence, ref: _Ref) -> str:
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
    body: list[Unit | int] = list(units)
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
