"""Brevo (Part 4.1, reasoning breadth): does the model list every ancestor of a query node of a
DAG, in a topological order?

Each row of `eval/brevo_test.jsonl` (a brevo corpus) is a DAG's edges `parent child` (words) and
the query `? q =>`. Greedy generation (batched, KV cache) continues the prompt until EOS or the
token budget (`max_new_tokens`; 0: 2 * the answer's tokens + 8, per row). The words generated
are a valid answer iff they are distinct, their set is the query's ancestors (computed from the
row's `edges`) plus the query, and each comes after all its parents: any topological order is
accepted, not only the row's `answer`. Results:

- `accuracy` and `n` over every row, `per_n` {graph size: {accuracy, n}} and `per_depth`
  {the query's depth: {accuracy, n}} (n in these entries: rows);
- `failures` by the first reason found: `duplicate` (a word twice), `extra` (a word that is no
  ancestor nor the query, or an unfinished word before EOS), `order` (a word before one of its
  parents), `unfinished` (no EOS within the budget), `missing` (an ancestor or the query left
  out), `prompt_too_long` (learned positions: the prompt fills them).

Every generation, with its verdict, also goes to `<run>/eval/brevo_generations.jsonl`.
"""

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.config import require
from corpus_gen.core.words import readable, split_words
from trainer.eval.answers import (
    AnswerOptions,
    generate_answers,
    load_rows,
    names,
    plot_per_level,
    scored,
    write_generations,
)
from trainer.eval.registry import EvalContext, Task, register

TEST_SET = "brevo_test"
GENERATIONS = "brevo_generations.jsonl"
_FIELDS = {"n": int, "query": str, "depth": int, "edges": list}


@dataclass
class BrevoOptions(AnswerOptions):
    """The experiment's `eval.brevo` group."""

    max_new_tokens: int = 0  # tokens per answer; 0: 2 * the answer's tokens + 8, per row

    def validate(self) -> None:
        super().validate()
        require(self.max_new_tokens >= 0, "max_new_tokens", self.max_new_tokens,
                "must be >= 0 (0: from each row's answer)")


def parents_of(edges: list[list[str]]) -> dict[str, set[str]]:
    """Each node's parents, from (parent, child) pairs."""
    parents: dict[str, set[str]] = defaultdict(set)
    for parent, child in edges:
        parents[child].add(parent)
    return parents


def ancestry(parents: dict[str, set[str]], query: str) -> set[str]:
    """The query and every ancestor of it."""
    found, todo = {query}, [query]
    while todo:
        for parent in parents.get(todo.pop(), ()):
            if parent not in found:
                found.add(parent)
                todo.append(parent)
    return found


def verdict(edges: list[list[str]], query: str, words: list[str] | None,
            stopped: bool) -> str | None:
    """Why the generated `words` (readable; None: no room to generate; `stopped`: EOS came) are
    no valid answer for `query` (the first of the module docstring's reasons); None if valid."""
    if words is None:
        return "prompt_too_long"
    parents = parents_of(edges)
    wanted = ancestry(parents, query)
    if len(set(words)) < len(words):
        return "duplicate"
    if not set(words) <= wanted:
        return "extra"
    place = {word: i for i, word in enumerate(words)}
    if any(place.get(parent, -1) > i for i, word in enumerate(words) for parent in parents[word]):
        return "order"
    if not stopped:
        return "unfinished"
    return "missing" if len(words) < len(wanted) else None


def answer_words(tokens: list[str], stopped: bool) -> list[str]:
    """The readable words of a continuation's token names; what follows the last complete word is an
    unfinished word: one more (wrong) word when EOS ended it, cut by the budget otherwise."""
    words, rest = split_words(tokens)
    return [readable(word) for word in words] + ([readable(rest)] if rest and stopped else [])


def run(context: EvalContext, options: BrevoOptions) -> dict:
    rows = load_rows(context, TEST_SET, _FIELDS, options.max_rows)
    budgets = [options.max_new_tokens or 2 * len(row["answer"]) + 8 for row in rows]
    outputs = generate_answers(context, rows, budgets, options.batch_size)
    generated = [None if out.ids is None else answer_words(names(context, out.ids), out.stopped)
                 for out in outputs]
    reasons = [verdict(row["edges"], row["query"], words, out.stopped)
               for row, words, out in zip(rows, generated, outputs)]
    write_generations(context, GENERATIONS, rows, reasons, generated, ("n", "depth"))
    return {**scored(rows, reasons, "n"), "per_depth": scored(rows, reasons, "depth")["per_depth"]}


def plot(results: dict, path: Path) -> None:
    """Accuracy against the query's depth."""
    plot_per_level(results, "depth", path, "depth of the query (longest path from a root)",
                   "Brevo: valid answers by the query's depth")


register(Task("brevo", BrevoOptions, run, plot))
