"""Reversal curse / inverse search (Part 3.2): forward QA beside inverse search on the same
people. Forward: "What is the birth date of X?" (the `qa` sets). Inverse: "Who was born on
October 2, 1996 ...?" at five levels (the `inverse` sets of a bios corpus generated with
`inverse=true`), scored by the generated name: the first name, and the whole full name.
A model pretrained on biographies answers forward questions and, even with inverse QA of
other people trained, inverse ones near 0% (the paper: ~0%).

The corpus asks an inverse question only where it has one right answer (see
`corpus_gen.bios.inverse`); per level, `dropped` counts the evaluated people whose question was
not asked because it fits someone else too.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass

from corpus_gen.bios.inverse import LEVELS
from corpus_gen.bios.qa import answered
from trainer.eval.qa import QAOptions, answers, read_rows, score_split
from trainer.eval.registry import EvalContext, Task, register

_NEEDS = "the reversal task needs a bios corpus generated with inverse=true"
INVERSE_FIELDS = {"level": int, "prompt": str, "answer": str, "first_name": str}


@dataclass
class ReversalOptions(QAOptions):
    """The experiment's `eval.reversal` group: qa's options (people, batch size, splits)."""


def score_inverse(context: EvalContext, rows: list[dict], batch_size: int) -> dict:
    """Inverse accuracy per level and overall: `full_name` (the whole name, then the period)
    and `first_name` (the generation starts with it)."""
    tokenizer = context.tokenizer
    pairs, too_long = answers(context, rows, batch_size)
    full, first = defaultdict(list), defaultdict(list)
    for row, (want, got) in zip(rows, pairs):
        prompt = tokenizer.encode(row["prompt"])
        # words tokenize on their own, so the first name's tokens begin the full answer's
        first_tokens = len(tokenizer.encode(answered(row["prompt"], row["first_name"])[:-1])) \
            - len(prompt)
        full[row["level"]].append(got[: len(want)] == want)
        first[row["level"]].append(got[:first_tokens] == want[:first_tokens])
    per_level = {str(level): {"full_name": _rate(full[level]), "first_name": _rate(first[level]),
                              "n": len(full[level])} for level in LEVELS}
    every_full = [x for values in full.values() for x in values]
    every_first = [x for values in first.values() for x in values]
    return {"full_name": _rate(every_full), "first_name": _rate(every_first),
            "n": len(every_full), "too_long": too_long, "per_level": per_level}


def _rate(values: list[bool]) -> float | None:
    """The share of right answers; None (no data) where nothing was asked."""
    return sum(values) / len(values) if values else None


def dropped_per_level(people: set[int], rows: list[dict]) -> dict[str, int]:
    """Per level, how many of `people` have no question in `rows`: theirs fits someone else
    too, so the corpus did not ask it."""
    asked = Counter(row["level"] for row in rows if row["person"] in people)
    return {str(level): len(people) - asked[level] for level in LEVELS}


def run(context: EvalContext, options: ReversalOptions) -> dict:
    results = {}
    for split in options.splits:
        forward_rows = read_rows(context.corpus_dir, f"qa_{split}", options.max_people, _NEEDS)
        people = {row["person"] for row in forward_rows}
        # the first max_people people with an inverse question hold every asked question of
        # the forward set's people: keep theirs
        inverse_rows = [row for row in read_rows(context.corpus_dir, f"inverse_{split}",
                                                 options.max_people, _NEEDS, INVERSE_FIELDS)
                        if row["person"] in people]
        forward = score_split(context, forward_rows, options.batch_size)
        inverse = score_inverse(context, inverse_rows, options.batch_size)
        dropped = dropped_per_level(people, inverse_rows)
        results[split] = {"forward_exact": forward["exact"], "forward_n": forward["n"],
                          "inverse_full_name": inverse["full_name"],
                          "inverse_first_name": inverse["first_name"],
                          "inverse_n": inverse["n"], "inverse_dropped": sum(dropped.values()),
                          "per_level": {level: {**scores, "dropped": dropped[level]}
                                        for level, scores in inverse["per_level"].items()}}
    return results


register(Task("reversal", ReversalOptions, run))
