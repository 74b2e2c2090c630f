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


def format_birth_date(month: int, day: int, year: int) -> str:
    """The canonical form, used by bioS and by QA answers: 'October 2, 1996'."""
    return f"{MONTHS[month - 1]} {day}, {year}"


def person_dicts(people: People, pools: Pools) -> list[dict]:
    """One dict of ground truth per person: what shards and eval sets record."""
    def pick(values: tuple[str, ...], index: np.ndarray) -> list[str]:
        return np.asarray(values, dtype=object)[index].tolist()

    months, days, years = people.month.tolist(), people.day.tolist(), people.year.tolist()
    dates = [f"{MONTHS[m - 1]} {d}, {y}" for m, d, y in zip(months, days, years)]
    genders = np.where(people.first < pools.male_first_names, "male", "female").tolist()
    columns = zip(people.index.tolist(), pick(pools.first_names, people.first),
                  pick(pools.middle_names, people.middle), pick(pools.last_names, people.last),
                  genders, months, days, years, dates, pick(pools.cities, people.city),
                  pick(pools.universities, people.university), pick(pools.majors, people.major),
                  pick(pools.employers, people.company), pick(pools.company_cities, people.company))
    return [
        {"id": index, "first": first, "middle": middle, "last": last, "gender": gender,
         "birth_month": month, "birth_day": day, "birth_year": year, "birth_date": date,
         "birth_city": city, "university": university, "major": major, "employer": employer,
         "company_city": company_city}
        for (index, first, middle, last, gender, month, day, year, date, city, university, major,
             employer, company_city) in columns
    ]


def full_name(person: dict) -> str:
    return f"{person['first']} {person['middle']} {person['last']}"
