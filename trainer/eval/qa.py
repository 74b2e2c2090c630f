"""QA extraction (Part 3.1): can the model answer questions about people from its weights?

For each person and attribute of `eval/qa_<split>.jsonl`, greedy generation continues the prompt
("What is the birth date of X?\nAnswer:"); the expected continuation is the tokens of
" <answer>." as the training QA documents write it. Scored: exact match of the whole answer
and of its first token, per attribute and overall.
"""

import json
from collections import defaultdict
from pathlib import Path

from trainer.errors import TrainError
from trainer.eval.generation import generate
from trainer.eval.registry import EvalContext, Task, register


def _rows(corpus_dir: Path, split: str, max_people: int) -> list[dict]:
    path = corpus_dir / "eval" / f"qa_{split}.jsonl"
    if not path.exists():
        raise TrainError(f"{path}: missing; the QA task needs a bios corpus")
    rows, people = [], set()
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if max_people and row["person"] not in people and len(people) >= max_people:
                break
            people.add(row["person"])
            rows.append(row)
    return rows


def score_split(context: EvalContext, rows: list[dict], batch_size: int) -> dict:
    tokenizer = context.tokenizer
    exact, first = defaultdict(list), defaultdict(list)
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        prompts = [tokenizer.encode(r["prompt"]) for r in batch]
        expected = [tokenizer.encode(f"{r['prompt']} {r['answer']}.")[len(p):]
                    for r, p in zip(batch, prompts)]
        outputs = generate(context.model, prompts, max_new_tokens=max(map(len, expected)))
        for row, want, got in zip(batch, expected, outputs):
            exact[row["attribute"]].append(got[: len(want)] == want)
            first[row["attribute"]].append(got[:1] == want[:1])
    per_attribute = {a: {"exact": sum(exact[a]) / len(exact[a]),
                         "first_token": sum(first[a]) / len(first[a]), "n": len(exact[a])}
                     for a in exact}
    every_exact = [x for values in exact.values() for x in values]
    every_first = [x for values in first.values() for x in values]
    return {"exact": sum(every_exact) / max(1, len(every_exact)),
            "first_token": sum(every_first) / max(1, len(every_first)),
            "n": len(every_exact), "per_attribute": per_attribute}


def run(context: EvalContext, config) -> dict:
    qa = config.qa
    return {split: score_split(context, _rows(context.corpus_dir, split, qa.max_people),
                               qa.batch_size)
            for split in qa.splits}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = [name for name, value in results.items() if isinstance(value, dict)]
    attributes = list(results[splits[0]]["per_attribute"])
    width = 0.8 / len(splits)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for i, split in enumerate(splits):
        values = [results[split]["per_attribute"][a]["exact"] for a in attributes]
        ax.bar([x + i * width for x in range(len(attributes))], values, width,
               label=f"{split} (mean {results[split]['exact']:.1%})")
    ax.set_xticks([x + width * (len(splits) - 1) / 2 for x in range(len(attributes))])
    ax.set_xticklabels([a.replace("_", " ") for a in attributes])
    ax.set_ylim(0, 1)
    ax.set_ylabel("exact match")
    ax.set_title("QA extraction accuracy by attribute")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


register(Task("qa", run, plot))
