"""Linear probing: at which layer, and whether, what a corpus holds can be read linearly off the
model's hidden states. The task knows no corpus family: the corpus's family (its manifest's
`family`) supplies its probes through its registration (`Family.probe_targets`, a `ProbeSpec` of
corpus_gen/core/probe_targets.py): the kinds of probe, its own options, and for the corpus the
token lists, the positions read and their labels per column (corpus_gen/bios/probe_targets.py:
attributes of people, Part 3.1; corpus_gen/cfg/probe_targets.py: NT levels of held-out strings,
Part 1). A corpus whose family registers none is refused.

Per kind, layer (0: the embeddings, l: after block l) and column, a logistic regression on
standardized features of the rows of probe-train subjects (a seeded split of the people,
strings, ...) is scored on the rows of probe-test subjects. Chance: the most frequent
probe-train label's share of the probe-test rows.

No torch at import: reading an experiment imports every task module for its options, so
extraction (trainer.eval.activations) is imported where it runs.
"""

import dataclasses
import functools
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from corpus_gen.core.config import require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.probe_targets import KindTargets, ProbeRequest, ProbeSpec, Reading
from corpus_gen.core.registry import families
from trainer.errors import TrainError
from trainer.eval.eval_sets import read_eval_set, verified_corpus_file
from trainer.eval.registry import Task, register

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from trainer.eval.registry import EvalContext

MAX_ITER = 300  # lbfgs iterations per probe: enough to settle accuracy, bounded on CPU


def probe_specs() -> dict[str, ProbeSpec]:
    """The families that register probe targets, by name."""
    return {name: family.probe_targets for name, family in sorted(families().items())
            if family.probe_targets is not None}


@dataclass
class CommonOptions:
    """The task's own fields of the experiment's `eval.probe` group (the families' follow)."""

    kinds: list[str] = field(default_factory=list)  # empty: every kind of the corpus's family
    layers: list[int] = field(default_factory=list)  # empty: 0 (embeddings) to n_layer
    test_fraction: float = 0.2  # share of the subjects (people, strings) scored on
    batch_size: int = 64  # documents per forward pass
    seed: int = 0  # the probe-train / probe-test split (and what a family draws)
    C: float = 1.0  # inverse L2 strength of the logistic regression (scikit-learn's C)

    def validate(self) -> None:
        require(len(set(self.kinds)) == len(self.kinds), "kinds", self.kinds,
                "names a kind twice")
        specs = probe_specs()
        for kind in self.kinds:
            require(any(kind in spec.kinds for spec in specs.values()), "kinds", kind,
                    "must be " + " or ".join(f"{', '.join(spec.kinds)} ({name} corpus)"
                                             for name, spec in specs.items()))
        for layer in self.layers:
            require(layer >= 0, "layers", layer, "must be >= 0 (0: the embeddings)")
        require(len(set(self.layers)) == len(self.layers), "layers", self.layers,
                "names a layer twice")
        require(0 < self.test_fraction < 1, "test_fraction", self.test_fraction,
                "must be in (0, 1)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be >= 1")
        require(0 < self.C < math.inf, "C", self.C, "must be > 0 and finite")


def _copy(option: dataclasses.Field) -> tuple[str, Any, dataclasses.Field]:
    default = ({"default_factory": option.default_factory}
               if option.default is dataclasses.MISSING else {"default": option.default})
    return option.name, option.type, field(**default)


def options_schema() -> type:
    """The `eval.probe` group: each family's probe options (families by name), then the task's
    own; validated by each of them. Built when this module is imported, from the families
    registered then."""
    parts = {f"the {name} family": spec.options for name, spec in probe_specs().items()
             if spec.options is not None} | {"the probe task": CommonOptions}
    fields, owners = [], {}
    for owner, schema in parts.items():
        for option in dataclasses.fields(schema):
            if option.name in owners:
                raise ValueError(f"eval.probe.{option.name}: an option of {owners[option.name]} "
                                 f"and of {owner}")
            owners[option.name] = owner
            fields.append(_copy(option))

    def validate(self: Any) -> None:  # each part reads its own fields of the whole group
        for schema in parts.values():
            schema.validate(self)

    return dataclasses.make_dataclass("ProbeOptions", fields, namespace={
        "validate": validate, "__doc__": "The experiment's `eval.probe` group.",
        "__module__": __name__})  # found by name where it is pickled, as ProbeOptions


ProbeOptions = options_schema()


def family_probes(corpus_dir: Path) -> tuple[str, ProbeSpec]:
    """The corpus's family and its probes; a TrainError naming the family when it has none."""
    name = read_manifest(corpus_dir).get("family")
    family = families().get(name)
    if family is None or family.probe_targets is None:
        raise TrainError(f"{corpus_dir}: a {name} corpus, whose family registers no probe "
                         f"targets; the probe task reads {' or '.join(probe_specs())} corpora")
    return name, family.probe_targets


def probe_request(context: "EvalContext", options: Any, kinds: list[str]) -> ProbeRequest:
    """What the family's targets are asked for: the corpus, read as every task reads it."""
    corpus_dir = context.corpus_dir
    return ProbeRequest(corpus_dir, context.tokenizer, options, kinds,
                        context.model.positional.max_positions or None,
                        functools.partial(read_eval_set, corpus_dir),
                        functools.partial(verified_corpus_file, corpus_dir))


def _accuracy(x_train: np.ndarray, y_train: list, x_test: np.ndarray, y_test: list,
              C: float) -> float:
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


def _score(entry: dict, column: str, features: np.ndarray, split: dict[bool, list[int]],
           y: dict[bool, list], C: float) -> None:
    """Into `entry`, under `column` (an attribute, an NT level): the probe-test accuracy per
    layer of probes fit on the rows `split[False]` of `features` [rows, layers, d_model] with
    labels `y[False]`, scored on `split[True]`, `y[True]`; chance; the row counts. None where a
    side has no rows."""
    entry["n_train"][column], entry["n_test"][column] = len(y[False]), len(y[True])
    if not y[False] or not y[True]:
        entry["accuracy"][column], entry["chance"][column] = [None] * features.shape[1], None
        return
    most = Counter(y[False]).most_common(1)[0][0]
    entry["chance"][column] = float(np.mean([v == most for v in y[True]]))
    # one BLAS thread: on probes this small, threads cost more than they save, and on a
    # busy machine they spin (fits ~10-50x slower measured on 2 loaded cores)
    with threadpool_limits(limits=1):
        entry["accuracy"][column] = [
            _accuracy(features[split[False], j], y[False], features[split[True], j], y[True], C)
            for j in range(features.shape[1])]


def _owners(reading: Reading) -> np.ndarray:
    """Per row of the reading's features, its document (subject)."""
    return np.repeat(np.arange(len(reading.positions)), [len(p) for p in reading.positions])


def probe_kind(targets: KindTargets, reading: Reading, features: np.ndarray, layers: list[int],
               test: np.ndarray, C: float) -> dict:
    """Accuracy per column and layer of one kind of probe; `test[i]`: subject i is a probe-test
    subject."""
    owners = _owners(reading)
    entry = {"layers": layers, "accuracy": {}, "chance": {}, "n_train": {}, "n_test": {},
             "skipped": dict(targets.skipped)}
    for column, labels in targets.labels.items():
        mine = [r for r, value in enumerate(labels) if value is not None]
        split = {side: [r for r in mine if test[owners[r]] == side] for side in (False, True)}
        y = {side: [labels[r] for r in split[side]] for side in split}
        _score(entry, column, features, split, y, C)
    return entry


def summarize(results: dict, kinds: list[str]) -> dict:
    """Best-layer accuracy per kind and column (`p_birth_date`, `ancestor_NT2`, ...), their
    mean per kind (`p_mean`), and the layer that reached it (the lowest on a tie)."""
    summary, best_layer = {}, {}
    for kind in kinds:
        entry, best = results[kind], []
        for column, values in entry["accuracy"].items():
            scored = [(v, layer) for v, layer in zip(values, entry["layers"]) if v is not None]
            if scored:
                value, layer = max(scored, key=lambda pair: pair[0])
                summary[f"{kind}_{column}"], best_layer[f"{kind}_{column}"] = value, layer
                best.append(value)
        summary[f"{kind}_mean"] = float(np.mean(best)) if best else None
    return {"summary": summary, "best_layer": best_layer}


def _layers(n_layer: int, asked: list[int]) -> list[int]:
    for layer in asked:
        if layer > n_layer:
            raise ConfigError("eval.probe.layers", asked, f"layer {layer} does not exist: the "
                              f"model has layers 0-{n_layer} (0: the embeddings)")
    return sorted(asked) or list(range(n_layer + 1))


def _kinds(family: str, spec: ProbeSpec, asked: list[str]) -> list[str]:
    mine = list(spec.kinds)
    for kind in asked:
        if kind not in mine:
            raise ConfigError("eval.probe.kinds", asked, f"{kind} is no probe of a {family} "
                              f"corpus: it has {', '.join(mine)}")
    return list(asked) or mine


def _split(n: int, test_fraction: float, seed: int) -> np.ndarray:
    """A seeded probe-test mask over n >= 2 items, at least one on each side."""
    n_test = min(n - 1, max(1, round(test_fraction * n)))
    test = np.zeros(n, dtype=bool)
    test[np.random.default_rng(seed).permutation(n)[:n_test]] = True
    return test


def _sides(mask: np.ndarray) -> dict[str, int]:
    return {"train": int((~mask).sum()), "test": int(mask.sum())}


def run(context: "EvalContext", options: Any) -> dict:
    from trainer.eval.activations import extract_features  # torch: see the module's docstring

    layers = _layers(context.model.config.n_layer, options.layers)
    family, spec = family_probes(context.corpus_dir)
    kinds = _kinds(family, spec, options.kinds)
    targets = spec.targets(probe_request(context, options, kinds))
    readings = {kind: targets.kinds[kind].reading or targets.reading for kind in kinds}
    n = len(readings[kinds[0]].documents)
    if n < 2:
        raise TrainError(f"{context.corpus_dir}: {n} {targets.subjects} to probe; the probe "
                         "task needs at least 2 (probe-train and probe-test)")
    test = _split(n, options.test_fraction, options.seed)
    results: dict = {**targets.facts, targets.subjects: _sides(test)}
    if targets.reading is not None:
        results["positions"] = _sides(test[_owners(targets.reading)])
    features: dict[int, np.ndarray] = {}  # per reading (by id): kinds may share one
    for kind in kinds:
        reading = readings[kind]
        if id(reading) not in features:
            features[id(reading)] = extract_features(
                context.model, reading.documents, reading.positions, options.batch_size,
                layers)  # [rows, layers, d_model]
        results[kind] = probe_kind(targets.kinds[kind], reading, features[id(reading)], layers,
                                   test, options.C)
    # what the heat maps say (plot reads the results alone), kinds in the family's order
    titles = {kind: title for kind, title in spec.kinds.items() if kind in kinds}
    results["about"] = {"subjects": targets.subjects, "columns": targets.columns,
                        "titles": titles, "facts": list(targets.facts)}
    return results | summarize(results, list(titles))


def figure(results: dict) -> "Figure":
    """Heat maps of probe-test accuracy, layers (rows, 0 at the bottom) by columns (attributes,
    NT levels), one per kind side by side; each column's chance under its name."""
    from matplotlib.figure import Figure

    about = results["about"]
    kinds = list(about["titles"])
    layers = results[kinds[0]]["layers"]
    fig = Figure(figsize=(6.2 * len(kinds) + 1.2, 0.42 * len(layers) + 2.8),
                 layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    for ax, kind in zip(axes, kinds):
        entry = results[kind]
        columns = list(entry["accuracy"])
        grid = np.array([[np.nan if v is None else v for v in entry["accuracy"][c]]
                         for c in columns]).T  # [layers, columns]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        for (row, col), value in np.ndenumerate(grid):
            ax.text(col, row, "n/a" if np.isnan(value) else f"{value:.2f}", ha="center",
                    va="center", fontsize=8, color="black" if value > 0.6 else "white")
        chance = [entry["chance"][c] for c in columns]
        ax.set_xticks(range(len(columns)))
        ax.set_xticklabels([c.replace("_", " ") + ("\nchance n/a" if p is None else
                                                   f"\nchance {p:.2f}")
                            for c, p in zip(columns, chance)], fontsize=8)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels([str(layer) for layer in layers])
        ax.set_ylabel("layer (0: embeddings)")
        ax.set_title(about["titles"][kind], fontsize=10)
    fig.colorbar(image, ax=list(axes), label="probe-test accuracy", shrink=0.9)
    subjects, positions = results[about["subjects"]], results.get("positions")
    named = "".join(f"{results[fact]}, " for fact in about["facts"])
    run = f"{results['run']}, " if results.get("run") else ""
    fig.suptitle(f"Linear probes by layer and {about['columns']} ({named}{run}step "
                 f"{results.get('step', '?')}; {subjects['train']} probe-train / "
                 f"{subjects['test']} probe-test {about['subjects']}"
                 + (f", {positions['train']} / {positions['test']} positions)" if positions
                    else ")"), fontsize=11)
    return fig


def plot(results: dict, path: Path) -> None:
    figure(results).savefig(path, dpi=120)


register(Task("probe", ProbeOptions, run, plot))
