"""k-hop induction (Sanford, Hsu, Telgarsky 2024): which hop counts does the model solve?

Each row of `eval/khop_test.jsonl` (a khop corpus) is a document's token ids (the hop token
"k<k>" first, then the letters) with each position's target id (its k-hop letter, "~" where
the hops run off the start); the set holds the same number of rows for every k. One
teacher-forced pass per batch of rows; the model's argmax over the whole vocabulary at every
position from 1 on (position 0's target, "_", is outside the corpus's loss too) is compared with
the target. Results:

- `error` (the share of wrong positions), `loss` (nats, cross-entropy of the targets), `n`
  (rows), `positions` [1, last] scored (learned positions may cut the last);
- `per_k` {k: {error, loss, n, undefined}}: the paper's metric, and the share of "~" targets;
- `largest_k_solved`: the largest k such that every k' <= k has error <= `threshold` (-1 when
  k = 0 fails); the default 0.05 gives the paper's 1, 3, 5, 8, 15 for 2-6 layers from its own
  errors (local/errors.json of its repository, width 128);
- `chance_error`: the error of a uniform guess among the target tokens the set holds;
- with `per_position`, `per_position` {error}: per position over all rows, entry i at i + 1.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_gen.core.config import require
from trainer.errors import TrainError
from trainer.eval.answers import AnswerOptions
from trainer.eval.eval_sets import read_eval_set
from trainer.eval.registry import EvalContext, Task, register

TEST_SET = "khop_test"
NEEDS = "the khop task needs a khop corpus"
_FIELDS = {"id": int, "k": int, "tokens": list, "targets": list}


@dataclass
class KhopOptions(AnswerOptions):
    """The experiment's `eval.khop` group: `max_rows` rows per k (0: all), `batch_size` rows a
    forward pass."""

    threshold: float = 0.05  # the largest error a k may have to count as solved
    per_position: bool = False  # also the error at each position

    def validate(self) -> None:
        super().validate()
        require(math.isfinite(self.threshold) and 0 <= self.threshold < 1, "threshold",
                self.threshold, "must be in [0, 1)")


@dataclass(frozen=True)
class Rows:
    tokens: np.ndarray  # (N, L) token ids, the hop token first
    targets: np.ndarray  # (N, L) target ids
    hops: np.ndarray  # (N,) k


def load_rows(corpus_dir: Path, max_rows: int, vocab_size: int) -> Rows:
    """The test set's first `max_rows` rows of each k (0: all), verified; a TrainError naming
    the row whose tokens or targets do not fit."""
    rows, taken = [], {}
    for row in read_eval_set(corpus_dir, TEST_SET, _FIELDS, NEEDS):
        if max_rows and taken.get(row["k"], 0) == max_rows:
            continue
        taken[row["k"]] = taken.get(row["k"], 0) + 1
        rows.append(row)
    if not rows:
        raise TrainError(f"{corpus_dir}: {TEST_SET} has no rows")
    width = len(rows[0]["tokens"])
    for row in rows:
        ids = row["tokens"] + row["targets"]
        if (len(row["tokens"]) != width or len(row["targets"]) != width or width < 2
                or row["k"] < 0
                or not all(isinstance(t, int) and 0 <= t < vocab_size for t in ids)):
            raise TrainError(f"{TEST_SET} row {row['id']}: needs k >= 0 and {width} tokens and "
                             f"as many targets (as the first row, at least 2), each an id "
                             f"below {vocab_size}")
    return Rows(np.array([r["tokens"] for r in rows], dtype=np.int64),
                np.array([r["targets"] for r in rows], dtype=np.int64),
                np.array([r["k"] for r in rows], dtype=np.int64))


def predictions(context: EvalContext, tokens: np.ndarray, batch_size: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(argmax ids (N, P), log-probabilities (N, P, V)) at positions 1 .. P, teacher-forced;
    P = L - 1, or fewer when learned positions cannot hold L."""
    import torch

    from trainer.eval.generation import evaluating

    model = context.model
    width = tokens.shape[1]
    limit = model.positional.max_positions
    if limit is not None:
        if limit < 2:
            raise TrainError(f"the model's {limit} positions cannot hold a hop token and a letter")
        width = min(width, limit)
    ids = torch.from_numpy(tokens[:, :width])
    with evaluating(model):
        parts = [model(ids[lo : lo + batch_size].to(context.device))[:, 1:]
                 .log_softmax(-1).double().cpu() for lo in range(0, len(ids), batch_size)]
    logprobs = torch.cat(parts).numpy()
    return logprobs.argmax(-1), logprobs


def largest_k_solved(per_k: dict[str, dict], threshold: float) -> int:
    """The largest k such that every tested k' <= k has error <= threshold; -1 when the smallest
    fails."""
    solved = -1
    for k in sorted(per_k, key=int):
        if per_k[k]["error"] > threshold:
            break
        solved = int(k)
    return solved


def run(context: EvalContext, options: KhopOptions) -> dict:
    rows = load_rows(context.corpus_dir, options.max_rows, context.model.config.vocab_size)
    guessed, logprobs = predictions(context, rows.tokens, options.batch_size)
    steps = guessed.shape[1]
    targets = rows.targets[:, 1 : 1 + steps]
    wrong = guessed != targets  # (N, P)
    losses = -np.take_along_axis(logprobs, targets[..., None], 2)[..., 0]
    undefined = context.tokenizer.token_id("~")
    per_k = {str(k): {"error": float(wrong[rows.hops == k].mean()),
                      "loss": float(losses[rows.hops == k].mean()),
                      "n": int((rows.hops == k).sum()),
                      "undefined": float((targets[rows.hops == k] == undefined).mean())}
             for k in np.unique(rows.hops).tolist()}
    results = {"error": float(wrong.mean()), "loss": float(losses.mean()),
               "n": len(rows.tokens), "positions": [1, steps], "per_k": per_k,
               "largest_k_solved": largest_k_solved(per_k, options.threshold),
               "threshold": options.threshold,
               "chance_error": 1 - 1 / len(np.unique(targets))}
    if options.per_position:
        results["per_position"] = {"error": wrong.mean(0).tolist()}
    return results


def plot(results: dict, path: Path) -> None:
    """Error per k (the paper's figure), with the threshold, chance and the largest k solved."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    per_k = results["per_k"]
    ks = sorted(per_k, key=int)
    ax.plot([int(k) for k in ks], [per_k[k]["error"] for k in ks], marker="o",
            color="tab:blue", label=f"error ({results['error']:.3f}, n={results['n']})")
    ax.plot([int(k) for k in ks], [per_k[k]["undefined"] for k in ks], color="tab:orange",
            linewidth=1, linestyle="-.", label="share of '~' targets")
    ax.axhline(results["threshold"], color="tab:green", linestyle="--", linewidth=1,
               label=f"threshold ({results['threshold']:.3g})")
    ax.axhline(results["chance_error"], color="gray", linestyle=":", linewidth=1,
               label=f"chance ({results['chance_error']:.3g})")
    if results["largest_k_solved"] >= 0:
        ax.axvline(results["largest_k_solved"], color="tab:green", linewidth=1,
                   label=f"largest k solved {results['largest_k_solved']}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("hops k")
    ax.set_ylabel("error (share of positions)")
    run = f"{results['run']}, " if results.get("run") else ""
    ax.set_title(f"k-hop induction: error per k ({run}step {results.get('step', '?')})",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("khop", KhopOptions, run, plot))
