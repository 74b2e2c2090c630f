"""Linear probing (Part 3.1): at which layer, and whether, a person's attributes can be read
linearly off the model's hidden states.

- P-probe: the person's first biography as trained (kind bio, copy 0, the shard's own tokens).
  For each attribute, the hidden state at the token just before the attribute's value first
  appears (the paper's "special position") predicts that attribute; skipped where the value
  comes before the text names the person (a template may open with it), since no hidden state
  there can know whom it is about. Not the name's end: many bioS biographies start with the
  name, and there causal attention makes the hidden state the Q-probe's, which says what the
  name alone recalls, not what the biography's text stores.
- Q-probe: the full name alone, as a document starts (positions from 0); the hidden state at its
  last token predicts each of the six attributes.

Per kind, layer (0: the embeddings, l: after block l) and attribute, a logistic regression on
standardized features of the probe-train people is scored on the probe-test people (a seeded
split of the people). Labels: the birth month for the birth date (12 classes), the value itself
for the other five. Chance: the most frequent probe-train label's share of the probe-test rows.
"""

import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from corpus_gen.bios.people import ATTRIBUTES, MONTHS, full_name
from corpus_gen.core.config import require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer
from trainer.errors import TrainError
from trainer.eval.activations import extract_features
from trainer.eval.registry import EvalContext, Task, register

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("p", "q")
TITLES = {"p": "P-probe: biography, token before each value", "q": "Q-probe: the name alone"}
MAX_ITER = 300  # lbfgs iterations per probe: enough to settle accuracy, bounded on CPU
_NEEDS = "the probe task needs a bios corpus"


@dataclass
class ProbeOptions:
    """The experiment's `eval.probe` group."""

    max_people: int = 1000  # people probed: the first met in the stream (0: all)
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    layers: list[int] = field(default_factory=list)  # empty: 0 (embeddings) to n_layer
    test_fraction: float = 0.2  # share of the people the probes are scored on
    batch_size: int = 64  # documents per forward pass
    seed: int = 0  # the probe-train / probe-test split
    C: float = 1.0  # inverse L2 strength of the logistic regression (scikit-learn's C)

    def validate(self) -> None:
        require(self.max_people >= 0 and self.max_people != 1, "max_people", self.max_people,
                "must be 0 (all) or >= 2: probes need probe-train and probe-test people")
        require(bool(self.kinds) and len(set(self.kinds)) == len(self.kinds), "kinds",
                self.kinds, "must name p and/or q, each once")
        for kind in self.kinds:
            require(kind in KINDS, "kinds", kind, "must be p (biography) or q (name alone)")
        for layer in self.layers:
            require(layer >= 0, "layers", layer, "must be >= 0 (0: the embeddings)")
        require(len(set(self.layers)) == len(self.layers), "layers", self.layers,
                "names a layer twice")
        require(0 < self.test_fraction < 1, "test_fraction", self.test_fraction,
                "must be in (0, 1)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        require(0 < self.C < math.inf, "C", self.C, "must be > 0 and finite")


def read_biographies(corpus_dir: Path, max_people: int) -> list[dict]:
    """The first biography (kind bio, copy 0) of the first `max_people` people (0: all) met in
    the stream: each sample's json (text, person, ...) and, as `ids`, its tokens as trained."""
    manifest = read_manifest(corpus_dir)
    if manifest.get("family") != "bios":
        raise TrainError(f"{corpus_dir}: a {manifest.get('family')} corpus; {_NEEDS}")
    found = []
    for entry in manifest["shards"]:
        path = corpus_dir / entry["name"]
        if not path.is_file():
            raise TrainError(f"{path}: shard missing; run physlm verify {corpus_dir}")
        for sample in read_shard(path):
            meta = sample["json"]
            if meta.get("kind") == "bio" and meta.get("copy") == 0:
                found.append({**meta, "ids": sample["ids"].tolist()})
                if len(found) == max_people:
                    return found
    return found


def label(person: dict, attribute: str) -> str:
    return MONTHS[person["birth_month"] - 1] if attribute == "birth_date" else person[attribute]


def _spellings(person: dict, attribute: str) -> list[str]:
    # imported here: bio_r compiles its grammar on import (~0.1 s), which no other task needs
    from corpus_gen.bios.bio_r import DATE_FORMATS, format_date

    if attribute == "birth_date":  # bioS writes the first style; bioR any of them
        return [format_date(person["birth_month"], person["birth_day"], person["birth_year"],
                            style) for style in range(len(DATE_FORMATS))]
    return [person[attribute]]


def special_positions(tokenizer: Tokenizer, text: str, ids: list[int], person: dict
                      ) -> tuple[dict[str, int], dict[str, str]]:
    """Per attribute, the index in `ids` (the text's tokens) of the token just before the
    attribute's value first appears in `text`; and why each other attribute has none:
    `not_found` (the value is not in the text as whole words), `before_name` (the value comes
    before the text first names the person in full, as in "Official paperwork gives October 2,
    1996 as the birth date for X": no hidden state there can know whom it is about) or
    `tokenization` (the text before the value does not tokenize into the first tokens of
    `ids`)."""
    name = full_name(person)
    named = text.find(name) + len(name) if name in text else len(text)
    found, missing = {}, {}
    for attribute in ATTRIBUTES:
        starts = [m.start() for value in _spellings(person, attribute)
                  if (m := re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text))]
        if not starts or min(starts) < named:
            missing[attribute] = "before_name" if starts else "not_found"
            continue
        # the prefix ends at the space before the value's word: words tokenize on their own
        cut = text.rfind(" ", 0, min(starts))
        prefix = tokenizer.encode(text[:cut]) if cut > 0 else []
        if not prefix or ids[: len(prefix)] != prefix:
            missing[attribute] = "tokenization"
            continue
        found[attribute] = len(prefix) - 1
    return found, missing


def _rows(context: EvalContext, docs: list[dict], kind: str
          ) -> tuple[list[list[int]], list[list[int]], list[tuple[int, str | None]], Counter]:
    """Token lists and positions to extract, one row per position as (document, attribute;
    None: every attribute), and the rows skipped by reason."""
    tokens, positions, rows, skipped = [], [], [], Counter()
    if kind == "q":
        for i, doc in enumerate(docs):
            tokens.append(context.tokenizer.encode(full_name(doc["person"])))
            positions.append([len(tokens[-1]) - 1])
            rows.append((i, None))
        return tokens, positions, rows, skipped
    limit = context.model.positional.max_positions or math.inf
    for i, doc in enumerate(docs):
        found, missing = special_positions(context.tokenizer, doc["text"], doc["ids"],
                                           doc["person"])
        skipped.update(missing.values())
        fits = {a: p for a, p in found.items() if p < limit}  # learned positions end at ctx
        skipped["too_long"] += len(found) - len(fits)
        tokens.append(doc["ids"])
        positions.append(list(fits.values()))
        rows += [(i, a) for a in fits]
    return tokens, positions, rows, skipped


def _accuracy(x_train: np.ndarray, y_train: list[str], x_test: np.ndarray,
              y_test: list[str], C: float) -> float:
    """Probe-test accuracy of a logistic regression fit on standardized probe-train features."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(set(y_train)) == 1:  # scikit-learn needs two classes; one class predicts itself
        return float(np.mean([y == y_train[0] for y in y_test]))
    # lbfgs fits one multinomial model over all classes; MAX_ITER caps it on purpose
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=MAX_ITER))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # many classes with few rows each is what probing a small population looks like
        warnings.filterwarnings("ignore", "The number of unique classes", UserWarning)
        probe.fit(x_train, y_train)
    return float(np.mean(probe.predict(x_test) == np.array(y_test)))


def probe_kind(context: EvalContext, docs: list[dict], kind: str, layers: list[int],
               test: np.ndarray, options: ProbeOptions) -> dict:
    """Accuracy per attribute and layer of one kind of probe; `test[i]`: document i's person is
    a probe-test person."""
    tokens, positions, rows, skipped = _rows(context, docs, kind)
    features = extract_features(context.model, tokens, positions, options.batch_size,
                                layers)  # [rows, layers, d_model]
    result: dict = {"layers": layers, "accuracy": {}, "chance": {}, "n_train": {}, "n_test": {},
                    "skipped": dict(+skipped)}  # +: no zero counts
    for attribute in ATTRIBUTES:
        mine = [r for r, (_, a) in enumerate(rows) if a in (attribute, None)]
        split = {side: [r for r in mine if test[rows[r][0]] == side] for side in (False, True)}
        y = {side: [label(docs[rows[r][0]]["person"], attribute) for r in split[side]]
             for side in split}
        result["n_train"][attribute], result["n_test"][attribute] = len(y[False]), len(y[True])
        if not y[False] or not y[True]:
            result["accuracy"][attribute], result["chance"][attribute] = [None] * len(layers), None
            continue
        most = Counter(y[False]).most_common(1)[0][0]
        result["chance"][attribute] = float(np.mean([v == most for v in y[True]]))
        # one BLAS thread: on probes this small, threads cost more than they save, and on a
        # busy machine they spin (fits ~10-50x slower measured on 2 loaded cores)
        with threadpool_limits(limits=1):
            result["accuracy"][attribute] = [
                _accuracy(features[split[False], j], y[False], features[split[True], j],
                          y[True], options.C) for j in range(len(layers))]
    return result


def summarize(results: dict) -> dict:
    """Best-layer accuracy per kind and attribute (`p_birth_date`, ...), their mean per kind
    (`p_mean`), and the layer that reached it (the lowest on a tie)."""
    summary, best_layer = {}, {}
    for kind in (k for k in KINDS if k in results):
        entry, best = results[kind], []
        for attribute, values in entry["accuracy"].items():
            scored = [(v, layer) for v, layer in zip(values, entry["layers"]) if v is not None]
            if scored:
                value, layer = max(scored, key=lambda pair: pair[0])
                summary[f"{kind}_{attribute}"], best_layer[f"{kind}_{attribute}"] = value, layer
                best.append(value)
        summary[f"{kind}_mean"] = float(np.mean(best)) if best else None
    return {"summary": summary, "best_layer": best_layer}


def _layers(n_layer: int, asked: list[int]) -> list[int]:
    for layer in asked:
        if layer > n_layer:
            raise ConfigError("eval.probe.layers", asked, f"layer {layer} does not exist: the "
                              f"model has layers 0-{n_layer} (0: the embeddings)")
    return sorted(asked) or list(range(n_layer + 1))


def run(context: EvalContext, options: ProbeOptions) -> dict:
    layers = _layers(context.model.config.n_layer, options.layers)
    docs = read_biographies(context.corpus_dir, options.max_people)
    if len(docs) < 2:
        raise TrainError(f"{context.corpus_dir}: {len(docs)} biographies found; {_NEEDS} "
                         "with at least 2 people")
    n_test = min(len(docs) - 1, max(1, round(options.test_fraction * len(docs))))
    test = np.zeros(len(docs), dtype=bool)
    test[np.random.default_rng(options.seed).permutation(len(docs))[:n_test]] = True
    results = {"people": {"train": len(docs) - n_test, "test": n_test}}
    results |= {kind: probe_kind(context, docs, kind, layers, test, options)
                for kind in options.kinds}
    return results | summarize(results)


def figure(results: dict) -> "Figure":
    """Heat maps of probe-test accuracy, layers (rows, 0 at the bottom) by attributes, one per
    kind side by side; each attribute's chance under its name."""
    from matplotlib.figure import Figure

    kinds = [k for k in KINDS if k in results]
    layers = results[kinds[0]]["layers"]
    fig = Figure(figsize=(6.2 * len(kinds) + 1.2, 0.42 * len(layers) + 2.8),
                 layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    for ax, kind in zip(axes, kinds):
        entry = results[kind]
        grid = np.array([[np.nan if v is None else v for v in entry["accuracy"][a]]
                         for a in ATTRIBUTES]).T  # [layers, attributes]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        for (row, col), value in np.ndenumerate(grid):
            ax.text(col, row, "n/a" if np.isnan(value) else f"{value:.2f}", ha="center",
                    va="center", fontsize=8, color="black" if value > 0.6 else "white")
        chance = [entry["chance"][a] for a in ATTRIBUTES]
        ax.set_xticks(range(len(ATTRIBUTES)))
        ax.set_xticklabels([a.replace("_", " ") + ("\nchance n/a" if c is None else
                                                   f"\nchance {c:.2f}")
                            for a, c in zip(ATTRIBUTES, chance)], fontsize=8)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels([str(layer) for layer in layers])
        ax.set_ylabel("layer (0: embeddings)")
        ax.set_title(TITLES[kind], fontsize=10)
    fig.colorbar(image, ax=list(axes), label="probe-test accuracy", shrink=0.9)
    people = results.get("people", {})
    run = f"{results['run']}, " if results.get("run") else ""
    fig.suptitle(f"Linear probes by layer and attribute ({run}step {results.get('step', '?')}; "
                 f"{people.get('train', '?')} probe-train / {people.get('test', '?')} "
                 "probe-test people)", fontsize=11)
    return fig


def plot(results: dict, path: Path) -> None:
    figure(results).savefig(path, dpi=120)


register(Task("probe", ProbeOptions, run, plot))
