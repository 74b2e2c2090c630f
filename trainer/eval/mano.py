"""Mano (Part 4.1, knowledge manipulation without chain of thought): does the model give the
value of a modular arithmetic expression at once?

Each row of `eval/mano_test.jsonl` (a mano corpus) is `<bos> len<l> <prefix expression> =` of l
operators over Z_23; the answer is one number token, the expression's value. Greedy generation
(batched, KV cache) gives the answer's tokens (one), right iff they are the answer. Results:

- `accuracy` and `n` over every row, `per_ops` {l: {accuracy, n}};
- `accuracy_at_max`: over the rows of the largest l in the set (L, the paper's test length);
- `length`: the largest l such that every l' <= l reaches `threshold` accuracy (0 when l = 1
  fails), and `max_ops` (L);
- `numbers`: the number tokens of the vocabulary (chance is 1 / numbers);
- `failures` by reason: `wrong_value`, `not_a_number` (the model gave another token) and
  `prompt_too_long` (learned positions: the prompt fills them).

Every generation, with its verdict, also goes to `<run>/eval/mano_generations.jsonl`.
"""

from dataclasses import dataclass
from pathlib import Path

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

TEST_SET = "mano_test"
GENERATIONS = "mano_generations.jsonl"
_FIELDS = {"ops": int, "expression": str, "value": int}


@dataclass
class ManoOptions(LevelOptions):
    """The experiment's `eval.mano` group."""


def verdict(generated: list[str] | None, answer: list[str]) -> str | None:
    """Why generated token names (None: no room to generate) are not the answer's:
    `prompt_too_long`, `not_a_number` or `wrong_value`; None when they are."""
    if generated is None:
        return "prompt_too_long"
    if generated == answer:
        return None
    return "wrong_value" if all(name.isdigit() for name in generated) else "not_a_number"


def run(context: EvalContext, options: ManoOptions) -> dict:
    rows = load_rows(context, TEST_SET, _FIELDS, options.max_rows, lambda row: row["ops"])
    generated = [None if out.ids is None else names(context, out.ids) for out in
                 generate_answers(context, rows, [len(row["answer"]) for row in rows],
                                  options.batch_size, eos=False)]
    reasons = [verdict(text, names(context, row["answer"])) for row, text in zip(rows, generated)]
    write_generations(context, GENERATIONS, rows, reasons,
                      [None if text is None else " ".join(text) for text in generated], ("ops",))
    results = scored(rows, reasons, "ops")
    longest = max((row["ops"] for row in rows), default=0)
    vocabulary = names(context, list(range(context.tokenizer.vocab_size)))
    return {**results,
            "accuracy_at_max": results["per_ops"].get(str(longest), {}).get("accuracy"),
            "length": largest_solved(results["per_ops"], options.threshold), "max_ops": longest,
            "numbers": sum(name.isdigit() for name in vocabulary)}


def plot(results: dict, path: Path) -> None:
    """Accuracy against the number of operators, with chance (1 / the number tokens) and the
    length solved."""
    numbers = results.get("numbers") or 0
    plot_per_level(results, "ops", path, "l (operators)", "Mano: answer accuracy by length",
                   1 / numbers if numbers else None, "length")


register(Task("mano", ManoOptions, run, plot))
