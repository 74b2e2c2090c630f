"""Inverse search (Part 3.2): the person's name, given some of their attributes. Trained on
forward facts only, a model answers these near 0%: the reversal curse.

Five levels, from the birth date alone to all six attributes; the answer is the full name, as a
QA document writes an answer (`qa.answered`), so a first-name match is a prefix of it.
"""

from corpus_gen.bios.people import ATTRIBUTES, full_name
from corpus_gen.bios.qa import ANSWER_CUE, qa_text

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


def inverse_question(person: dict, level: int) -> str:
    """"Who was born on October 2, 1996 and was born in Princeton, NJ?" (+ the answer cue)."""
    clauses = [CLAUSES[a].format(person[a]) for a in LEVELS[level]]
    said = clauses[0] if len(clauses) == 1 else f"{', '.join(clauses[:-1])} and {clauses[-1]}"
    return f"Who {said}?{ANSWER_CUE}"


def inverse_rows(person: dict, split: str) -> list[dict]:
    """One eval row per level: the prompt, and the full name (and first name) it asks for."""
    return [{"person": person["id"], "split": split, "level": level,
             "prompt": inverse_question(person, level), "answer": full_name(person),
             "first_name": person["first"]}
            for level in LEVELS]


def inverse_document(person: dict, answer_only_loss: bool
                     ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A training document of the five inverse questions with their answer, in level order,
    and the question spans to drop from the loss if asked (as `qa.qa_document`)."""
    name = full_name(person)
    return qa_text([(inverse_question(person, level), name) for level in LEVELS],
                   answer_only_loss)
