"""Linear probing: at which layer, and whether, what the corpus knows can be read linearly off
the model's hidden states. One task for two corpus families, told apart by the corpus's manifest
(its family; a `grammar.json` beside it also marks a cfg corpus).

Bios (Part 3.1): a person's attributes.

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

CFG (Part 1, NT probing): the held-out strings of `eval/cfg_test.jsonl`, each read as a document
starts (BOS at position 0, terminal t at token t + 1), their parse trees rebuilt from the rule
choices the corpus recorded (`corpus_gen.cfg.sample.replay`). At the token of each probed terminal:
- ancestor: the symbol of the terminal's ancestor at nonterminal level l (the paper's NT{l+1});
- boundary: whether the terminal ends that ancestor's span.
Levels with a single symbol (the root) are skipped, for both kinds: NT2 .. NT6 for the depth-6
cfg3 grammars. The strings (not the positions) are split into probe-train and probe-test; per
kind, layer and level a logistic regression is fit and scored as for bios, chance being again the
majority class of probe-train.
"""

import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from corpus_gen.bios.people import ATTRIBUTES, MONTHS, full_name
from corpus_gen.cfg.grammar import Grammar, load_grammar
from corpus_gen.cfg.sample import Samples, replay
from corpus_gen.core.config import require
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer
from trainer.errors import TrainError
from trainer.eval.activations import extract_features
from trainer.eval.eval_sets import read_eval_set, verified_corpus_file
from trainer.eval.registry import EvalContext, Task, register

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("p", "q")  # bios
CFG_KINDS = ("ancestor", "boundary")
FAMILY_KINDS = {"bios": KINDS, "cfg": CFG_KINDS}
ALL_KINDS = KINDS + CFG_KINDS
TITLES = {"p": "P-probe: biography, token before each value", "q": "Q-probe: the name alone",
          "ancestor": "NT ancestor of the terminal at each position",
          "boundary": "NT boundary: the terminal ends the level's span"}
MAX_ITER = 300  # lbfgs iterations per probe: enough to settle accuracy, bounded on CPU
_NEEDS = "the probe task needs a bios corpus"
_FAMILIES = "the probe task needs a bios or cfg corpus"
CFG_SET = "cfg_test"
CFG_TEST = f"eval/{CFG_SET}.jsonl"
CFG_FIELDS = {"id": int, "text": str, "terminals": list, "rules": list}


@dataclass
class ProbeOptions:
    """The experiment's `eval.probe` group."""

    max_people: int = 1000  # bios: people probed, the first met in the stream (0: all)
    max_strings: int = 500  # cfg: strings probed, the first of eval/cfg_test.jsonl (0: all)
    positions_per_string: int = 20  # cfg: terminals probed per string, drawn (0: every one)
    # empty: every kind of the corpus's family (bios: p, q; cfg: ancestor, boundary)
    kinds: list[str] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)  # empty: 0 (embeddings) to n_layer
    test_fraction: float = 0.2  # share of the people (strings) the probes are scored on
    batch_size: int = 64  # documents per forward pass
    seed: int = 0  # the probe-train / probe-test split (and the positions drawn per string)
    C: float = 1.0  # inverse L2 strength of the logistic regression (scikit-learn's C)

    def validate(self) -> None:
        require(self.max_people >= 0 and self.max_people != 1, "max_people", self.max_people,
                "must be 0 (all) or >= 2: probes need probe-train and probe-test people")
        require(self.max_strings >= 0 and self.max_strings != 1, "max_strings",
                self.max_strings,
                "must be 0 (all) or >= 2: probes need probe-train and probe-test strings")
        require(self.positions_per_string >= 0, "positions_per_string",
                self.positions_per_string, "must be >= 0 (0: every terminal of a string)")
        require(len(set(self.kinds)) == len(self.kinds), "kinds", self.kinds,
                "names a kind twice")
        for kind in self.kinds:
            require(kind in ALL_KINDS, "kinds", kind, "must be p, q (bios corpus) or ancestor, "
                    "boundary (cfg corpus)")
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


def _context_limit(model) -> float:
    """Positions a model can read: learned positions end at its context; others do not."""
    return model.positional.max_positions or math.inf


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
    limit = _context_limit(context.model)
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


def _new_entry(layers: list[int], skipped: Counter) -> dict:
    """One kind's results, filled target by target (`_score`)."""
    return {"layers": layers, "accuracy": {}, "chance": {}, "n_train": {}, "n_test": {},
            "skipped": dict(+skipped)}  # +: no zero counts


def _score(entry: dict, target: str, features: np.ndarray, split: dict[bool, list[int]],
           y: dict[bool, list], C: float) -> None:
    """Into `entry`, under `target` (an attribute, an NT level): the probe-test accuracy per layer
    of probes fit on the rows `split[False]` of `features` [rows, layers, d_model] with labels
    `y[False]`, scored on `split[True]`, `y[True]`; chance; the row counts. None where a side has
    no rows."""
    entry["n_train"][target], entry["n_test"][target] = len(y[False]), len(y[True])
    if not y[False] or not y[True]:
        entry["accuracy"][target], entry["chance"][target] = [None] * features.shape[1], None
        return
    most = Counter(y[False]).most_common(1)[0][0]
    entry["chance"][target] = float(np.mean([v == most for v in y[True]]))
    # one BLAS thread: on probes this small, threads cost more than they save, and on a
    # busy machine they spin (fits ~10-50x slower measured on 2 loaded cores)
    with threadpool_limits(limits=1):
        entry["accuracy"][target] = [
            _accuracy(features[split[False], j], y[False], features[split[True], j], y[True], C)
            for j in range(features.shape[1])]


def probe_kind(context: EvalContext, docs: list[dict], kind: str, layers: list[int],
               test: np.ndarray, options: ProbeOptions) -> dict:
    """Accuracy per attribute and layer of one kind of probe; `test[i]`: document i's person is
    a probe-test person."""
    tokens, positions, rows, skipped = _rows(context, docs, kind)
    features = extract_features(context.model, tokens, positions, options.batch_size,
                                layers)  # [rows, layers, d_model]
    result = _new_entry(layers, skipped)
    for attribute in ATTRIBUTES:
        mine = [r for r, (_, a) in enumerate(rows) if a in (attribute, None)]
        split = {side: [r for r in mine if test[rows[r][0]] == side] for side in (False, True)}
        y = {side: [label(docs[rows[r][0]]["person"], attribute) for r in split[side]]
             for side in split}
        _score(result, attribute, features, split, y, options.C)
    return result


def summarize(results: dict) -> dict:
    """Best-layer accuracy per kind and attribute or NT level (`p_birth_date`, `ancestor_NT2`,
    ...), their mean per kind (`p_mean`), and the layer that reached it (the lowest on a
    tie)."""
    summary, best_layer = {}, {}
    for kind in (k for k in ALL_KINDS if k in results):
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


def _split(n: int, test_fraction: float, seed: int) -> np.ndarray:
    """A seeded probe-test mask over n >= 2 items, at least one on each side."""
    n_test = min(n - 1, max(1, round(test_fraction * n)))
    test = np.zeros(n, dtype=bool)
    test[np.random.default_rng(seed).permutation(n)[:n_test]] = True
    return test


def corpus_family(corpus_dir: Path) -> str:
    """bios or cfg: the manifest's family, or cfg where a grammar.json lies beside it."""
    family = read_manifest(corpus_dir).get("family")
    if family not in FAMILY_KINDS and (corpus_dir / "grammar.json").is_file():
        family = "cfg"
    if family not in FAMILY_KINDS:
        raise TrainError(f"{corpus_dir}: a {family} corpus; {_FAMILIES}")
    return family


def _kinds(family: str, asked: list[str]) -> list[str]:
    mine = FAMILY_KINDS[family]
    for kind in asked:
        if kind not in mine:
            raise ConfigError("eval.probe.kinds", asked, f"{kind} is no probe of a {family} "
                              f"corpus: it has {', '.join(mine)}")
    return list(asked) or list(mine)


def run(context: EvalContext, options: ProbeOptions) -> dict:
    layers = _layers(context.model.config.n_layer, options.layers)
    family = corpus_family(context.corpus_dir)
    kinds = _kinds(family, options.kinds)
    if family == "cfg":
        return run_cfg(context, options, layers, kinds)
    docs = read_biographies(context.corpus_dir, options.max_people)
    if len(docs) < 2:
        raise TrainError(f"{context.corpus_dir}: {len(docs)} biographies found; {_NEEDS} "
                         "with at least 2 people")
    test = _split(len(docs), options.test_fraction, options.seed)
    results = {"people": {"train": int((~test).sum()), "test": int(test.sum())}}
    results |= {kind: probe_kind(context, docs, kind, layers, test, options) for kind in kinds}
    return results | summarize(results)


def read_cfg_strings(corpus_dir: Path, max_strings: int) -> tuple[Grammar, list[dict], Samples]:
    """The corpus's grammar, the first `max_strings` (0: all) rows of its held-out strings
    (id, text, terminals, rules) and their parse trees' labels (`Samples.labels`, positions of
    the strings back to back)."""
    path, held_out = corpus_dir / "grammar.json", corpus_dir / CFG_TEST
    needs = (f"{_FAMILIES} with its grammar and held-out strings (eval_samples >= 2); run "
             f"physlm verify {corpus_dir}")
    verified_corpus_file(corpus_dir, path, needs)
    rows = read_eval_set(corpus_dir, CFG_SET, CFG_FIELDS, needs)
    grammar = load_grammar(str(path))
    strings = list(islice(rows, max_strings or None))
    try:
        samples = replay(grammar, [s["rules"] for s in strings], labels=True)
    except (KeyError, ValueError) as exc:
        raise TrainError(f"{held_out}: rule choices that do not fit {path} ({exc})") from None
    for i, string in enumerate(strings):
        if samples.string(i).tolist() != string["terminals"]:
            raise TrainError(f"{held_out}: string {string['id']}: its rule choices derive other "
                             f"terminals than it lists; is {path} its grammar?")
    return grammar, strings, samples


def _cfg_rows(context: EvalContext, strings: list[dict], samples: Samples,
              options: ProbeOptions) -> tuple[list[list[int]], list[list[int]], np.ndarray,
                                              np.ndarray, Counter]:
    """Token lists and the tokens to extract (terminal t of a string is token t + 1), up to
    `positions_per_string` terminals a string (drawn, seeded by the string's row), only those
    within the model's context; per row, its string (row of `strings`) and its terminal's index
    in the labels (strings back to back); the terminals skipped by reason."""
    limit = _context_limit(context.model)
    cap = options.positions_per_string
    tokens, positions, owners, flat, skipped = [], [], [], [], Counter()
    for i, string in enumerate(strings):
        ids = context.tokenizer.encode(string["text"])
        n = len(string["terminals"])
        if len(ids) != n + 1:
            raise TrainError(f"{context.corpus_dir / CFG_TEST}: string {string['id']} tokenizes "
                             f"into {len(ids)} tokens, not {n + 1} (BOS and one per terminal)")
        usable = min(n, limit - 1)  # terminal t at token t + 1 < limit
        skipped["too_long"] += n - usable
        picked = np.arange(usable)
        if cap and usable > cap:
            picked = np.sort(np.random.default_rng([options.seed, i]).choice(usable, cap,
                                                                             replace=False))
        tokens.append(ids)
        positions.append((picked + 1).tolist())
        owners.append(np.full(len(picked), i))
        flat.append(samples.offsets[i] + picked)
    return (tokens, positions, np.concatenate(owners).astype(np.int64),
            np.concatenate(flat).astype(np.int64), skipped)


def nt_levels(grammar: Grammar) -> list[int]:
    """The nonterminal levels probed: those of more than one symbol (not the root's)."""
    return [level for level in range(grammar.depth) if grammar.sizes[level] > 1]


def nt_name(level: int) -> str:
    """The paper's name of nonterminal level `level` (0: the root, NT1)."""
    return f"NT{level + 1}"


def run_cfg(context: EvalContext, options: ProbeOptions, layers: list[int], kinds: list[str]
            ) -> dict:
    grammar, strings, samples = read_cfg_strings(context.corpus_dir, options.max_strings)
    if len(strings) < 2:
        raise TrainError(f"{context.corpus_dir / CFG_TEST}: {len(strings)} strings; the probe "
                         "task needs at least 2 (probe-train and probe-test)")
    levels = nt_levels(grammar)
    if not levels:
        raise TrainError(f"{context.corpus_dir / 'grammar.json'}: no nonterminal level has more "
                         "than one symbol: nothing to probe")
    test = _split(len(strings), options.test_fraction, options.seed)
    tokens, positions, owners, flat, skipped = _cfg_rows(context, strings, samples, options)
    features = extract_features(context.model, tokens, positions, options.batch_size,
                                layers)  # [rows, layers, d_model]
    split = {side: np.flatnonzero(test[owners] == side).tolist() for side in (False, True)}
    results: dict = {"grammar": grammar.name,
                     "strings": {"train": int((~test).sum()), "test": int(test.sum())},
                     "positions": {"train": len(split[False]), "test": len(split[True])}}
    for kind in kinds:
        entry = results[kind] = _new_entry(layers, skipped)
        table = samples.labels.ancestor if kind == "ancestor" else samples.labels.boundary
        for level in levels:
            values = table[level][flat].astype(np.int64)
            y = {side: values[split[side]].tolist() for side in split}
            _score(entry, nt_name(level), features, split, y, options.C)
    return results | summarize(results)


def figure(results: dict) -> "Figure":
    """Heat maps of probe-test accuracy, layers (rows, 0 at the bottom) by attributes (bios) or
    NT levels (cfg), one per kind side by side; each column's chance under its name."""
    from matplotlib.figure import Figure

    kinds = [k for k in ALL_KINDS if k in results]
    layers = results[kinds[0]]["layers"]
    fig = Figure(figsize=(6.2 * len(kinds) + 1.2, 0.42 * len(layers) + 2.8),
                 layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    for ax, kind in zip(axes, kinds):
        entry = results[kind]
        columns = list(entry["accuracy"])  # attributes (bios) or NT levels (cfg)
        grid = np.array([[np.nan if v is None else v for v in entry["accuracy"][a]]
                         for a in columns]).T  # [layers, columns]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        for (row, col), value in np.ndenumerate(grid):
            ax.text(col, row, "n/a" if np.isnan(value) else f"{value:.2f}", ha="center",
                    va="center", fontsize=8, color="black" if value > 0.6 else "white")
        chance = [entry["chance"][a] for a in columns]
        ax.set_xticks(range(len(columns)))
        ax.set_xticklabels([a.replace("_", " ") + ("\nchance n/a" if c is None else
                                                   f"\nchance {c:.2f}")
                            for a, c in zip(columns, chance)], fontsize=8)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels([str(layer) for layer in layers])
        ax.set_ylabel("layer (0: embeddings)")
        ax.set_title(TITLES[kind], fontsize=10)
    fig.colorbar(image, ax=list(axes), label="probe-test accuracy", shrink=0.9)
    cfg = "strings" in results
    probed = results.get("strings" if cfg else "people", {})
    run = f"{results['run']}, " if results.get("run") else ""
    grammar = f"{results['grammar']}, " if results.get("grammar") else ""
    positions = results.get("positions", {})
    fig.suptitle(f"Linear probes by layer and {'NT level' if cfg else 'attribute'} ({grammar}"
                 f"{run}step {results.get('step', '?')}; {probed.get('train', '?')} probe-train "
                 f"/ {probed.get('test', '?')} probe-test {'strings' if cfg else 'people'}"
                 + (f", {positions.get('train', '?')} / {positions.get('test', '?')} positions)"
                    if cfg else ")"), fontsize=11)
    return fig


def plot(results: dict, path: Path) -> None:
    figure(results).savefig(path, dpi=120)


register(Task("probe", ProbeOptions, run, plot))
