"""Question answering over the six attributes: one fixed question form per attribute."""

from corpus_gen.bios.people import ATTRIBUTES, full_name

QUESTIONS = {
    "birth_date": "What is the birth date of {name}?",
    "birth_city": "What is the birth city of {name}?",
    "university": "Which university did {name} study?",
    "major": "What major did {name} study?",
    "employer": "Which company did {name} work for?",
    "company_city": "Where did {name} work?",
}
ANSWER_CUE = "\nAnswer:"


def answered(prompt: str, answer: str) -> str:
    """A prompt (question + ANSWER_CUE) with its answer, as training documents write it: the
    evaluation expects the model to continue the prompt this way."""
    return f"{prompt} {answer}."


def qa_pairs(person: dict) -> list[tuple[str, str, str]]:
    """(attribute, question, answer) for each attribute; the prompt is question + ANSWER_CUE."""
    name = full_name(person)
    return [(a, QUESTIONS[a].format(name=name), person[a]) for a in ATTRIBUTES]


def qa_document(person: dict, order: tuple[int, ...], answer_only_loss: bool
                ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """All six QA pairs in `order`, and the prompt spans to drop from the loss if asked."""
    pairs = qa_pairs(person)
    return qa_text([(pairs[i][1] + ANSWER_CUE, pairs[i][2]) for i in order], answer_only_loss)


def qa_text(prompts_and_answers: list[tuple[str, str]], answer_only_loss: bool
            ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """QA pairs written one after the other (`answered`), and with `answer_only_loss` the
    prompts' character spans, which the loss mask drops."""
    parts, masked, position = [], [], 0
    for prompt, answer in prompts_and_answers:
        if answer_only_loss:
            masked.append((position, position + len(prompt)))
        text = answered(prompt, answer)
        parts.append(text)
        position += len(text) + 1
    return " ".join(parts), tuple(masked)


def eval_rows(person: dict, split: str) -> list[dict]:
    name = full_name(person)
    return [
        {"person": person["id"], "name": name, "split": split, "attribute": a,
         "question": question, "prompt": question + ANSWER_CUE, "answer": answer}
        for a, question, answer in qa_pairs(person)
    ]
