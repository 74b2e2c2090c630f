"""QA extraction (Part 3.1): can the model answer questions about people from its weights?

For each person and attribute of `eval/qa_<split>.jsonl`, greedy generation continues the prompt
("What is the birth date of X?\nAnswer:"); the expected continuation is the tokens of
" <answer>." as the training QA documents write it. Scored: exact match of the whole answer
and of its first token, per attribute and overall, each beside its chance: the accuracy of always
giving the commonest expected answer (or first token) of the attribute, the floor a model reaches
without knowing anyone ("▁University" begins most university answers). A split without rows
scores None (no data), not 0.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corpus_gen.bios.qa import answered
from corpus_gen.core.config import require
from trainer.eval.eval_sets import read_eval_set
from trainer.eval.registry import EvalContext, Task, register

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class QAOptions:
    """The experiment's `eval.qa` group."""

    max_people: int = 0  # people per split to evaluate (0: all)
    batch_size: int = 64
    splits: list[str] = field(default_factory=lambda: ["test", "train"])

    def validate(self) -> None:
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        require(self.max_people >= 0, "max_people", self.max_people, "must be >= 0 (0: all)")
        for split in self.splits:
            require(split in ("train", "test"), "splits", split, "must be train or test")


# what a row of a qa set holds (the other bios sets: `fields` of their tasks)
QA_FIELDS = {"attribute": str, "prompt": str, "answer": str}


def read_rows(corpus_dir: Path, name: str, max_people: int, needs: str,
              fields: dict[str, type] = QA_FIELDS) -> list[dict]:
    """The rows of eval set `name` (verified, each with `fields`) for its first `max_people`
    people (0: all); `needs` says what corpus has the set, for the error when it is missing."""
    rows, people = [], set()
    for row in read_eval_set(corpus_dir, name, {"person": int, **fields}, needs):
        if max_people and row["person"] not in people and len(people) >= max_people:
            break
        people.add(row["person"])
        rows.append(row)
    return rows


def answers(context: EvalContext, rows: list[dict], batch_size: int
            ) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Per row, the expected answer tokens (` <answer>.` after the prompt, as training documents
    write it) and the model's greedy continuation of the prompt, as long; and how many rows were
    too long to generate. A row whose answer cannot fit among the model's positions (learned
    absolute positions only) gets no continuation, so it scores wrong instead of stopping the
    whole evaluation. Rows are batched in order of answer then prompt length, so that a batch
    pads little and decodes no further than its answers need; results come in row order."""
    from trainer.eval.generation import generate

    tokenizer = context.tokenizer
    limit = context.model.positional.max_positions or float("inf")
    prompts = [tokenizer.encode(r["prompt"]) for r in rows]
    expected = [tokenizer.encode(answered(r["prompt"], r["answer"]))[len(p):]
                for r, p in zip(rows, prompts)]
    fits = [i for i, (p, w) in enumerate(zip(prompts, expected)) if len(p) + len(w) <= limit]
    fits.sort(key=lambda i: (len(expected[i]), len(prompts[i])))
    outputs: list[list[int]] = [[] for _ in rows]
    for start in range(0, len(fits), batch_size):
        for group in _generation_groups(fits[start : start + batch_size], prompts, expected,
                                        limit):
            generated = generate(context.model, [prompts[i] for i in group],
                                 max_new_tokens=max(len(expected[i]) for i in group))
            for i, ids in zip(group, generated):
                outputs[i] = ids
    return list(zip(expected, outputs)), len(rows) - len(fits)


def score_split(context: EvalContext, rows: list[dict], batch_size: int) -> dict:
    by_attribute: dict[str, list[tuple[list[int], list[int]]]] = defaultdict(list)
    pairs, too_long = answers(context, rows, batch_size)
    for row, pair in zip(rows, pairs):
        by_attribute[row["attribute"]].append(pair)
    per_attribute = {a: _scores(p) for a, p in by_attribute.items()}
    overall = _scores(pairs)
    for key in CHANCES:  # guessing each attribute's commonest answer, not the pooled commonest
        overall[key] = (sum(s[key] * s["n"] for s in per_attribute.values()) / overall["n"]
                        if overall["n"] else None)
    return {**overall, "too_long": too_long, "per_attribute": per_attribute}


CHANCES = ("exact_chance", "first_token_chance")


def _scores(pairs: list[tuple[list[int], list[int]]]) -> dict:
    """Exact and first-token accuracy of (expected, generated) pairs and their chance (the
    share of the commonest expected answer, first token); rates None where there are no pairs."""
    n = len(pairs)
    if not n:
        return {"exact": None, "first_token": None, **dict.fromkeys(CHANCES), "n": 0}
    return {"exact": sum(got[: len(want)] == want for want, got in pairs) / n,
            "first_token": sum(got[:1] == want[:1] for want, got in pairs) / n,
            "exact_chance": _commonest_share([tuple(want) for want, _ in pairs]),
            "first_token_chance": _commonest_share([tuple(want[:1]) for want, _ in pairs]),
            "n": n}


def _commonest_share(values: list[tuple]) -> float:
    """The accuracy of always giving the commonest of `values`."""
    return max(Counter(values).values()) / len(values)


def _generation_groups(rows: list[int], prompts: list[list[int]], expected: list[list[int]],
                       limit: float) -> list[list[int]]:
    """The rows generated together (one budget: the longest answer), and alone those that would
    then run past the positions' limit although their own answer fits."""
    if not rows:
        return []
    budget = max(len(expected[i]) for i in rows)
    together = [i for i in rows if len(prompts[i]) + budget <= limit]
    return ([together] if together else []) + [[i] for i in rows if i not in together]


def run(context: EvalContext, options: QAOptions) -> dict:
    return {split: score_split(context, read_rows(context.corpus_dir, f"qa_{split}",
                                                  options.max_people,
                                                  "the QA task needs a bios corpus"),
                               options.batch_size)
            for split in options.splits}


NAN = float("nan")  # a bar not drawn
# (result key, legend label, hatch): how the plot draws each metric
METRICS = (("exact", "exact match", None), ("first_token", "first token", "///"))


def figure(results: dict) -> "Figure":
    """Accuracy per attribute: for each split, exact match (solid bar) beside first-token
    accuracy (hatched, same colour), each bar's chance (the share of the attribute's commonest
    answer or first token: always guessing it scores that) a dashed tick across it, and "no data"
    where a split has no question of the attribute; the legend, below the axes, gives each
    split's n and means.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    splits = [name for name, value in results.items() if isinstance(value, dict)]
    attributes = list(dict.fromkeys(a for s in splits for a in results[s]["per_attribute"]))
    fig = Figure(figsize=(max(7.0, 1.3 * len(attributes)), 4.2))
    ax = fig.subplots()
    width = 0.8 / max(1, 2 * len(splits))
    handles = []
    for i, split in enumerate(splits):
        color = f"C{i}"
        for j, (metric, label, hatch) in enumerate(METRICS):
            offset = (2 * i + j + 0.5) * width - 0.4  # the group of bars centred on the tick
            scores = [results[split]["per_attribute"].get(a, {}) for a in attributes]
            xs = [x + offset for x in range(len(attributes))]
            values = [score.get(metric) for score in scores]
            ax.bar(xs, [NAN if v is None else v for v in values], width,
                   **_bar_style(color, hatch), label=f"{split} {label}")
            for x, value, score in zip(xs, values, scores):
                if value is None:
                    ax.text(x, 0.01, "no data", rotation=90, ha="center", va="bottom",
                            fontsize=7, color="gray")
                elif score.get(f"{metric}_chance") is not None:
                    ax.hlines(score[f"{metric}_chance"], x - width / 2, x + width / 2,
                              colors="black", linestyles="--", linewidth=1.2, label="chance")
        handles.append(Patch(color=color, label=_split_label(split, results[split])))
    if any(c.get_label() == "chance" for c in ax.collections):
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.2,
                              label="chance: always the commonest answer (first token)"))
    # the metric key last: with two columns it fills the right one
    handles += [Patch(**_bar_style("dimgray", hatch), label=label) for _, label, hatch in METRICS]
    ax.set_xticks(range(len(attributes)))
    ax.set_xticklabels([a.replace("_", " ") for a in attributes])
    ax.set_ylim(-0.02, 1.02)  # a chance at 0 stays visible
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("accuracy")
    ax.grid(axis="y", alpha=0.3)
    run = f"{results['run']}, " if results.get("run") else ""
    ax.set_title(f"QA extraction by attribute ({run}step {results.get('step', '?')})")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2,
              fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _split_label(split: str, entry: dict) -> str:
    if entry.get("exact") is None:
        return f"{split} (n={entry.get('n', 0)}): no data"
    return (f"{split} (n={entry['n']}): exact {entry['exact']:.1%}, first token "
            f"{entry['first_token']:.1%}")


def _bar_style(color: str, hatch: str | None) -> dict:
    return {"facecolor": color, "edgecolor": color, "alpha": 0.45 if hatch else 1.0,
            "hatch": hatch}


def plot(results: dict, path: Path) -> None:
    figure(results).savefig(path, dpi=120, bbox_inches="tight")  # the legend sits outside


register(Task("qa", QAOptions, run, plot))
