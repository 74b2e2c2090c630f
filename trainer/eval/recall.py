"""Recall (Nichani, Lee, Bietti 2025): how many facts a*(s, r) has the model stored, and is it
still on the "hallucination" plateau, answering from the right relation's block without knowing
the subject?

Each row of `eval/recall_test.jsonl` (a recall corpus) asks one fact (s, r): the prompt is the
T tokens up to the separator, the answer one token of relation r's block of D; the set asks every
fact once. The model's next-token law after the prompt (teacher-forced, over the whole
vocabulary) gives the greedy answer and the loss. Results:

- `accuracy`, `n` and `facts_stored` (facts answered right); `loss` (nats) on the answer;
- `in_block`: answers in the relation's block (right or not), `block_mass`: the mean
  probability on it; a relation-only model has both 1 with accuracy 1/D;
- `weighted_accuracy`, `weighted_loss`: the same under the training laws of subjects and
  relations (facts.json; equal to the plain ones when both are uniform), renormalised over the
  rows evaluated (`max_rows` keeps the first subjects' facts);
- `references` from facts.json: `ln_D` (the relation-only loss the paper quotes),
  `relation_only_loss` (H(answer | relation) under the laws: at most ln D), and `ln_answers`,
  ln(R D), a model that knows only that an answer comes; `gap_to_<reference>` = weighted_loss
  minus it;
- `per_relation` {r: {accuracy, n, loss, in_block}}.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_gen.core.io import read_json_file
from trainer.errors import TrainError
from trainer.eval.answers import AnswerOptions, load_rows
from trainer.eval.eval_sets import verified_corpus_file
from trainer.eval.registry import EvalContext, Task, register

TEST_SET = "recall_test"
FACTS = "facts.json"
NEEDS = "the recall task needs a recall corpus"
_FIELDS = {"subject": int, "relation": int}


@dataclass
class RecallOptions(AnswerOptions):
    """The experiment's `eval.recall` group: the first `max_rows` facts (0: all), `batch_size`
    prompts per forward pass."""


@dataclass(frozen=True)
class Facts:
    answers: np.ndarray  # (S, R): a*(s, r) as an answer index, token "a<index>"
    subject_law: np.ndarray  # (S,)
    relation_law: np.ndarray  # (R,)
    per_relation: int  # D
    references: dict[str, float]


def read_facts(corpus_dir: Path) -> Facts:
    """The corpus's fact table and laws (facts.json), verified; a TrainError naming the file
    when a key is missing or misshapen."""
    path = verified_corpus_file(corpus_dir, corpus_dir / FACTS, NEEDS)
    data = read_json_file(path, TrainError)
    try:
        answers = np.asarray(data["answers"], dtype=np.int64)
        laws = (np.asarray(data["subject_law"], dtype=np.float64),
                np.asarray(data["relation_law"], dtype=np.float64))
        per_relation = int(data["answers_per_relation"])
        references = {"ln_D": float(data["ln_D"]),
                      "relation_only_loss": float(data["relation_only_loss"]),
                      "ln_answers": math.log(per_relation * answers.shape[1])}
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TrainError(f"{path}: damaged fact table ({exc!r}); {NEEDS}") from None
    if answers.ndim != 2 or (laws[0].shape, laws[1].shape) != ((len(answers),),
                                                                answers.shape[1:]):
        raise TrainError(f"{path}: answers is not S x R with a law of each; {NEEDS}")
    return Facts(answers, *laws, per_relation, references)


def answer_logprobs(context: EvalContext, prompts: list[list[int]],
                    batch_size: int) -> np.ndarray:
    """(N, V): the model's log-probabilities of the token after each prompt, teacher-forced
    (prompts of different lengths left-padded); a TrainError when learned positions cannot
    hold a prompt."""
    import torch

    from trainer.eval.generation import evaluating, left_padded

    model = context.model
    limit = model.positional.max_positions
    longest = max(map(len, prompts))
    if limit is not None and longest > limit:
        raise TrainError(f"the model's {limit} positions cannot hold the {longest}-token prompts")
    with evaluating(model):
        parts = [model(*left_padded(prompts[lo : lo + batch_size], context.device))[:, -1]
                 .log_softmax(-1).double().cpu()  # [b, V]
                 for lo in range(0, len(prompts), batch_size)]
    return torch.cat(parts).numpy()


def _scores(correct: np.ndarray, loss: np.ndarray, in_block: np.ndarray) -> dict:
    return {"accuracy": float(correct.mean()), "n": len(correct), "loss": float(loss.mean()),
            "in_block": float(in_block.mean())}


def run(context: EvalContext, options: RecallOptions) -> dict:
    facts = read_facts(context.corpus_dir)
    rows = load_rows(context, TEST_SET, _FIELDS, options.max_rows)
    subjects, relations = facts.answers.shape
    width = facts.per_relation
    answer_ids = np.array(context.tokenizer.encode(
        " ".join(f"a{i}" for i in range(relations * width))))  # (R D,): block r is [r D, r D + D)
    s = np.array([row["subject"] for row in rows])
    r = np.array([row["relation"] for row in rows])
    if not ((0 <= s) & (s < subjects) & (0 <= r) & (r < relations)).all():
        raise TrainError(f"{TEST_SET}: a row asks a subject or relation outside facts.json's "
                         f"{subjects} x {relations}; {NEEDS}")
    target = answer_ids[facts.answers[s, r]]  # (N,)
    if [row["answer"] for row in rows] != target[:, None].tolist():
        raise TrainError(f"{TEST_SET}: answers differ from facts.json's; {NEEDS}")
    logprobs = answer_logprobs(context, [row["prompt"] for row in rows], options.batch_size)
    block = answer_ids[r[:, None] * width + np.arange(width)]  # (N, D): each row's block
    guess = logprobs.argmax(1)
    correct = guess == target
    loss = -logprobs[np.arange(len(rows)), target]
    in_block = (guess[:, None] == block).any(1)
    weight = facts.subject_law[s] * facts.relation_law[r]
    weight = weight / weight.sum()
    weighted_loss = float(weight @ loss)
    return {
        **_scores(correct, loss, in_block), "facts_stored": int(correct.sum()),
        "block_mass": float(np.exp(np.take_along_axis(logprobs, block, 1)).sum(1).mean()),
        "weighted_accuracy": float(weight @ correct), "weighted_loss": weighted_loss,
        "references": facts.references,
        **{f"gap_to_{key}": weighted_loss - value for key, value in facts.references.items()},
        "per_relation": {str(k): _scores(correct[r == k], loss[r == k], in_block[r == k])
                         for k in range(relations) if (r == k).any()},
    }


def plot(results: dict, path: Path) -> None:
    """Accuracy and loss per relation, with chance (1/D) and the loss references."""
    from matplotlib.figure import Figure

    per = results.get("per_relation") or {}
    keys = sorted(per, key=int)
    references = results["references"]
    fig = Figure(figsize=(10, 3.6))
    left, right = fig.subplots(1, 2)
    left.bar(keys, [per[k]["accuracy"] for k in keys], color="tab:blue",
             label=f"accuracy ({results['accuracy']:.1%}, {results['facts_stored']} of "
                   f"{results['n']} facts)")
    left.axhline(math.exp(-references["ln_D"]), color="gray", linestyle=":", linewidth=1,
                 label="1/D (relation only)")
    left.set_ylim(0, 1.08)
    left.set_xlabel("relation")
    left.set_ylabel("accuracy")
    run = f"{results['run']}, " if results.get("run") else ""
    left.set_title(f"Recall ({run}step {results.get('step', '?')})", fontsize=10)
    right.bar(keys, [per[k]["loss"] for k in keys], color="tab:orange",
              label=f"loss ({results['loss']:.3f})")
    styles = {"ln_answers": ("tab:red", ":"), "ln_D": ("black", "--"),
              "relation_only_loss": ("tab:green", "-.")}
    for key, (color, style) in styles.items():
        right.axhline(references[key], color=color, linestyle=style, linewidth=1,
                      label=f"{key} ({references[key]:.3f})")
    right.set_xlabel("relation")
    right.set_ylabel("loss on the answer (nats)")
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("recall", RecallOptions, run, plot))
