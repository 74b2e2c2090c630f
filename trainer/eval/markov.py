"""Markov ("Attention with Markov"; "Local to global"): how close does the model come to the
chain's own predictor, and is it stuck at the unigram solution?

Each row of `eval/markov_test.jsonl` (a markov corpus) is a sequence of T symbols with its
transition table (S = A^k contexts by A symbols; a fresh table per row in the in-context
setting). The model reads the symbols (symbol a is the vocabulary's token "a") teacher-forced;
its prediction of every token from position k on (its k-gram context complete) is scored.
Results, in nats per predicted token:

- `loss`, `n` (rows), `tokens` and `positions` [k, last] scored (learned positions may cut
  the last);
- `references`: the corpus's `references.json` (entropy rate, unigram entropy H(pi), Bayes loss
  and, fresh tables, its Monte Carlo standard error), and `gap_to_<reference>` = loss minus it;
- `on_these_rows`: the losses of the true table and of the Bayes predictor on the same tokens
  (the true table for a shared one, add-beta counting for fresh ones): a gap free of the
  rows' sampling noise, and `kl_to_bayes` / `tv_to_bayes`, the mean KL(Bayes || model) and
  total variation between the two predictions (0 for the Bayes predictor itself);
- `per_position` {loss, bayes_loss, true_loss}: means over rows, entry i at position k + i;
- shared tables: `table` {true, learned, count, max_abs_error}: per context the model's mean
  predicted law of the next symbol against the table's row (unseen contexts null); a model
  stuck at the unigram solution has every learned row equal to pi.

The model's probabilities are its softmax over the whole vocabulary (mass on <eos> is lost).
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_gen.core.io import read_json_file
from corpus_gen.core.manifest import read_manifest
from trainer.errors import TrainError
from trainer.eval.answers import AnswerOptions
from trainer.eval.eval_sets import read_eval_set, verified_corpus_file
from trainer.eval.registry import EvalContext, Task, register

TEST_SET = "markov_test"
REFERENCES = "references.json"
NEEDS = "the markov task needs a markov corpus"
_FIELDS = {"id": int, "symbols": list, "order": int, "table": list}


@dataclass
class MarkovOptions(AnswerOptions):
    """The experiment's `eval.markov` group: `max_rows` sequences (0: all), `batch_size` of
    them per forward pass."""


@dataclass(frozen=True)
class Rows:
    tokens: np.ndarray  # (N, T) symbols
    tables: np.ndarray  # (N, S, A): each row's transition table
    order: int


def load_rows(corpus_dir: Path, max_rows: int) -> Rows:
    """The test set's first `max_rows` rows (0: all), verified, as arrays; a TrainError naming
    the row whose symbols or table do not fit the first row's shape."""
    rows = []
    for row in read_eval_set(corpus_dir, TEST_SET, _FIELDS, NEEDS):
        rows.append(row)
        if len(rows) == max_rows:
            break
    if not rows:
        raise TrainError(f"{corpus_dir}: {TEST_SET} has no rows")
    order, width = rows[0]["order"], len(rows[0]["symbols"])
    alphabet = _table(rows[0]).shape[-1]
    tables = []
    for row in rows:
        tables.append(_table(row))
        if (row["order"] != order or len(row["symbols"]) != width or order < 1
                or tables[-1].shape != (alphabet ** order, alphabet) or width <= order
                or not all(isinstance(x, int) and 0 <= x < alphabet for x in row["symbols"])):
            raise TrainError(f"{TEST_SET} row {row['id']}: needs order {order} >= 1, more "
                             f"than {order} symbols below {alphabet} ({width} as the first row) "
                             f"and a table of {alphabet} ** {order} rows of {alphabet}")
    return Rows(np.array([row["symbols"] for row in rows], dtype=np.int64), np.stack(tables),
                order)


def _table(row: dict) -> np.ndarray:
    """A row's table as (S, A) floats; a TrainError naming the row if it is none."""
    try:
        table = np.asarray(row["table"], dtype=np.float64)
    except (TypeError, ValueError):
        table = np.empty(0)
    if table.ndim != 2:
        raise TrainError(f"{TEST_SET} row {row['id']}: 'table' is no matrix of probabilities")
    return table


def read_references(corpus_dir: Path) -> dict:
    """The corpus's `references.json`, verified, and `beta` from its manifest's config."""
    path = verified_corpus_file(corpus_dir, corpus_dir / REFERENCES, NEEDS)
    references = read_json_file(path, TrainError)
    beta = read_manifest(corpus_dir).get("config", {}).get("beta")
    if not isinstance(references.get("nats_per_token"), dict) or not isinstance(
            beta, int | float):
        raise TrainError(f"{path}: no nats_per_token, or the manifest's config no beta; {NEEDS}")
    return {**references, "beta": float(beta)}


def contexts(tokens: np.ndarray, order: int, alphabet: int) -> np.ndarray:
    """(N, T-k): the k-gram before each token from position k on, oldest token the most
    significant digit (the corpus's context numbering)."""
    out = np.zeros((tokens.shape[0], tokens.shape[1] - order), dtype=np.int64)
    for j in range(order):
        out = out * alphabet + tokens[:, j : tokens.shape[1] - order + j]
    return out


def add_beta_predictions(tokens: np.ndarray, order: int, alphabet: int,
                         beta: float) -> np.ndarray:
    """(N, T-k, A): the Bayes predictor of a fresh Dirichlet(beta) table before each token from
    position k on, (n(c, a) + beta) / (n(c) + A beta) over the sequence so far."""
    context = contexts(tokens, order, alphabet)
    batch, steps = context.shape
    counts = np.zeros((batch, alphabet ** order, alphabet))
    rows = np.arange(batch)
    out = np.empty((batch, steps, alphabet))
    for i in range(steps):  # all sequences at once, one position at a time
        seen = counts[rows, context[:, i]]  # (N, A)
        out[:, i] = (seen + beta) / (seen.sum(1, keepdims=True) + alphabet * beta)
        counts[rows, context[:, i], tokens[:, order + i]] += 1
    return out


def symbol_logprobs(context: EvalContext, tokens: np.ndarray, order: int, alphabet: int,
                    batch_size: int) -> np.ndarray:
    """(N, P, A): the model's log-probabilities of each symbol's token before the tokens at
    positions k .. k+P-1, teacher-forced; P = T - k, or fewer when learned positions cannot
    hold T - 1 inputs (a TrainError when they cannot hold k)."""
    import torch

    from trainer.eval.generation import evaluating

    model = context.model
    symbol_ids = context.tokenizer.encode(" ".join(str(a) for a in range(alphabet)))
    inputs = tokens.shape[1] - 1
    limit = model.positional.max_positions
    if limit is not None:
        if limit < order:
            raise TrainError(f"the model's {limit} positions cannot hold a {order}-gram context")
        inputs = min(inputs, limit)
    ids = torch.tensor(symbol_ids)[torch.from_numpy(tokens[:, :inputs])]  # [N, inputs]
    with evaluating(model):
        parts = [model(ids[lo : lo + batch_size].to(context.device))[:, order - 1 :]
                 .log_softmax(-1)[..., symbol_ids].double().cpu()  # [b, P, A]
                 for lo in range(0, len(ids), batch_size)]
    return torch.cat(parts).numpy()


def _mean(values: np.ndarray) -> float:
    return float(values.mean())


def kl_divergence(law: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """KL(law || model) along the last axis, from the model's log-probabilities (0 log 0 = 0;
    infinite where the model gives a possible symbol no mass)."""
    with np.errstate(invalid="ignore"):  # 0 * inf in the cells np.where discards
        return np.where(law > 0, law * (np.log(np.where(law > 0, law, 1.0)) - logprobs),
                        0.0).sum(-1)


def learned_table(logprobs: np.ndarray, context: np.ndarray, table: np.ndarray) -> dict:
    """Per context: the model's mean predicted law (null where the context never occurs) against
    the table's row, how often it occurs and the largest difference over occurring contexts."""
    count = np.bincount(context.ravel(), minlength=len(table))
    sums = np.zeros_like(table)
    np.add.at(sums, context.ravel(), np.exp(logprobs).reshape(-1, table.shape[1]))
    seen = count > 0
    learned = sums / np.maximum(count, 1)[:, None]
    error = np.abs(learned - table)[seen].max() if seen.any() else None
    return {"true": table.tolist(),
            "learned": [row.tolist() if s else None for row, s in zip(learned, seen)],
            "count": count.tolist(), "max_abs_error": None if error is None else float(error)}


def run(context: EvalContext, options: MarkovOptions) -> dict:
    rows = load_rows(context.corpus_dir, options.max_rows)
    references = read_references(context.corpus_dir)
    fresh = references.get("table") is None
    tables, order = rows.tables, rows.order
    alphabet = tables.shape[2]
    logprobs = symbol_logprobs(context, rows.tokens, order, alphabet, options.batch_size)
    steps = logprobs.shape[1]
    context_ids = contexts(rows.tokens, order, alphabet)[:, :steps]  # (N, P)
    target = rows.tokens[:, order : order + steps, None]  # (N, P, 1)
    truth = tables[np.arange(len(tables))[:, None], context_ids]  # (N, P, A)
    bayes = (add_beta_predictions(rows.tokens, order, alphabet, references["beta"])[:, :steps]
             if fresh else truth)
    losses = {name: -np.log(np.take_along_axis(law, target, 2)[..., 0]) for name, law in
              (("true", truth), ("bayes", bayes))}
    model_loss = -np.take_along_axis(logprobs, target, 2)[..., 0]  # (N, P)
    loss = _mean(model_loss)
    nats = {key: value for key, value in references["nats_per_token"].items()
            if isinstance(value, int | float)}
    results = {
        "loss": loss, "n": len(rows.tokens), "tokens": model_loss.size,
        "positions": [order, order + steps - 1],
        "references": nats,
        **{f"gap_to_{key}": loss - value for key, value in nats.items()
           if not key.endswith("stderr")},
        "on_these_rows": {"true_loss": _mean(losses["true"]),
                          "bayes_loss": _mean(losses["bayes"]),
                          "gap_to_bayes": loss - _mean(losses["bayes"])},
        "kl_to_bayes": _mean(kl_divergence(bayes, logprobs)),
        "tv_to_bayes": _mean(np.abs(np.exp(logprobs) - bayes).sum(-1) / 2),
        "per_position": {"loss": model_loss.mean(0).tolist(),
                         "bayes_loss": losses["bayes"].mean(0).tolist(),
                         "true_loss": losses["true"].mean(0).tolist()},
    }
    if not fresh:
        results["table"] = learned_table(logprobs, context_ids, tables[0])
    return results


def plot(results: dict, path: Path) -> None:
    """Loss per position against the references; beside it, for a shared table, the learned
    next-symbol probabilities against the true ones."""
    from matplotlib.figure import Figure

    table = results.get("table")
    fig = Figure(figsize=(11 if table else 7, 3.8))
    axes = fig.subplots(1, 2 if table else 1, squeeze=False)[0]
    ax = axes[0]
    first = results["positions"][0]
    curves = results["per_position"]
    x = range(first, first + len(curves["loss"]))
    ax.plot(x, curves["loss"], color="tab:blue", label=f"model ({results['loss']:.4f})")
    ax.plot(x, curves["bayes_loss"], color="tab:green", linewidth=1,
            label=f"Bayes on these rows ({results['on_these_rows']['bayes_loss']:.4f})")
    styles = {"entropy_rate": ("black", "--"), "unigram_entropy": ("tab:red", ":")}
    for key, (color, style) in styles.items():
        value = results["references"].get(key)
        if value is not None and math.isfinite(value):
            ax.axhline(value, color=color, linestyle=style, linewidth=1,
                       label=f"{key.replace('_', ' ')} ({value:.4f})")
    ax.set_xlabel("position")
    ax.set_ylabel("loss (nats)")
    run = f"{results['run']}, " if results.get("run") else ""
    ax.set_title(f"Markov: loss per position ({run}step {results.get('step', '?')})",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if table:
        ax = axes[1]
        pairs = [(t, p) for true, learned in zip(table["true"], table["learned"])
                 if learned is not None for t, p in zip(true, learned)]
        ax.scatter([t for t, _ in pairs], [p for _, p in pairs], s=12, color="tab:blue")
        ax.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
        ax.set_xlabel("true P(next | context)")
        ax.set_ylabel("model's mean P(next | context)")
        ax.set_title(f"learned vs true (max error {table['max_abs_error'] or 0:.3f})",
                     fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("markov", MarkovOptions, run, plot))
