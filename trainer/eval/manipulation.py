"""Knowledge manipulation (Part 3.2): yes/no questions on stored facts, with and without chain of
thought (the `manipulation` sets of a bios corpus generated with `manipulation=true`).

The verdict is a forced choice: whichever of " yes." and " no." the model finds likelier after
the context, so a model that knows nothing scores the 0.5 of a coin (the `majority` figure
gives the share of the commoner verdict, the best a constant answer does). In the `cot` form
the context is the prompt followed by the model's own greedy reasoning ("October, so"), as long
as the true one; `reasoning` is the share of rows whose reasoning is right token for token, and
`reasoned_accuracy` the verdicts' accuracy on those rows.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corpus_gen.bios.manipulation import FORMS, VERDICTS, verdict_lead
from corpus_gen.bios.qa import answered
from corpus_gen.core.config import require
from trainer.eval.qa import QAOptions, read_rows
from trainer.eval.registry import EvalContext, Task, register

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHANCE = 0.5  # a forced choice between two verdicts
_NEEDS = "the manipulation task needs a bios corpus generated with manipulation=true"
MANIPULATION_FIELDS = {"question": str, "form": str, "prompt": str, "reasoning": str,
                       "verdict": str}


@dataclass
class ManipulationOptions(QAOptions):
    """The experiment's `eval.manipulation` group: qa's options, and the forms to score."""

    forms: list[str] = field(default_factory=lambda: list(FORMS))

    def validate(self) -> None:
        super().validate()
        for form in self.forms:
            require(form in FORMS, "forms", form, f"unknown form; known: {', '.join(FORMS)}")


@dataclass
class _Prepared:
    """One row's tokens: the prompt, the true reasoning after it (cot; empty for plain), and
    each verdict's tokens after the true context."""

    prompt: list[int]
    reasoning: list[int]
    verdicts: list[list[int]]


def _prepare(context: EvalContext, row: dict) -> _Prepared:
    encode = context.tokenizer.encode
    prompt = encode(row["prompt"])
    lead = verdict_lead(row["prompt"], row["form"], row["reasoning"])
    reasoning = encode(lead)[len(prompt):]
    base = len(prompt) + len(reasoning)
    return _Prepared(prompt, reasoning, [encode(answered(lead, v))[base:] for v in VERDICTS])


def choices(context: EvalContext, rows: list[dict], batch_size: int
            ) -> list[tuple[str, bool | None]]:
    """Per row, the verdict the model chooses and, for `cot` rows, whether its own reasoning
    was the true one (None for `plain` rows)."""
    from trainer.eval.generation import continuation_logprobs, generate

    model = context.model
    out: list[tuple[str, bool | None]] = []
    for start in range(0, len(rows), batch_size):
        batch = [_prepare(context, row) for row in rows[start : start + batch_size]]
        thought = [[] for _ in batch]
        cot = [i for i, p in enumerate(batch) if p.reasoning]
        if cot:  # greedy rows are independent: one budget for all, then each cut to its length
            generated = generate(model, [batch[i].prompt for i in cot],
                                 max_new_tokens=max(len(batch[i].reasoning) for i in cot))
            for i, ids in zip(cot, generated):
                thought[i] = ids[: len(batch[i].reasoning)]
        contexts = [p.prompt + t for p, t in zip(batch, thought)]
        scores = [continuation_logprobs(model, contexts, [p.verdicts[v] for p in batch])
                  for v in range(len(VERDICTS))]
        for i, p in enumerate(batch):
            chosen = max(range(len(VERDICTS)), key=lambda v: scores[v][i])
            out.append((VERDICTS[chosen], thought[i] == p.reasoning if p.reasoning else None))
    return out


def score_rows(context: EvalContext, rows: list[dict], batch_size: int) -> dict:
    """Accuracy per form: overall and per question, each with its n and `majority`; `cot`
    forms also with `reasoning` accuracy."""
    picked = choices(context, rows, batch_size)
    right, verdicts, reasoned = defaultdict(list), defaultdict(list), defaultdict(list)
    for row, (verdict, reasoning) in zip(rows, picked):
        key = (row["form"], row["question"])
        right[key].append(verdict == row["verdict"])
        verdicts[key].append(row["verdict"])
        if reasoning is not None:
            reasoned[key].append(reasoning)
    result = {}
    for form in dict.fromkeys(row["form"] for row in rows):
        keys = [key for key in right if key[0] == form]
        result[form] = _summary([x for k in keys for x in right[k]],
                                [x for k in keys for x in verdicts[k]],
                                [x for k in keys for x in reasoned[k]])
        result[form]["per_question"] = {key[1]: _summary(right[key], verdicts[key],
                                                         reasoned[key]) for key in keys}
    return result


def _summary(right: list[bool], verdicts: list[str], reasoned: list[bool]) -> dict:
    """Accuracy, n and majority share; with reasoning (cot), its accuracy and the verdicts'
    accuracy where the reasoning was right (`reasoned_accuracy`: manipulation given retrieval;
    None when no reasoning was right)."""
    majority = max(verdicts.count(v) for v in VERDICTS) / max(1, len(verdicts))
    summary = {"accuracy": sum(right) / max(1, len(right)), "n": len(right),
               "majority": majority}
    if reasoned:
        summary["reasoning"] = sum(reasoned) / len(reasoned)
        given = [r for r, ok in zip(right, reasoned) if ok]
        summary["reasoned_accuracy"] = sum(given) / len(given) if given else None
    return summary


def run(context: EvalContext, options: ManipulationOptions) -> dict:
    results = {}
    for split in options.splits:
        rows = read_rows(context.corpus_dir, f"manipulation_{split}", options.max_people,
                         _NEEDS, MANIPULATION_FIELDS)
        results[split] = score_rows(context, [r for r in rows if r["form"] in options.forms],
                                    options.batch_size)
    results["chance"] = CHANCE
    return results


def figure(results: dict) -> "Figure":
    """Accuracy per question, one panel per split: each form's bars side by side, the 0.5
    chance line dashed, and each question's majority share as a tick on its bars."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    splits = [name for name, value in results.items() if isinstance(value, dict)]
    fig = Figure(figsize=(5.2 * max(1, len(splits)), 4.0))
    axes = fig.subplots(1, max(1, len(splits)), squeeze=False)[0]
    for ax, split in zip(axes, splits):
        forms = list(results[split])
        questions = list(dict.fromkeys(q for f in forms for q in results[split][f]["per_question"]))
        width = 0.8 / max(1, len(forms))
        for i, form in enumerate(forms):
            entry = results[split][form]
            xs = [q + (i + 0.5) * width - 0.4 for q in range(len(questions))]
            per = [entry["per_question"].get(q, {}) for q in questions]
            ax.bar(xs, [p.get("accuracy", 0.0) for p in per], width, color=f"C{i}",
                   label=f"{form} (n={entry['n']}): {entry['accuracy']:.1%}")
            ax.scatter(xs, [p.get("majority", 0.0) for p in per], marker="_", s=200,
                       color="black", zorder=3, label="majority share" if i == 0 else None)
        ax.axhline(CHANCE, color="gray", linestyle="--", linewidth=1.2, label="chance 50%")
        ax.set_xticks(range(len(questions)))
        ax.set_xticklabels([q.replace("_", " ") for q in questions], rotation=20, fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title(f"{split} people")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("verdict accuracy")
    run = f"{results['run']}, " if results.get("run") else ""
    fig.suptitle(f"Knowledge manipulation ({run}step {results.get('step', '?')})")
    fig.tight_layout()
    return fig


def plot(results: dict, path: Path) -> None:
    figure(results).savefig(path, dpi=120)


register(Task("manipulation", ManipulationOptions, run, plot))
