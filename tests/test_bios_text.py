"""Tests for the bioS sentence templates and the bioR biography grammar."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from corpus_gen.bios.bio_r import DATE_FORMATS, format_date, nickname, render_bio_r
from corpus_gen.bios.templates import (
    BIRTH_CITY,
    BIRTH_DATE,
    COMPANY_CITY,
    EMPLOYER,
    MAJOR,
    TEMPLATES,
    UNIVERSITY,
    render_template,
)

SUBJECT_SLOTS = ("{Subj}", "{subj}", "{Poss}", "{poss}", "{obj}")
ALLOWED_KEYS = {"Subj", "subj", "Poss", "poss", "obj", "value"}
ATTRIBUTES = ("birth_date", "birth_city", "university", "major", "employer", "company_city")
SAMPLE_VALUES = {
    "birth_date": "October 2, 1996",
    "birth_city": "Princeton, NJ",
    "university": "Massachusetts Institute of Technology",
    "major": "Computer Science",
    "employer": "Goldman Sachs",
    "company_city": "New York, NY",
}
ALL_TEMPLATES = [(attr, t) for attr, group in TEMPLATES.items() for t in group]


# ------------------------------------------------------------------------------------------
# bioS templates
# ------------------------------------------------------------------------------------------
def test_template_groups_exported_in_order() -> None:
    assert tuple(TEMPLATES) == ATTRIBUTES
    assert TEMPLATES["birth_date"] is BIRTH_DATE
    assert TEMPLATES["birth_city"] is BIRTH_CITY
    assert TEMPLATES["university"] is UNIVERSITY
    assert TEMPLATES["major"] is MAJOR
    assert TEMPLATES["employer"] is EMPLOYER
    assert TEMPLATES["company_city"] is COMPANY_CITY


@pytest.mark.parametrize("attr", ATTRIBUTES)
def test_each_group_has_45_unique_templates(attr: str) -> None:
    group = TEMPLATES[attr]
    assert isinstance(group, tuple)
    assert len(group) >= 45
    assert len(set(group)) == len(group)
    # Variety beyond synonym swaps: many distinct opening words and sentence shapes.
    assert len({t.split()[0] for t in group}) >= 6
    assert sum(not t.startswith(("{Subj}", "{Poss}")) for t in group) >= 8


@pytest.mark.parametrize(("attr", "template"), ALL_TEMPLATES)
def test_template_format_rules(attr: str, template: str) -> None:
    keys = re.findall(r"\{([^{}]*)\}", template)
    assert set(keys) <= ALLOWED_KEYS, keys
    stripped = re.sub(r"\{[^{}]*\}", "", template)
    assert "{" not in stripped and "}" not in stripped
    assert keys.count("value") == 1
    assert sum(template.count(slot) for slot in SUBJECT_SLOTS) == 1
    # One sentence, clean whitespace, ASCII.
    assert template == template.strip()
    assert "  " not in template and "\n" not in template and "\t" not in template
    assert template.isascii()
    assert template.endswith(".")
    assert not re.search(r"[.!?]", template[:-1])
    # Sentence-initial slots only at the start; mid-sentence slots never at the start.
    assert template[0].isupper() or template.startswith(("{Subj}", "{Poss}"))
    for slot in ("{Subj}", "{Poss}"):
        assert template.find(slot) in (-1, 0)
    for slot in ("{subj}", "{poss}", "{obj}", "{value}"):
        assert not template.startswith(slot)
    # {value} is a whitespace-delimited unit: space before; space, comma or final period after.
    idx = template.index("{value}")
    assert template[idx - 1] == " "
    after = template[idx + len("{value}")]
    assert after in " ,."
    if after == ".":
        assert idx + len("{value}") + 1 == len(template)


@pytest.mark.parametrize(("attr", "template"), ALL_TEMPLATES)
def test_render_template_matches_format(attr: str, template: str) -> None:
    value = SAMPLE_VALUES[attr]
    name = "Anya Briar Forger"
    forms = {
        ("male", False): {"Subj": "He", "subj": "he", "Poss": "His", "poss": "his", "obj": "him"},
        ("female", False): {
            "Subj": "She", "subj": "she", "Poss": "Her", "poss": "her", "obj": "her",
        },
        ("female", True): {
            "Subj": name, "subj": name, "Poss": f"{name}'s", "poss": f"{name}'s", "obj": name,
        },
    }  # fmt: skip
    for (gender, use_name), slots in forms.items():
        expected = template.format(value=value, **slots)
        got = render_template(template, name=name, gender=gender, use_name=use_name, value=value)
        assert got == expected
        assert got.count(value) == 1
        assert got[0].isupper()
        assert "  " not in got


def test_render_template_exact_strings() -> None:
    name = "Anya Briar Forger"
    date = "October 2, 1996"

    def fill(template: str, gender: str, use_name: bool, value: str) -> str:
        return render_template(template, name=name, gender=gender, use_name=use_name, value=value)

    t = "{Subj} was born on {value}."
    assert t in BIRTH_DATE
    assert fill(t, "female", False, date) == "She was born on October 2, 1996."
    assert fill(t, "male", False, date) == "He was born on October 2, 1996."
    assert fill(t, "female", True, date) == "Anya Briar Forger was born on October 2, 1996."

    t = "On {value}, {subj} was born."
    assert t in BIRTH_DATE
    assert fill(t, "male", False, date) == "On October 2, 1996, he was born."
    assert fill(t, "male", True, date) == "On October 2, 1996, Anya Briar Forger was born."

    t = "{Poss} alma mater is {value}."
    uni = "Massachusetts Institute of Technology"
    assert t in UNIVERSITY
    assert fill(t, "male", False, uni) == f"His alma mater is {uni}."
    assert fill(t, "female", False, uni) == f"Her alma mater is {uni}."
    assert fill(t, "female", True, uni) == f"Anya Briar Forger's alma mater is {uni}."

    t = "At university, {poss} major was {value}."
    assert t in MAJOR
    assert fill(t, "male", False, "Computer Science") == (
        "At university, his major was Computer Science."
    )
    assert fill(t, "male", True, "Computer Science") == (
        "At university, Anya Briar Forger's major was Computer Science."
    )

    t = "The company that employed {obj} was {value}."
    assert t in EMPLOYER
    assert fill(t, "male", False, "Goldman Sachs") == (
        "The company that employed him was Goldman Sachs."
    )
    assert fill(t, "female", False, "Goldman Sachs") == (
        "The company that employed her was Goldman Sachs."
    )

    t = COMPANY_CITY[0]
    assert t == "{Subj} worked in {value}."
    assert fill(t, "female", False, "New York, NY") == "She worked in New York, NY."


def test_render_template_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        render_template(BIRTH_DATE[0], name="A B C", gender="other", use_name=False, value="x")
    with pytest.raises(ValueError):
        render_template("{Subj} was born on {date}.", name="A", gender="male", use_name=True,
                        value="x")  # fmt: skip
    with pytest.raises(ValueError):
        render_template("{Subj} and {obj} met on {value}.", name="A", gender="male",
                        use_name=True, value="x")  # fmt: skip


# ------------------------------------------------------------------------------------------
# Dates and nicknames
# ------------------------------------------------------------------------------------------
def test_format_date_styles() -> None:
    got = [format_date(10, 2, 1996, s) for s in range(len(DATE_FORMATS))]
    assert got == [
        "October 2, 1996",
        "2 October 1996",
        "October 2nd, 1996",
        "the 2nd of October, 1996",
        "10/2/1996",
    ]
    ordinals = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th",
                21: "21st", 22: "22nd", 23: "23rd", 28: "28th"}  # fmt: skip
    for day, ordinal in ordinals.items():
        assert format_date(1, day, 2000, 2) == f"January {ordinal}, 2000"
    with pytest.raises(ValueError):
        format_date(1, 1, 2000, len(DATE_FORMATS))


def test_nickname_derivation() -> None:
    assert nickname("Robert", "male") == "Bob"
    assert nickname("Jonathan", "male") == "Jonny"
    assert nickname("Madeline", "female") == "Maddie"
    assert nickname("Christopher", "male") == "Chris"
    assert nickname("Anya", "female") is None
    assert nickname("Jonathan", "male") == nickname("Jonathan", "male")


# ------------------------------------------------------------------------------------------
# bioR
# ------------------------------------------------------------------------------------------
FIRST = {
    "male": ("Jonathan", "Robert", "Christopher", "Daniel", "Omar", "Felix", "Kenji", "Lucas"),
    "female": ("Madeline", "Olivia", "Anya", "Priya", "Beatrice", "Helena", "Rosa", "Keiko"),
}
MIDDLE = ("Briar", "Lee", "Quinn", "Rae", "Jude", "Wren", "Ellis")
LAST = ("Forger", "Okafor", "Lindqvist", "Marchetti", "Castellanos", "Whitfield", "Abernathy")
BIRTH_CITIES = ("Princeton, NJ", "Austin, TX", "Boise, ID", "Savannah, GA", "Tucson, AZ")
UNIVERSITIES = (
    "Massachusetts Institute of Technology", "Stanford University", "University of Michigan",
    "Rice University", "Duke University",
)  # fmt: skip
MAJORS = ("Computer Science", "Economics", "Art History", "Mechanical Engineering", "Biology")
EMPLOYERS = ("Goldman Sachs", "Acme Robotics", "Northwind Traders", "Blue Harbor Bank", "Intel")
COMPANY_CITIES = ("New York, NY", "Seattle, WA", "Denver, CO", "Chicago, IL", "Portland, OR")
N_BIOS = 2000


def _people(n: int, seed: int = 1234) -> list[dict[str, object]]:
    rng = random.Random(seed)
    people: list[dict[str, object]] = []
    for _ in range(n):
        gender = rng.choice(("male", "female"))
        people.append({
            "first": rng.choice(FIRST[gender]),
            "middle": rng.choice(MIDDLE),
            "last": rng.choice(LAST),
            "gender": gender,
            "birth_month": rng.randint(1, 12),
            "birth_day": rng.randint(1, 28),
            "birth_year": rng.randint(1900, 2099),
            "birth_city": rng.choice(BIRTH_CITIES),
            "university": rng.choice(UNIVERSITIES),
            "major": rng.choice(MAJORS),
            "employer": rng.choice(EMPLOYERS),
            "company_city": rng.choice(COMPANY_CITIES),
        })  # fmt: skip
    return people


@pytest.fixture(scope="module")
def bios() -> list[tuple[dict[str, object], str]]:
    return [(person, render_bio_r(person, random.Random(i))) for i, person in
            enumerate(_people(N_BIOS))]  # fmt: skip


def _date_hit(person: dict[str, object], text: str) -> tuple[int, int] | None:
    """(position, style) of the birth date in any DATE_FORMATS style, or None."""
    month, day, year = person["birth_month"], person["birth_day"], person["birth_year"]
    for style in range(len(DATE_FORMATS)):
        date = format_date(month, day, year, style)  # type: ignore[arg-type]
        if date in text:
            return text.index(date), style
    return None


def test_bio_r_states_every_attribute(bios: list[tuple[dict[str, object], str]]) -> None:
    for person, text in bios:
        assert _date_hit(person, text) is not None, text
        for key in ("birth_city", "university", "major", "employer", "company_city"):
            assert str(person[key]) in text, (key, text)


def test_bio_r_never_names_other_places_or_companies(
    bios: list[tuple[dict[str, object], str]],
) -> None:
    for person, text in bios:
        own = {person["birth_city"], person["company_city"], person["university"],
               person["employer"]}  # fmt: skip
        for other in (*BIRTH_CITIES, *COMPANY_CITIES, *UNIVERSITIES, *EMPLOYERS):
            if other not in own:
                assert other not in text, (other, text)


def test_bio_r_shape_and_formatting(bios: list[tuple[dict[str, object], str]]) -> None:
    for _, text in bios:
        n_words = len(text.split())
        assert 50 <= n_words <= 200, (n_words, text)
        assert text == text.strip()
        assert "  " not in text and "\n" not in text and "\t" not in text
        assert text.isascii()
        assert text[-1] in ".!?"
        assert text[0].isupper()
        assert " ." not in text and " ," not in text and ".." not in text


def test_bio_r_full_name_is_first_mention(bios: list[tuple[dict[str, object], str]]) -> None:
    for person, text in bios:
        full = f"{person['first']} {person['middle']} {person['last']}"
        assert full in text
        assert text.find(str(person["first"])) == text.find(full), text
        nick = nickname(str(person["first"]), str(person["gender"]))
        if nick is not None:
            hit = re.search(rf"\b{re.escape(nick)}\b", text)
            if hit is not None:
                assert hit.start() > text.find(full)


def test_bio_r_mentions_vary(bios: list[tuple[dict[str, object], str]]) -> None:
    counts: Counter[str] = Counter()
    for person, text in bios:
        title = "Mr." if person["gender"] == "male" else "Ms."
        rest = text[text.find(f"{person['first']} {person['middle']} {person['last']}") + 1 :]
        counts["title"] += f"{title} {person['last']}" in rest
        first_only = rf"\b{person['first']}\b(?! {person['middle']})"
        counts["first"] += re.search(first_only, rest) is not None
        counts["pronoun"] += re.search(r"\b(he|she|He|She)\b", rest) is not None
        nick = nickname(str(person["first"]), str(person["gender"]))
        counts["nick"] += nick is not None and re.search(rf"\b{nick}\b", rest) is not None
    for kind in ("title", "first", "pronoun", "nick"):
        assert counts[kind] > N_BIOS // 20, counts


def test_bio_r_deterministic() -> None:
    people = _people(200, seed=99)
    first = [render_bio_r(p, random.Random(i)) for i, p in enumerate(people)]
    again = [render_bio_r(p, random.Random(i)) for i, p in enumerate(people)]
    assert first == again
    other = [render_bio_r(p, random.Random(i + 10_000)) for i, p in enumerate(people)]
    assert sum(a != b for a, b in zip(first, other, strict=True)) > 190


def test_bio_r_variety(bios: list[tuple[dict[str, object], str]]) -> None:
    texts = [text for _, text in bios]
    assert len(set(texts)) > 1900
    # Openings vary too (first three words).
    assert len({" ".join(t.split()[:3]) for t in texts}) > 300

    first_attr: Counter[str] = Counter()
    date_styles: Counter[int] = Counter()
    for person, text in bios:
        hit = _date_hit(person, text)
        assert hit is not None
        positions = {"birth_date": hit[0]}
        for key in ("birth_city", "university", "major", "employer", "company_city"):
            positions[key] = text.index(str(person[key]))
        first_attr[min(positions, key=positions.__getitem__)] += 1
        date_styles[hit[1]] += 1
    assert set(first_attr) == set(ATTRIBUTES), first_attr
    assert min(first_attr.values()) >= 20, first_attr
    assert max(first_attr.values()) <= 0.6 * N_BIOS, first_attr
    assert len(date_styles) == len(DATE_FORMATS), date_styles


def test_bio_r_rejects_unknown_gender() -> None:
    person = _people(1)[0]
    person["gender"] = "unknown"
    with pytest.raises(ValueError):
        render_bio_r(person, random.Random(0))
