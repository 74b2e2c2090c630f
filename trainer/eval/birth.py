"""Birth of a Transformer (Bietti et al. 2023): does the model predict each trigger's output from
its earlier occurrence in the sequence (an induction head), and the bigram tokens at the floor?

Each row of `eval/birth_test.jsonl` (a birth corpus; `birth_ood` too when its outputs are held
out) is one sequence: `tokens`, the positions of the outputs (tokens that follow a trigger) and
each one's `occurrence` (1 for a trigger's first output). Every token t >= 1 is predicted from
the tokens before it, teacher forced, one forward pass per batch of sequences. Per set:

- `context_accuracy` / `context_loss` over outputs from their trigger's second occurrence on
  (what an induction head predicts), `first_accuracy` over first occurrences (which the context
  does not give: the no-induction baseline), with their counts;
- `bigram_loss` over the other tokens (drawn from the bigram law), `bayes_floor` (the law's
  conditional entropy from the corpus summary, 2.4526 nats) and `bigram_gap` between them.

On birth_test also (mechanisms.py):
- `previous_token` and `induction`: the attention weight from each position to the previous
  one, and from a trigger that occurred before to the position right after its previous
  occurrence; `score` is the best head's, `per_layer` every head's, `uniform` what heads that
  attend uniformly would score (chance);
- `memories`: recall of the output, induction-key and previous-token memories from the weights,
  and `memories_chance`, a guess's (1 / the vocabulary, the triggers, the positions).

The attention maps of the first sequence, per layer and head, are drawn to
`<run>/eval/birth_attention.png`; the task's plot is the accuracies, scores and memories.
"""

import math
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.core.config import require
from corpus_gen.core.manifest import read_manifest
from trainer.errors import TrainError
from trainer.eval.eval_sets import eval_set_path, read_eval_set
from trainer.eval.registry import EvalContext, Task, register

SETS = {"test": "birth_test", "ood": "birth_ood"}
ATTENTION = "birth_attention.png"
_FIELDS = {"id": int, "tokens": list, "triggers": list, "outputs": list, "positions": list,
           "occurrence": list}
_NEEDS = "the birth task needs a birth corpus"


@dataclass
class BirthOptions:
    """The experiment's `eval.birth` group."""

    max_rows: int = 0  # sequences evaluated per set; 0: all
    batch_size: int = 32
    map_positions: int = 64  # the first positions of the attention maps drawn

    def validate(self) -> None:
        require(self.max_rows >= 0, "max_rows", self.max_rows, "must be >= 0 (0: all)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        require(self.map_positions >= 2, "map_positions", self.map_positions, "must be >= 2")


def load_sequences(context: EvalContext, name: str, max_rows: int) -> list[dict]:
    """Set `name`'s rows (the first `max_rows`; 0: all), checked: token ids of the vocabulary,
    all of one length the model's positions hold, output positions within it."""
    rows = []
    for row in read_eval_set(context.corpus_dir, name, _FIELDS, _NEEDS):
        if max_rows and len(rows) == max_rows:
            break
        rows.append(row)
    vocab_size, limit = context.tokenizer.vocab_size, context.model.positional.max_positions
    for row in rows:
        tokens = row["tokens"]
        if len(tokens) != len(rows[0]["tokens"]) or len(tokens) < 2:
            raise TrainError(f"{name} row {row['id']}: sequences must share one length >= 2")
        if not all(isinstance(t, int) and 0 <= t < vocab_size for t in tokens):
            raise TrainError(f"{name} row {row['id']}: 'tokens' must be token ids below the "
                             f"vocabulary's {vocab_size}")
        if not all(isinstance(t, int) and 1 <= t < len(tokens) for t in row["positions"]) or \
                len(row["positions"]) != len(row["occurrence"]):
            raise TrainError(f"{name} row {row['id']}: 'positions' must be positions 1..T-1, "
                             "one 'occurrence' each")
    if rows and limit is not None and len(rows[0]["tokens"]) > limit:
        raise TrainError(f"{name}: sequences of {len(rows[0]['tokens'])} tokens exceed the "
                         f"model's {limit} learned positions (train with ctx >= seq_len)")
    return rows


def _occurrences(rows: list[dict]):
    """[B, T] int64: c where token t is a trigger's c-th output, else 0."""
    import torch

    occurrence = torch.zeros(len(rows), len(rows[0]["tokens"]), dtype=torch.int64)
    for i, row in enumerate(rows):
        occurrence[i, row["positions"]] = torch.tensor(row["occurrence"], dtype=torch.int64)
    return occurrence


class _Tally:
    """Sums over a set's batches."""

    def __init__(self):
        self.sums: dict[str, float] = {}

    def add(self, key: str, value) -> None:
        self.sums[key] = self.sums.get(key, 0) + value

    def mean(self, key: str, count: str) -> float | None:
        n = self.sums.get(count, 0)
        return float(self.sums[key] / n) if n else None


def score_set(context: EvalContext, rows: list[dict], batch_size: int, bayes_floor: float | None,
              probe: bool = False, map_positions: int = 0) -> tuple[dict, dict]:
    """Accuracy and losses of a set (module docstring), and when `probe` the attention scores
    (mechanisms.py) and the first sequence's maps ([L, H, P, P] nested lists, P up to
    `map_positions`) under "maps"."""
    import torch
    import torch.nn.functional as F

    from trainer.eval import mechanisms

    tally, probes, picture = _Tally(), _Tally(), None
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        tokens = torch.tensor([row["tokens"] for row in batch], device=context.device)
        occurrence = _occurrences(batch).to(context.device)[:, 1:]  # of the predicted tokens
        logits, maps = mechanisms.attention_maps(context.model, tokens)
        logits, targets = logits[:, :-1], tokens[:, 1:]  # token t+1 from tokens 0..t
        loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # [B, T-1]
        right = logits.argmax(dim=-1) == targets
        for key, where in (("context", occurrence >= 2), ("first", occurrence == 1),
                           ("bigram", occurrence == 0)):
            tally.add(f"{key}_n", int(where.sum()))
            tally.add(f"{key}_right", int(right[where].sum()))
            tally.add(f"{key}_loss", float(loss[where].sum()))
        if probe:
            # a trigger before a second (or later) output: what followed its earlier
            # occurrences is that output
            queries = F.pad(occurrence >= 2, (0, 1))  # [B, T]: position t-1 of such an output
            for key, keys in (("previous", mechanisms.previous_keys(tokens)),
                              ("induction", mechanisms.induction_keys(tokens, queries))):
                weight, count = mechanisms.attention_to(maps, keys)
                probes.add(key, weight.double().cpu())
                probes.add(f"{key}_n", count)
                probes.add(f"{key}_uniform", mechanisms.uniform_weight(keys)[0])
            if picture is None:
                picture = maps[:, 0, :, :map_positions, :map_positions].cpu().tolist()
    context_loss = tally.mean("context_loss", "context_n")
    bigram_loss = tally.mean("bigram_loss", "bigram_n")
    results = {"n": len(rows),
               "context_accuracy": tally.mean("context_right", "context_n"),
               "context_loss": context_loss, "context_n": tally.sums.get("context_n", 0),
               "first_accuracy": tally.mean("first_right", "first_n"),
               "first_n": tally.sums.get("first_n", 0),
               "bigram_loss": bigram_loss, "bigram_n": tally.sums.get("bigram_n", 0),
               "bayes_floor": bayes_floor,
               "bigram_gap": None if bigram_loss is None or bayes_floor is None
               else bigram_loss - bayes_floor}
    if not probe:
        return results, {}
    scores = {name: _head_scores(probes, key)
              for name, key in (("previous_token", "previous"), ("induction", "induction"))}
    return results, {**scores, "maps": picture}


def _head_scores(probes: _Tally, key: str) -> dict:
    n = probes.sums.get(f"{key}_n", 0)
    if not n:
        return {"score": None, "per_layer": [], "uniform": None, "n": 0}
    per_head = probes.sums[key] / n  # [L, H]
    return {"score": float(per_head.max()), "per_layer": per_head.tolist(),
            "uniform": probes.mean(f"{key}_uniform", f"{key}_n"), "n": int(n)}


def _bayes_floor(corpus_dir: Path) -> float:
    """The corpus summary's floor; the law's own where the manifest has none (a hand-made
    corpus): the law is the package's tiny-shakespeare counts either way."""
    floor = (read_manifest(corpus_dir).get("summary") or {}).get("bayes_floor")
    if floor is None:
        from corpus_gen.birth.bigrams import bayes_floor

        floor = round(bayes_floor(), 4)
    return float(floor)


def run(context: EvalContext, options: BirthOptions) -> dict:
    floor = _bayes_floor(context.corpus_dir)
    rows = load_sequences(context, SETS["test"], options.max_rows)
    results, probes = score_set(context, rows, options.batch_size, floor, probe=True,
                                map_positions=options.map_positions)
    out = {"test": results}
    if eval_set_path(context.corpus_dir, SETS["ood"]).is_file():
        out["ood"] = score_set(context, load_sequences(context, SETS["ood"], options.max_rows),
                               options.batch_size, floor)[0]
    from trainer.eval.mechanisms import memory_probes

    outputs = sorted({o for row in rows for o in row["outputs"]})
    triggers = sorted({t for row in rows for t in row["triggers"]})
    length = len(rows[0]["tokens"]) if rows else 0
    out |= {"previous_token": probes["previous_token"], "induction": probes["induction"],
            "memories": memory_probes(context.model, outputs, triggers, length),
            # recall@1 of guessing: one of the vocabulary, of the triggers, of the positions
            "memories_chance": {"output": 1 / context.tokenizer.vocab_size,
                                "induction_key": 1 / len(triggers) if triggers else None,
                                "previous_token": 1 / (length - 1) if length > 1 else None}}
    if probes["maps"] is not None:
        draw_attention(probes["maps"], rows[0], context.tokenizer, context.out / ATTENTION)
    return out


def draw_attention(maps: list, row: dict, tokenizer, path: Path) -> None:
    """The attention maps [L][H][P][P] of one sequence, a panel per layer (row) and head
    (column), its tokens on the axes."""
    from matplotlib.figure import Figure

    layers, heads, positions = len(maps), len(maps[0]), len(maps[0][0])
    names = tokenizer.decode(row["tokens"][:positions]).split()
    fig = Figure(figsize=(max(3.2 * heads, 6.4) + 0.5, 3.2 * layers + 0.5))
    axes = fig.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(maps[layer][head], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            if len(names) == positions:  # one name a token (a fixed vocabulary)
                ax.set_xticks(range(positions), names, fontsize=4, rotation=90)
                ax.set_yticks(range(positions), names, fontsize=4)
    fig.suptitle("Birth: attention of the first test sequence (row: query, column: key)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot(results: dict, path: Path) -> None:
    """In-context and first-occurrence accuracy, the induction-head scores (against uniform
    attention) and the memories' recall, as bars."""
    from matplotlib.figure import Figure

    test = results.get("test") or {}
    bars = {"in-context acc": test.get("context_accuracy"),
            "first-occ. acc": test.get("first_accuracy"),
            "OOD in-context": (results.get("ood") or {}).get("context_accuracy"),
            "prev-token head": (results.get("previous_token") or {}).get("score"),
            "induction head": (results.get("induction") or {}).get("score"),
            **{f"{name.replace('_', '-')} memory": value
               for name, value in (results.get("memories") or {}).items()}}
    bars = {label: value for label, value in bars.items() if value is not None}
    fig = Figure(figsize=(8, 3.8))
    ax = fig.subplots()
    ax.bar(range(len(bars)), list(bars.values()), color="tab:blue")
    ax.set_xticks(range(len(bars)), list(bars), rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    bigram, floor = test.get("bigram_loss"), test.get("bayes_floor")
    if bigram is not None and floor is not None and math.isfinite(bigram):
        ax.set_title(f"Birth: bigram loss {bigram:.4f} vs floor {floor:.4f} nats", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("birth", BirthOptions, run, plot))
