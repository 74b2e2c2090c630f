"""bioS biographies spelled in text units, a whole batch at once.

Each compiled sentence (`templates.PLANS`) becomes a short program of unit terms. A run of
literal words is one fixed unit. A slot is a range of units, one per value it can take, with
the sentence's punctuation glued on: "Sydney, NSW." is one unit. The name takes three terms
(first, middle, and last with "'s" or punctuation), the birth date two ("October 2," and
"1996."): one unit per whole date would make 67,200 units of what 336 + 200 spell. A term's
unit is its range's base plus the person's index in the term's field, so a batch's unit ids
come from a few numpy operations, its text from one join per document, its tokens from one
gather (`Tokenizer.encode_units`).
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from corpus_gen.bios.people import ATTRIBUTES, FIRST_YEAR, MONTH_DAYS, YEARS, People, month_day
from corpus_gen.bios.pools import Pools
from corpus_gen.bios.templates import MODES, PLANS
from corpus_gen.core.records import Units

# Columns of a person's value matrix; "fixed" is always 0 (a literal run has one unit).
FIELDS = ("fixed", "first", "middle", "last", "month_day", "year", "birth_city", "university",
          "major", "employer", "company_city")
# The fields that spell each slot, in text order.
SLOT_FIELDS = {"name": ("first", "middle", "last"), "birth_date": ("month_day", "year"),
               **{a: (a,) for a in ATTRIBUTES if a != "birth_date"}}
COLUMN = {field: column for column, field in enumerate(FIELDS)}  # a field's column


@dataclass(frozen=True)
class Spelling:
    """Every plan's unit program: plan p's terms are term_start[p] + [0, term_count[p]); term k
    spells unit term_base[k] + (the person's value in column term_field[k])."""

    units: Units
    term_start: np.ndarray
    term_count: np.ndarray
    term_base: np.ndarray
    term_field: np.ndarray


_PLAN_START = np.cumsum([0] + [len(PLANS[a]) * len(MODES) for a in ATTRIBUTES[:-1]])


def plan_index(attribute: np.ndarray, template: np.ndarray, mode: np.ndarray) -> np.ndarray:
    """The number of plan PLANS[ATTRIBUTES[attribute]][template][MODES[mode]] (elementwise)."""
    return _PLAN_START[attribute] + template * len(MODES) + mode


@lru_cache(maxsize=4)
def spelling(pools: Pools) -> Spelling:
    """The unit vocabulary and plan programs for these value pools."""
    values = _field_values(pools)
    strings: list[str] = []
    bases: dict[tuple[str, str, str], int] = {}

    def base(prefix: str, field: str, suffix: str) -> int:
        if (prefix, field, suffix) not in bases:
            bases[prefix, field, suffix] = len(strings)
            strings.extend(prefix + value + suffix for value in values[field])
        return bases[prefix, field, suffix]

    starts, counts, term_base, term_field = [], [], [], []
    for attribute in ATTRIBUTES:  # in plan-number order: attribute, template, mode
        for plan in PLANS[attribute]:
            for mode in MODES:
                starts.append(len(term_base))
                for term in plan[mode]:
                    if term.slot is None:
                        term_base.append(base(term.prefix, "fixed", ""))
                        term_field.append(COLUMN["fixed"])
                        continue
                    fields = SLOT_FIELDS[attribute if term.slot == "value" else term.slot]
                    for k, field in enumerate(fields):
                        term_base.append(base(term.prefix if k == 0 else "", field,
                                              term.suffix if k == len(fields) - 1 else ""))
                        term_field.append(COLUMN[field])
                counts.append(len(term_base) - starts[-1])
    return Spelling(Units(strings), np.array(starts), np.array(counts), np.array(term_base),
                    np.array(term_field))


def _field_values(pools: Pools) -> dict[str, tuple[str, ...]]:
    return {
        "fixed": ("",),
        "first": pools.first_names,
        "middle": pools.middle_names,
        "last": pools.last_names,
        "month_day": MONTH_DAYS,
        "year": tuple(str(FIRST_YEAR + k) for k in range(YEARS)),
        "birth_city": pools.cities,
        "university": pools.universities,
        "major": pools.majors,
        "employer": pools.employers,
        "company_city": pools.company_cities,
    }


def value_matrix(people: People) -> np.ndarray:
    """Each person's index in every field, one row per person, columns as FIELDS."""
    columns = {"fixed": np.zeros_like(people.index), "first": people.first,
               "middle": people.middle, "last": people.last, "month_day": month_day(people),
               "year": people.year - FIRST_YEAR, "birth_city": people.city,
               "university": people.university, "major": people.major,
               "employer": people.company, "company_city": people.company}
    return np.stack([columns[field] for field in FIELDS], axis=1)


def _terms(spelled: Spelling, plans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The term of each output unit of documents whose sentences are plans[i, :], and the
    number of units of each document."""
    count = spelled.term_count[plans.ravel()]
    ends = np.cumsum(count)
    # output position k holds term term_start[plan] + (k - the plan's first output position)
    term = np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(
        spelled.term_start[plans.ravel()] - (ends - count), count)
    return term, count.reshape(plans.shape).sum(axis=1)


def spell(spelled: Spelling, plans: np.ndarray, values: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """Unit ids and document offsets of documents whose sentences are plans[i, :] (plan
    numbers, in text order), for people with value rows values[i]."""
    term, per_doc = _terms(spelled, plans)
    row = np.repeat(np.arange(0, values.size, values.shape[1]), per_doc)
    ids = spelled.term_base[term] + values.ravel()[row + spelled.term_field[term]]
    return ids, np.concatenate([[0], np.cumsum(per_doc)])


def unit_fields(spelled: Spelling, plans: np.ndarray) -> np.ndarray:
    """The FIELDS column each unit of `spell(spelled, plans, ...)` spells (0: literal words)."""
    return spelled.term_field[_terms(spelled, plans)[0]]
