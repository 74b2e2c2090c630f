"""Knowledge manipulation (Part 3.2): yes/no questions that need a stored fact and one step on
it. Classification asks about one person's birth date ("Was X born in an even month?"),
comparison about two people of the same split ("Was X born in an earlier year than Y?").

Each question comes in two forms. `plain` answers at once ("Answer: yes."); `cot` (chain of
thought) first states the retrieved facts ("Answer step by step: October, so no."). The paper
trains manipulation on half the people and tests on the other half: without chain of thought a
model stays near chance on the held-out half even when it can extract the facts, with it it
manipulates as well as it extracts.
"""

from collections.abc import Callable

import numpy as np

from corpus_gen.bios.people import MONTHS, full_name
from corpus_gen.bios.qa import ANSWER_CUE, qa_text
from corpus_gen.core.seeding import derive_key, randint

FORMS = {"plain": ANSWER_CUE, "cot": "\nAnswer step by step:"}  # form -> its answer cue
VERDICTS = ("yes", "no")


def _month(person: dict) -> str:
    return MONTHS[person["birth_month"] - 1]


# kind -> (question; the facts a chain of thought states; the verdict), of (person, other):
# `other` is the comparison partner, None for classification. Days are drawn in 1-28, years in
# 1900-2099, so each classification is a fair coin over people; a comparison ties (answer no)
# for 1 pair in 12 (months) or 200 (years).
QUESTIONS: dict[str, tuple[str, Callable[[dict, dict], str], Callable[[dict, dict], bool]]] = {
    "even_month": ("Was {name} born in an even month?",
                   lambda p, _: _month(p), lambda p, _: p["birth_month"] % 2 == 0),
    "even_year": ("Was {name} born in an even year?",
                  lambda p, _: str(p["birth_year"]), lambda p, _: p["birth_year"] % 2 == 0),
    "early_day": ("Was {name} born in the first half of a month?",
                  lambda p, _: f"day {p['birth_day']}", lambda p, _: p["birth_day"] <= 14),
    "earlier_month": ("Was {name} born in an earlier month than {other}?",
                      lambda p, o: f"{_month(p)} and {_month(o)}",
                      lambda p, o: p["birth_month"] < o["birth_month"]),
    "earlier_year": ("Was {name} born in an earlier year than {other}?",
                     lambda p, o: f"{p['birth_year']} and {o['birth_year']}",
                     lambda p, o: p["birth_year"] < o["birth_year"]),
}


def partners(seed: int, index: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Each person's comparison partner: another person of [start, stop), drawn by key."""
    index = np.asarray(index, dtype=np.int64)
    n = stop - start
    step = 1 + randint(derive_key(seed, "bios", "partner"), index, max(1, n - 1))
    return start + (index - start + step) % max(1, n)


def manipulation_questions(person: dict, partner: dict | None, form: str
                           ) -> list[tuple[str, str, str, str]]:
    """(kind, prompt, reasoning, verdict) per question; comparisons only with a partner."""
    result = []
    for kind, (question, reasoning, verdict) in QUESTIONS.items():
        if "{other}" in question and partner is None:
            continue
        other = full_name(partner) if partner is not None else ""
        prompt = question.format(name=full_name(person), other=other) + FORMS[form]
        result.append((kind, prompt, reasoning(person, partner),
                       VERDICTS[0] if verdict(person, partner) else VERDICTS[1]))
    return result


def answer_text(form: str, reasoning: str, verdict: str) -> str:
    """What follows the prompt's cue (before the period): `yes`, or `October, so yes`."""
    return verdict if form == "plain" else f"{reasoning}, so {verdict}"


def verdict_lead(prompt: str, form: str, reasoning: str) -> str:
    """The text the verdict follows in a document: the prompt, or the prompt and its reasoning
    ("...step by step: October, so"); the verdict comes after one space."""
    return prompt if form == "plain" else f"{prompt} {reasoning}, so"


def manipulation_rows(person: dict, partner: dict | None, split: str) -> list[dict]:
    """Eval rows of both forms: the prompt, the reasoning a `cot` answer states, the verdict."""
    return [{"person": person["id"], "split": split, "question": kind, "form": form,
             "prompt": prompt, "reasoning": reasoning, "verdict": verdict}
            for form in FORMS
            for kind, prompt, reasoning, verdict in manipulation_questions(person, partner, form)]


def manipulation_document(person: dict, partner: dict | None, form: str,
                          answer_only_loss: bool) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A training document: every question in one form with its answer, in QUESTIONS order,
    and the prompt spans to drop from the loss if asked (as `qa.qa_document`)."""
    return qa_text([(prompt, answer_text(form, reasoning, verdict))
                    for _, prompt, reasoning, verdict
                    in manipulation_questions(person, partner, form)], answer_only_loss)
