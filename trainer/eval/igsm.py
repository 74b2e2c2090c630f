"""iGSM reasoning (Part 2.1/2.2): can the model write a correct step-by-step solution?

For each problem of the chosen eval sets (`eval/<set>.jsonl` of an igsm corpus: `igsm_test`,
`igsm_train_templates` in distribution, `igsm_op<k>` out of distribution), greedy generation
(batched, KV cache) continues the prompt ("... How many X does Y have? Solution:") until the
model's EOS or `max_new_tokens` (for learned absolute positions, also the model's last position;
the other encodings may run past the training context, as out-of-distribution problems need). Each
generation is checked step by step by `corpus_gen.igsm.checker.check_solution`, which accepts any
valid order. Scored per set, per op count and per distribution (in / out of distribution):

- `solution`: every step valid and the final answer right (the papers' accuracy);
- `answer`: the final answer right ("Answer: n", or the value given to the question's parameter);
- `failures`: why the wrong solutions are wrong (the checker's reasons, plus `truncated`: the
  generation ran out of tokens before finishing, and `prompt_too_long`: the prompt alone fills the
  model's positions); `truncated` (a share): generations that hit the token budget without EOS.

Every generation, with its verdict, also goes to `<run>/eval/igsm_generations.jsonl`.
"""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from corpus_gen.core.config import require
from corpus_gen.core.io import atomic_write
from corpus_gen.core.manifest import read_manifest
from corpus_gen.igsm.checker import check_solution
from corpus_gen.igsm.graph import MOD
from trainer.errors import TrainError
from trainer.eval.eval_sets import read_eval_set
from trainer.eval.registry import EvalContext, Task, register

_ROW_FIELDS = {"id": int, "prompt": str, "op": int, "problem": dict}
GENERATIONS = "igsm_generations.jsonl"


@dataclass
class IgsmOptions:
    """The experiment's `eval.igsm` group."""

    sets: list[str] = field(default_factory=list)  # eval/<set>.jsonl; empty: every igsm_* set
    max_problems: int = 0  # problems per set to evaluate (0: all)
    batch_size: int = 32
    max_new_tokens: int = 768  # tokens per solution (learned positions: also the last one)

    def validate(self) -> None:
        for key in ("batch_size", "max_new_tokens"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        require(self.max_problems >= 0, "max_problems", self.max_problems,
                "must be >= 0 (0: all)")
        for name in self.sets:
            require(name.startswith("igsm_") and "/" not in name, "sets", name,
                    "must name an iGSM eval set, e.g. igsm_test or igsm_op20")


def default_sets(corpus_dir: Path) -> list[str]:
    """Every igsm eval set the corpus's manifest lists, in its order."""
    names = [Path(entry["name"]).stem for entry in read_manifest(corpus_dir).get("eval", [])]
    found = [name for name in names if name.startswith("igsm_")]
    if not found:
        raise TrainError(f"{corpus_dir}: no igsm eval sets; the igsm task needs an igsm corpus")
    return found


def load_rows(corpus_dir: Path, name: str, max_problems: int) -> list[dict]:
    """The first `max_problems` rows (0: all) of eval set `name`, verified."""
    rows = read_eval_set(corpus_dir, name, _ROW_FIELDS,
                         "the igsm task needs an igsm corpus with this set")
    return list(islice(rows, max_problems or None))


def score_text(row: dict, text: str, truncated: bool = False) -> dict:
    """The verdict on one generated solution (the text after "Solution:"). Never raises."""
    try:
        result = check_solution(row["problem"], text)
    except Exception as exc:  # the checker promises not to raise on text; a bad graph might
        return {"solution": False, "answer": False, "reason": "checker_error",
                "detail": f"{type(exc).__name__}: {exc}"[:200], "step": None}
    answer = result.correct or (result.answer is not None and result.expected is not None
                                and result.answer % MOD == result.expected)
    reason = result.reason
    if truncated and not result.correct and (result.step is None
                                             or result.step >= result.steps - 1):
        reason = "truncated"  # fails where the token budget cut it, not at an earlier mistake
    return {"solution": bool(result.correct), "answer": bool(answer), "reason": reason,
            "detail": result.detail, "step": result.step}


def summarize(verdicts: list[tuple[dict, dict]]) -> dict:
    """Overall and per-op accuracy of (row, verdict) pairs, and the failure histogram."""
    per_op: dict[int, list[dict]] = defaultdict(list)
    for row, verdict in verdicts:
        per_op[int(row["op"])].append(verdict)
    every = [verdict for _, verdict in verdicts]

    def rates(items: list[dict]) -> dict:  # of no items: None (no data), not 0
        n = len(items)
        return {**{key: sum(v[key] for v in items) / n if n else None
                   for key in ("solution", "answer")}, "n": n}

    failures = Counter(v["reason"] for v in every if not v["solution"])
    return {**rates(every),
            "truncated": (sum(v.get("truncated", False) for v in every) / len(every)
                          if every else None),
            "failures": dict(sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))),
            "per_op": {str(op): rates(per_op[op]) for op in sorted(per_op)}}


def solve(context: EvalContext, rows: list[dict], batch_size: int, max_new_tokens: int
          ) -> list[tuple[str | None, bool]]:
    """Greedy solutions of `rows`, in order: (text, truncated), or (None, False) when the prompt
    leaves no room among the model's positions (learned absolute positions only)."""
    from trainer.eval.generation import generate

    tokenizer, model = context.tokenizer, context.model
    limit = model.positional.max_positions or float("inf")
    prompts = [tokenizer.encode(row["prompt"]) for row in rows]
    out: list[tuple[str | None, bool]] = [(None, False)] * len(rows)
    order = sorted((i for i, p in enumerate(prompts) if len(p) < limit),
                   key=lambda i: len(prompts[i]))  # similar lengths share a batch: less padding
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        budget = int(min(max_new_tokens, limit - max(len(prompts[i]) for i in batch)))
        outputs = generate(model, [prompts[i] for i in batch], budget, eos_id=tokenizer.eos_id)
        for i, ids in zip(batch, outputs):
            out[i] = (tokenizer.decode(ids), len(ids) >= budget)
    return out


def score_set(context: EvalContext, name: str, rows: list[dict], batch_size: int,
              max_new_tokens: int, log: list[dict]) -> tuple[dict, list[tuple[dict, dict]]]:
    """A set's results and its (row, verdict) pairs; each generation is appended to `log`."""
    verdicts = []
    for row, (text, truncated) in zip(rows, solve(context, rows, batch_size, max_new_tokens)):
        if text is None:
            verdict = {"solution": False, "answer": False, "reason": "prompt_too_long",
                       "detail": "the prompt fills the model's positions", "step": None}
        else:
            verdict = score_text(row, text, truncated)
        verdict["truncated"] = truncated
        verdicts.append((row, verdict))
        log.append({"set": name, "id": row["id"], "op": row["op"], **verdict, "text": text})
    return {"distribution": _distribution(rows), **summarize(verdicts)}, verdicts


def _distribution(rows: list[dict]) -> str:
    """igsm_op<k> rows say split "ood"; igsm_test and igsm_train_templates are in distribution."""
    return "ood" if rows and rows[0].get("split") == "ood" else "in"


def run(context: EvalContext, options: IgsmOptions) -> dict:
    names = list(dict.fromkeys(options.sets)) or default_sets(context.corpus_dir)
    results: dict = {}
    log: list[dict] = []
    by_distribution: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for name in names:
        rows = load_rows(context.corpus_dir, name, options.max_problems)
        results[name], verdicts = score_set(context, name, rows, options.batch_size,
                                            options.max_new_tokens, log)
        by_distribution[results[name]["distribution"]].extend(verdicts)
    for key, label in (("in", "in_distribution"), ("ood", "out_of_distribution")):
        if by_distribution[key]:
            sets = [n for n in names if results[n]["distribution"] == key]
            results[label] = {"distribution": key, **summarize(by_distribution[key]),
                              "sets": sets}
    context.out.mkdir(parents=True, exist_ok=True)
    atomic_write(context.out / GENERATIONS,
                 "".join(json.dumps(entry) + "\n" for entry in log).encode())
    return results


def plot(results: dict, path: Path) -> None:
    """Accuracy against op count: one line per metric; out-of-distribution ops dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = {"solution": "tab:blue", "answer": "tab:orange"}
    for label, style in (("in_distribution", "-"), ("out_of_distribution", "--")):
        entry = results.get(label)
        if not isinstance(entry, dict) or not entry.get("per_op"):
            continue
        ops = sorted(entry["per_op"], key=int)
        for metric, color in colors.items():
            ax.plot([int(op) for op in ops], [entry["per_op"][op][metric] for op in ops],
                    style, marker="o", color=color,
                    label=f"{metric} {'OOD' if label[0] == 'o' else 'in dist.'} "
                          f"({entry[metric]:.1%}, n={entry['n']})")
    if ax.lines:
        ax.axhline(1 / MOD, color="gray", linestyle=":", linewidth=1,
                   label=f"answer by chance (1/{MOD})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("op (operations in the shortest solution)")
    ax.set_ylabel("accuracy")
    ax.set_title("iGSM accuracy by op: whole solution and final answer")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


register(Task("igsm", IgsmOptions, run, plot))
