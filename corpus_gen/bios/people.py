"""People as a pure function of (seed, index): no global state, so N can reach the name space.

Names come from a keyed bijection of [0, first x middle x last), so the first N indices map to N
distinct names without a set of seen names. Attributes are independent uniform draws keyed by the
person's index; the company city is the employer's headquarters.
"""

from dataclasses import dataclass, fields

import numpy as np

from corpus_gen.bios.pools import Pools
from corpus_gen.core.seeding import derive_key, feistel_permute, randint

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
ATTRIBUTES = ("birth_date", "birth_city", "university", "major", "employer", "company_city")
DAYS = 28  # birth days drawn per month: every date exists in every month and year
FIRST_YEAR, YEARS = 1900, 200  # birth years drawn from [1900, 2100)


@dataclass(frozen=True)
class People:
    """Columns for a batch of people (parallel numpy arrays)."""

    index: np.ndarray
    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray
    month: np.ndarray  # 1-12
    day: np.ndarray  # 1-DAYS
    year: np.ndarray  # FIRST_YEAR + [0, YEARS)
    city: np.ndarray
    university: np.ndarray
    major: np.ndarray
    company: np.ndarray

    def __getitem__(self, rows: slice | np.ndarray) -> "People":
        return People(*(getattr(self, f.name)[rows] for f in fields(self)))


def draw_people(seed: int, index: np.ndarray, pools: Pools) -> People:
    index = np.asarray(index, dtype=np.int64)
    n_middle, n_last = len(pools.middle_names), len(pools.last_names)
    code = feistel_permute(index, pools.name_space, derive_key(seed, "bios", "names"))

    def draw(field: str, n: int) -> np.ndarray:
        return randint(derive_key(seed, "bios", field), index, n)

    return People(
        index=index,
        first=code // (n_middle * n_last),
        middle=(code // n_last) % n_middle,
        last=code % n_last,
        month=draw("month", 12) + 1,
        day=draw("day", DAYS) + 1,
        year=draw("year", YEARS) + FIRST_YEAR,
        city=draw("city", len(pools.cities)),
        university=draw("university", len(pools.universities)),
        major=draw("major", len(pools.majors)),
        company=draw("company", len(pools.employers)),
    )


PERSON_FIELDS = ("id", "first", "middle", "last", "gender", "birth_month", "birth_day",
                 "birth_year", "birth_date", "birth_city", "university", "major", "employer",
                 "company_city")
_PERSON_JSON = "{" + ",".join(f'"{field}":%s' for field in PERSON_FIELDS) + "}"
# A birth date is written "October 2, 1996": its month and day part, "October 2,", is
# MONTH_DAYS[month_day(people)]; bioS spells the date as that part and the year.
MONTH_DAYS = tuple(f"{month} {day}," for month in MONTHS for day in range(1, DAYS + 1))
_MONTH_DAYS = np.array(MONTH_DAYS, dtype=object)


def month_day(people: People) -> np.ndarray:
    """Each person's index in MONTH_DAYS."""
    return (people.month - 1) * DAYS + people.day - 1


def person_dicts(people: People, pools: Pools) -> list[dict]:
    """One dict of ground truth per person: what shards and eval sets record."""
    return [dict(zip(PERSON_FIELDS, row)) for row in zip(*_columns(people, pools, json=False))]


def person_json(people: People, pools: Pools,
                around: tuple[list[str], list[str]] | None = None) -> list[str]:
    """`orjson.dumps(person_dicts(people, pools)[i]).decode()` for each person, written
    directly from the columns: no dict per person. With `around` = (before, after), person i's
    JSON comes as before[i] + it + after[i], in the same single step (how a document's ground
    truth is written around its person)."""
    columns = _columns(people, pools, json=True)
    if around is None:
        return [_PERSON_JSON % row for row in zip(*columns)]
    return [f"%s{_PERSON_JSON}%s" % row for row in zip(around[0], *columns, around[1])]


def _columns(people: People, pools: Pools, json: bool) -> list[list]:
    """The PERSON_FIELDS of every person, column by column; strings as JSON if `json`."""
    def pick(pool: str, index: np.ndarray) -> list:
        return pools.arrays[pool][json][index].tolist()

    months, days, years = people.month.tolist(), people.day.tolist(), people.year.tolist()
    quote = '"' if json else ""
    heads = _MONTH_DAYS[month_day(people)].tolist()
    dates = [f"{quote}{head} {year}{quote}" for head, year in zip(heads, years)]
    genders = np.where(people.first < pools.male_first_names, f"{quote}male{quote}",
                       f"{quote}female{quote}").tolist()
    return [people.index.tolist(), pick("first_names", people.first),
            pick("middle_names", people.middle), pick("last_names", people.last), genders,
            months, days, years, dates, pick("cities", people.city),
            pick("universities", people.university), pick("majors", people.major),
            pick("employers", people.company), pick("company_cities", people.company)]


def full_name(person: dict) -> str:
    return f"{person['first']} {person['middle']} {person['last']}"
