"""Inverse search (Part 3.2): the person's name, given some of their attributes. Trained on
forward facts only, a model answers these near 0%: the reversal curse.

Five levels, from the birth date alone to all six attributes; the answer is the full name, as a
QA document writes an answer (`qa.answered`), so a first-name match is a prefix of it.

A question is asked only where it has one right answer: where no one else in the population
(all `people`, train and test) has the level's attributes. With 800 people a few birth dates are
shared; at 100K people (67,200 possible dates) most are, so level 1 is then mostly not asked. The
eval sets and inverse QA documents leave the other questions out; the reversal task counts them.
"""

from functools import lru_cache
from math import prod

import numpy as np

from corpus_gen.bios.config import BiosConfig
from corpus_gen.bios.people import (
    ATTRIBUTES,
    DAYS,
    FIRST_YEAR,
    YEARS,
    People,
    draw_people,
    full_name,
    month_day,
)
from corpus_gen.bios.pools import Pools, load_pools
from corpus_gen.bios.qa import ANSWER_CUE, qa_text
from corpus_gen.core.errors import CorpusError

LEVELS = {  # level -> the attributes its question gives
    1: ("birth_date",),
    2: ("birth_date", "birth_city"),
    3: ("university", "major", "employer"),
    4: ("birth_date", "birth_city", "university", "major"),
    5: ATTRIBUTES,
}
CLAUSES = {
    "birth_date": "was born on {}",
    "birth_city": "was born in {}",
    "university": "studied at {}",
    "major": "majored in {}",
    "employer": "worked for {}",
    "company_city": "worked in {}",
}
_CHUNK = 1 << 20  # people drawn at a time when counting the population
_DENSE = 1 << 24  # a level with at most this many attribute combinations is counted in an array


def inverse_question(person: dict, level: int) -> str:
    """"Who was born on October 2, 1996 and was born in Princeton, NJ?" (+ the answer cue)."""
    clauses = [CLAUSES[a].format(person[a]) for a in LEVELS[level]]
    said = clauses[0] if len(clauses) == 1 else f"{', '.join(clauses[:-1])} and {clauses[-1]}"
    return f"Who {said}?{ANSWER_CUE}"


def inverse_rows(person: dict, split: str, levels: tuple[int, ...]) -> list[dict]:
    """One eval row per level of `levels`: the prompt, and the full name (and first name) it
    asks for."""
    return [{"person": person["id"], "split": split, "level": level,
             "prompt": inverse_question(person, level), "answer": full_name(person),
             "first_name": person["first"]}
            for level in levels]


def identifying_rows(config: BiosConfig, person: dict, split: str) -> list[dict]:
    """The eval rows of the person's questions that have one right answer."""
    return inverse_rows(person, split, identifying_levels(config, person["id"]))


def inverse_document(person: dict, levels: tuple[int, ...], answer_only_loss: bool
                     ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A training document of the inverse questions of `levels` with their answer, in level
    order, and the question spans to drop from the loss if asked (as `qa.qa_document`); empty
    for no levels (a person who shares all six attributes with someone else)."""
    name = full_name(person)
    return qa_text([(inverse_question(person, level), name) for level in levels],
                   answer_only_loss)


def identifying_levels(config: BiosConfig, index: int) -> tuple[int, ...]:
    """The levels whose question fits person `index` alone in the config's population."""
    bits = int(_population_levels(config.seed, config.people, config.data_dir)[index])
    return tuple(level for level in LEVELS if bits >> (level - 1) & 1)


@lru_cache(maxsize=2)
def _population_levels(seed: int, people: int, data_dir: str | None) -> np.ndarray:
    """Per person, a bit mask of the levels whose question fits that person alone (bit
    level - 1). One pass over the population in chunks keeps each person's attributes as one
    integer (8 bytes a person); each level's combinations are then counted in an array (few
    combinations) or by sorting (many), so the result is exact and the same in every process."""
    pools = load_pools(data_dir)
    radix = _radices(pools)
    if prod(radix.values()) >= 2**63:
        raise CorpusError(f"data_dir={data_dir!r}: the pools allow {prod(radix.values()):,} "
                          "attribute combinations, too many to count inverse questions "
                          "(at most 2**63)")
    combined = np.empty(people, dtype=np.int64)  # all six attributes, in mixed radix
    for start in range(0, people, _CHUNK):
        drawn = draw_people(seed, np.arange(start, min(start + _CHUNK, people)), pools)
        digits, code = _digits(drawn), np.zeros(len(drawn.index), dtype=np.int64)
        for attribute in ATTRIBUTES:
            code = code * radix[attribute] + digits[attribute]
        combined[start:start + len(code)] = code
    stride = {a: prod(radix[b] for b in ATTRIBUTES[i + 1:]) for i, a in enumerate(ATTRIBUTES)}
    bits = np.zeros(people, dtype=np.uint8)
    for level, attributes in LEVELS.items():
        code = np.zeros(people, dtype=np.int64)
        for attribute in attributes:
            code = code * radix[attribute] + combined // stride[attribute] % radix[attribute]
        alone = ~_shared(code, prod(radix[a] for a in attributes))
        bits |= alone.astype(np.uint8) << np.uint8(level - 1)
    return bits


def _radices(pools: Pools) -> dict[str, int]:
    """How many values each attribute takes; the company city is the employer's, so it adds
    none of its own."""
    return {"birth_date": 12 * DAYS * YEARS, "birth_city": len(pools.cities),
            "university": len(pools.universities), "major": len(pools.majors),
            "employer": len(pools.employers), "company_city": 1}


def _digits(people: People) -> dict[str, np.ndarray]:
    """Each attribute as an index below its radix."""
    return {"birth_date": month_day(people) * YEARS + people.year - FIRST_YEAR,
            "birth_city": people.city, "university": people.university, "major": people.major,
            "employer": people.company, "company_city": np.zeros_like(people.company)}


def _shared(code: np.ndarray, space: int) -> np.ndarray:
    """Whether each code occurs more than once; codes lie in [0, space)."""
    if space <= _DENSE:
        return np.bincount(code, minlength=space)[code] > 1
    ordered = np.sort(code)
    return np.isin(code, ordered[1:][ordered[1:] == ordered[:-1]])
