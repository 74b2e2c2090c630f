"""Depo (Part 4.1, reasoning depth): does the model answer a k-hop query on a hidden cycle?

Each row of `eval/depo_test.jsonl` (a depo corpus, n = N words on one cycle) is the context's
(word, successor) pairs and one query `hop<k> q =>`; the answer is the k-th successor of q.
Greedy generation (batched, KV cache) continues the prompt by up to `max_new_tokens` tokens; the
first complete word of the continuation (words end with an end letter, corpus_gen/core/words.py)
is the model's answer, right iff it is the answer word. Results:

- `accuracy` and `n` over every row, `per_k` {k: {accuracy, n}};
- `depth`: the largest tested k such that every tested k' <= k reaches `threshold` accuracy
  (the paper's reasoning depth; 0 when k = 1 fails);
- `words`: the rows' n (chance is 1/n: a word of the context drawn at random);
- `failures` by reason: `wrong_word`, `no_word` (no complete word within the budget) and
  `prompt_too_long` (learned positions: the prompt fills them).

Every generation, with its verdict, also goes to `<run>/eval/depo_generations.jsonl`.
"""

from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.config import require
from corpus_gen.core.words import split_words
from trainer.eval.answers import (
    LevelOptions,
    generate_answers,
    largest_solved,
    load_rows,
    names,
    plot_per_level,
    scored,
    write_generations,
)
from trainer.eval.registry import EvalContext, Task, register

TEST_SET = "depo_test"
GENERATIONS = "depo_generations.jsonl"
_FIELDS = {"n": int, "k": int, "query": str, "edges": list}


@dataclass
class DepoOptions(LevelOptions):
    """The experiment's `eval.depo` group."""

    max_new_tokens: int = 8  # tokens generated to find the answer word

    def validate(self) -> None:
        super().validate()
        require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "must be >= 1")


def verdict(generated: list[str] | None, answer: list[str]) -> str | None:
    """Why a continuation (token names; None: no room to generate) does not answer `answer` (a
    word's names): `prompt_too_long`, `no_word` or `wrong_word`; None when it does."""
    if generated is None:
        return "prompt_too_long"
    words, _ = split_words(generated)
    if not words:
        return "no_word"
    return None if list(words[0]) == answer else "wrong_word"


def run(context: EvalContext, options: DepoOptions) -> dict:
    rows = load_rows(context, TEST_SET, _FIELDS, options.max_rows, lambda row: row["k"])
    generated = [None if out.ids is None else names(context, out.ids) for out in
                 generate_answers(context, rows, [options.max_new_tokens] * len(rows),
                                  options.batch_size)]
    reasons = [verdict(text, names(context, row["answer"])) for row, text in zip(rows, generated)]
    write_generations(context, GENERATIONS, rows, reasons,
                      [None if text is None else " ".join(text) for text in generated], ("k",))
    results = scored(rows, reasons, "k")
    return {**results, "depth": largest_solved(results["per_k"], options.threshold),
            "words": min((row["n"] for row in rows), default=0)}


def plot(results: dict, path: Path) -> None:
    """Accuracy against k, with chance (1/n) and the depth solved."""
    words = results.get("words") or 0
    plot_per_level(results, "k", path, "k (hops)", f"Depo: accuracy by k at n = {words}",
                   1 / words if words else None, "depth", log2=True)


register(Task("depo", DepoOptions, run, plot))
