"""What the Part 4.1 tasks (depo, brevo, mano) share: their common options (and the threshold of
the two that report a level solved), their eval rows read and checked, greedy answers generated
in batches with the KV cache, the "largest level solved" rule, the generations log and the
accuracy-per-level plot.

A row of these sets (see corpus_gen/depo, brevo, mano) holds `prompt` (token ids from `<bos>`
through the answer marker) and `answer` (token ids, no EOS) besides the task's own fields; the
corpus's tokenizer is its fixed vocabulary (`vocab.json`), each token one name.
"""

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.config import require
from corpus_gen.core.io import atomic_write
from trainer.errors import TrainError
from trainer.eval.eval_sets import read_eval_set
from trainer.eval.registry import EvalContext

ROW_FIELDS = {"id": int, "prompt": list, "answer": list}


@dataclass
class AnswerOptions:
    """The keys every Part 4.1 task has (its `eval.<task>` group adds its own)."""

    max_rows: int = 0  # rows evaluated per level (depo: per k, mano: per l; brevo: all); 0: all
    batch_size: int = 64

    def validate(self) -> None:
        require(self.max_rows >= 0, "max_rows", self.max_rows, "must be >= 0 (0: all)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")


@dataclass
class LevelOptions(AnswerOptions):
    """A task that reports the largest level solved (depo's depth, mano's length)."""

    threshold: float = 0.9  # accuracy a level must reach to count as solved

    def validate(self) -> None:
        super().validate()
        require(math.isfinite(self.threshold) and 0 < self.threshold <= 1, "threshold",
                self.threshold, "must be in (0, 1]")


def load_rows(context: EvalContext, name: str, fields: dict[str, type], max_rows: int,
              level: Callable[[dict], Hashable] | None = None) -> list[dict]:
    """Eval set `name`'s rows, verified (each with ROW_FIELDS and `fields`, prompt and answer
    token ids of the corpus's vocabulary): the first `max_rows` of each `level` (of the whole set
    without one; 0: all)."""
    task = name.removesuffix("_test")
    rows = read_eval_set(context.corpus_dir, name, {**ROW_FIELDS, **fields},
                         f"the {task} task needs a {task} corpus")
    vocab_size = context.tokenizer.vocab_size
    taken: dict[Hashable, int] = defaultdict(int)
    kept = []
    for row in rows:
        for key in ("prompt", "answer"):
            ids = row[key]
            if not ids or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids):
                raise TrainError(f"{name} row {row['id']}: {key!r} must be a non-empty list of "
                                 f"token ids below the vocabulary's {vocab_size}")
        group = level(row) if level else None
        if not max_rows or taken[group] < max_rows:
            taken[group] += 1
            kept.append(row)
    return kept


@dataclass(frozen=True)
class Generated:
    """A row's greedy continuation: `ids` cut before EOS, `stopped` when EOS came within the
    row's budget; `ids` None when the prompt alone fills the model's positions."""

    ids: list[int] | None
    stopped: bool = False


def generate_answers(context: EvalContext, rows: list[dict], budgets: list[int],
                     batch_size: int, eos: bool = True) -> list[Generated]:
    """Greedy continuations of the rows' prompts, in order, each up to its budget of tokens
    (until EOS when `eos`). Rows of similar prompt lengths share a batch (less padding); a
    batch runs to its largest budget and each row is cut to its own. Learned absolute
    positions also bound a batch's budget by the positions its longest prompt leaves."""
    from trainer.eval.generation import generate

    model = context.model
    eos_id = context.tokenizer.eos_id if eos else None
    limit = model.positional.max_positions or math.inf
    out = [Generated(None)] * len(rows)
    order = sorted((i for i, row in enumerate(rows) if len(row["prompt"]) < limit),
                   key=lambda i: len(rows[i]["prompt"]))
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        room = limit - max(len(rows[i]["prompt"]) for i in batch)
        budget = int(min(max(budgets[i] for i in batch), room))
        outputs = generate(model, [rows[i]["prompt"] for i in batch], budget, eos_id=eos_id)
        for i, ids in zip(batch, outputs):
            own = min(budgets[i], budget)
            out[i] = Generated(ids[:own], len(ids) < own)
    return out


def names(context: EvalContext, ids: list[int]) -> list[str]:
    """Token ids as their vocabulary names."""
    return context.tokenizer.decode(ids).split()


def scored(rows: list[dict], reasons: list[str | None], level: str) -> dict:
    """`accuracy`, `n`, `failures` (counts by reason, the most frequent first) and
    `per_<level>` {the rows' `level`: {accuracy, n}} of rows whose verdicts are `reasons`
    (None: right); the accuracy of no rows is None (no data), not 0."""
    per: dict[Hashable, list[bool]] = defaultdict(list)
    for row, reason in zip(rows, reasons):
        per[row[level]].append(reason is None)
    failures = Counter(reason for reason in reasons if reason is not None)
    return {**_rate([reason is None for reason in reasons]),
            "failures": dict(sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))),
            f"per_{level}": {str(key): _rate(per[key]) for key in sorted(per)}}


def _rate(items: list[bool]) -> dict:
    return {"accuracy": sum(items) / len(items) if items else None, "n": len(items)}


def largest_solved(per_level: dict[str, dict], threshold: float) -> int:
    """The largest level L such that every tested level <= L reaches `threshold` accuracy; 0 when
    the smallest tested level fails (or none was tested)."""
    solved = 0
    for level in sorted(per_level, key=int):
        accuracy = per_level[level]["accuracy"]
        if accuracy is None or accuracy < threshold:
            break
        solved = int(level)
    return solved


def write_generations(context: EvalContext, file: str, rows: list[dict],
                      reasons: list[str | None], generated: list, fields: tuple[str, ...]) -> None:
    """`<run>/eval/<file>`: per row its id and `fields`, its verdict and what was generated."""
    lines = [json.dumps({"id": row["id"], **{key: row[key] for key in fields},
                         "correct": reason is None, "reason": reason, "generated": shown})
             for row, reason, shown in zip(rows, reasons, generated)]
    context.out.mkdir(parents=True, exist_ok=True)
    atomic_write(context.out / file, "".join(line + "\n" for line in lines).encode())


def plot_per_level(results: dict, level: str, path: Path, xlabel: str, title: str,
                   chance: float | None = None, marked: str | None = None,
                   log2: bool = False) -> None:
    """Accuracy per level (`per_<level>` of the results; n beside each point), with chance as a
    dotted line and the `marked` result (the depth or length solved) as a dashed vertical line;
    `log2`: levels that double (depo's k) on a log-2 axis."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    per_level = results.get(f"per_{level}") or {}
    points = [(int(key), per_level[key]) for key in sorted(per_level, key=int)
              if per_level[key]["accuracy"] is not None]
    if points:
        ax.plot([x for x, _ in points], [e["accuracy"] for _, e in points], marker="o",
                color="tab:blue", label=f"accuracy ({results['accuracy']:.1%}, n={results['n']})")
        for x, entry in points:
            ax.annotate(f"n={entry['n']}", (x, entry["accuracy"]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=7)
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle=":", linewidth=1,
                   label=f"chance ({chance:.3g})")
    if marked is not None and results.get(marked):
        ax.axvline(results[marked], color="tab:green", linestyle="--", linewidth=1,
                   label=f"{marked} {results[marked]}")
    if log2 and points:
        ax.set_xscale("log", base=2)
        ax.set_xticks([x for x, _ in points], [str(x) for x, _ in points])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.08)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    run = f"{results['run']}, " if results.get("run") else ""
    ax.set_title(f"{title} ({run}step {results.get('step', '?')})", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
