"""Value pools for people and attributes, read from the packaged tables or a user's `data_dir`."""

from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import orjson

from corpus_gen.core.errors import CorpusError

PACKAGED = Path(__file__).parent / "data"
FILES = ("first_name_male", "first_name_female", "middle_name", "last_name", "city",
         "university", "field", "company")


@dataclass(frozen=True)
class Pools:
    first_names: tuple[str, ...]  # male names first, then female
    male_first_names: int
    middle_names: tuple[str, ...]
    last_names: tuple[str, ...]
    cities: tuple[str, ...]
    universities: tuple[str, ...]
    majors: tuple[str, ...]
    employers: tuple[str, ...]
    company_cities: tuple[str, ...]  # headquarters of employers[i]

    @property
    def name_space(self) -> int:
        return len(self.first_names) * len(self.middle_names) * len(self.last_names)

    @cached_property
    def arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each pool by field name as two object arrays, for picking many values at once: the
        values, and the same values as JSON strings (quotes and escapes as orjson writes)."""
        return {name: (np.array(values, dtype=object),
                       np.array([orjson.dumps(v).decode() for v in values], dtype=object))
                for name, values in vars(self).items() if isinstance(values, tuple)}


def _read_pool(path: Path, unique: bool) -> tuple[str, ...]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CorpusError(f"{path}: data file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read data file: {exc}") from None
    values = tuple(line.strip() for line in lines if line.strip())
    if not values:
        raise CorpusError(f"{path}: data file is empty")
    for value in values:
        if "  " in value or any(ord(c) < 32 for c in value) or "{" in value or "}" in value:
            raise CorpusError(f"{path}: value {value!r} has a control character, a brace or "
                              "a double space")
    if unique and len(set(values)) != len(values):
        duplicate = next(v for v in values if values.count(v) > 1)
        raise CorpusError(f"{path}: value {duplicate!r} appears twice; names must be unique")
    return values


@lru_cache(maxsize=4)
def load_pools(data_dir: str | None = None) -> Pools:
    root = Path(data_dir) if data_dir else PACKAGED
    raw = {name: _read_pool(root / f"{name}.txt", unique=True) for name in FILES}
    employers, company_cities = [], []
    for line in raw["company"]:
        name, sep, city = (part.strip() for part in line.partition(";"))
        if not sep or not name or not city:
            raise CorpusError(f"{root / 'company.txt'}: line {line!r} is not 'Company; City, ST'")
        employers.append(name)
        company_cities.append(city)
    return Pools(
        first_names=raw["first_name_male"] + raw["first_name_female"],
        male_first_names=len(raw["first_name_male"]),
        middle_names=raw["middle_name"],
        last_names=raw["last_name"],
        cities=raw["city"],
        universities=raw["university"],
        majors=raw["field"],
        employers=tuple(employers),
        company_cities=tuple(company_cities),
    )
