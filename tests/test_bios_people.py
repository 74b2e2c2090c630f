import numpy as np
import pytest

from corpus_gen.bios.people import draw_people, person_dicts
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.errors import CorpusError


def test_names_are_unique_without_a_global_set():
    pools = load_pools()
    people = draw_people(0, np.arange(200_000), pools)
    code = (people.first * len(pools.middle_names) + people.middle) * len(pools.last_names)
    code += people.last
    assert len(np.unique(code)) == 200_000


def test_a_person_is_a_pure_function_of_seed_and_index():
    pools = load_pools()
    batch = person_dicts(draw_people(7, np.arange(1000), pools), pools)
    alone = person_dicts(draw_people(7, np.array([998, 3]), pools), pools)
    assert alone == [batch[998], batch[3]]
    other_seed = person_dicts(draw_people(8, np.arange(1000), pools), pools)
    assert sum(a == b for a, b in zip(batch, other_seed)) == 0


def test_attributes_are_in_range_and_consistent():
    pools = load_pools()
    hq = dict(zip(pools.employers, pools.company_cities))
    rows = person_dicts(draw_people(0, np.arange(5000), pools), pools)
    for row in rows:
        assert 1 <= row["birth_month"] <= 12 and 1 <= row["birth_day"] <= 28
        assert 1900 <= row["birth_year"] <= 2099
        assert row["company_city"] == hq[row["employer"]]
        male = row["first"] in pools.first_names[: pools.male_first_names]
        assert row["gender"] == ("male" if male else "female")
    assert len({r["birth_city"] for r in rows}) == len(pools.cities)
    assert {r["gender"] for r in rows} == {"male", "female"}
    assert rows[0]["birth_date"].count(" ") == 2  # "October 2, 1996"


def test_missing_or_broken_data_files_are_named(tmp_path):
    with pytest.raises(CorpusError, match="first_name_male.txt: data file not found"):
        load_pools(str(tmp_path))
    for name in ("first_name_male", "first_name_female", "middle_name", "last_name", "city",
                 "university", "field"):
        (tmp_path / f"{name}.txt").write_text("A\nB\n")
    (tmp_path / "company.txt").write_text("Acme Springfield, IL\n")
    with pytest.raises(CorpusError, match="company.txt: line 'Acme Springfield, IL'"):
        load_pools(str(tmp_path))
    (tmp_path / "company.txt").write_text("Acme; Springfield, IL\n")
    (tmp_path / "last_name.txt").write_text("Smith\nSmith\n")
    with pytest.raises(CorpusError, match="last_name.txt: value 'Smith' appears twice"):
        load_pools(str(tmp_path))
