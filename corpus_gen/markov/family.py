"""The markov family: documents of T tokens "0" .. "A-1" drawn from a Markov chain, every token in
the loss, the analytic references (references.py) in the layout summary and `references.json`,
and the `markov_test` rows (sequences with their tables).

Sequence i of a stream is a pure function of (seed, stream, i) (chains.py). A switching or fixed
chain shares one table, which `references.json` holds; a fresh chain's table is each document's
meta (and each test row's)."""

import functools
import json
from collections.abc import Callable, Iterator

import numpy as np

from corpus_gen.core.records import BATCH, Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.markov.config import MarkovConfig
from corpus_gen.markov.references import fixed_references, fresh_references, stationary

REFERENCES = "references.json"
DIGITS = 4  # the summary's references, in nats


@functools.lru_cache(maxsize=8)
def _units(alphabet: int) -> Units:
    return Units([str(a) for a in range(alphabet)])


def vocabulary(config: MarkovConfig) -> tuple[str, ...]:
    """<eos> then the tokens: token a + 1 is symbol a (unit a)."""
    return (EOS, *_units(config.alphabet).strings.tolist())


def _key(config: MarkovConfig, stream: str) -> int:
    return derive_key(config.seed, "markov", stream)


def shared_table(config: MarkovConfig) -> np.ndarray | None:
    """(S, A): the table every sequence follows, or None for fresh tables."""
    if config.table == "switching":
        return np.array([[1 - config.p, config.p], [config.q, 1 - config.q]])
    if config.table == "fixed":
        from corpus_gen.markov import chains  # numba: paid when tables are drawn

        return chains.dirichlet_table(_key(config, "table"), config.contexts(),
                                      config.alphabet, config.beta)
    return None


def initial_law(config: MarkovConfig, table: np.ndarray | None) -> np.ndarray:
    """(S,): the law of the first k-gram."""
    if config.initial == "stationary":
        return stationary(table)
    return np.full(config.contexts(), 1.0 / config.contexts())


def draw(config: MarkovConfig, stream: str, index: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray | None]:
    """Sequences `index` of a stream: (tokens (B, T) int64 symbols, tables (B, S, A) or None)."""
    from corpus_gen.markov import chains  # numba, as in shared_table

    table = _table(config)
    return chains.sequences(_key(config, stream), index, config.seq_len, config.order,
                            initial_law(config, table), table, config.alphabet, config.beta)


def _by_config(compute: Callable) -> Callable:
    """`compute(config)` remembered per config (its repr names every key: dataclasses are not
    hashable)."""
    found: dict[str, object] = {}

    def cached(config: MarkovConfig):
        key = repr(config)
        if key not in found:
            found[key] = compute(config)
        return found[key]
    return cached


_table = _by_config(shared_table)


@_by_config
def _references(config: MarkovConfig) -> dict[str, float]:
    table = _table(config)
    if table is not None:
        return fixed_references(table, initial_law(config, table), config.seq_len,
                                config.order)
    return fresh_references(*draw(config, "references", np.arange(config.reference_samples)),
                            config)


def references(config: MarkovConfig) -> dict[str, float]:
    """The analytic references (references.py), to 10 decimals: the last bits of a float can
    differ from one machine's maths library to another's, the corpus's bytes may not."""
    return {name: round(value, 10) for name, value in _references(config).items()}


def layout(config: MarkovConfig) -> Layout:
    summary = {"samples": config.samples, "eval_samples": config.eval_samples,
               "seq_len": config.seq_len, "order": config.order, "alphabet": config.alphabet}
    summary.update({f"{name}_nats": round(value, DIGITS)
                    for name, value in references(config).items()})
    return Layout(records=config.samples, summary=summary)


def files(config: MarkovConfig) -> dict[str, bytes]:
    """`references.json`: the references, how they were computed, and the shared table."""
    table = _table(config)
    monte_carlo = {"stream": "references", "sequences": config.reference_samples,
                   "seed": config.seed} if table is None else None
    text = json.dumps({"nats_per_token": references(config),
                       "positions": [config.order, config.seq_len - 1],
                       "monte_carlo": monte_carlo,
                       "table": None if table is None else table.round(10).tolist(),
                       "initial": None if table is None
                       else initial_law(config, table).round(10).tolist()},
                      indent=1)
    return {REFERENCES: (text + "\n").encode()}


def _metas(config: MarkovConfig, tables: np.ndarray | None, count: int) -> list[str]:
    """Each document's meta: its table (fresh), or the name of the shared one."""
    if tables is None:
        return [f'{{"table":"{config.table}"}}'] * count
    _, contexts, alphabet = tables.shape
    row = "[" + ",".join(["%.6f"] * alphabet) + "]"
    spelled = '{"table":[' + ",".join([row] * contexts) + "]}"  # one % per document: fast
    return [spelled % tuple(doc) for doc in tables.reshape(len(tables), -1).tolist()]


def batches(config: MarkovConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    """BATCH sequences at a time: unit a is symbol a, every token in the loss."""
    units = _units(config.alphabet)
    for lo in range(start, stop, BATCH):
        index = np.arange(lo, min(lo + BATCH, stop))
        tokens, tables = draw(config, "train", index)
        offsets = np.arange(len(index) + 1, dtype=np.int64) * config.seq_len
        yield UnitBatch(units, tokens.ravel(), offsets, _metas(config, tables, len(index)))


def records(config: MarkovConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: MarkovConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"markov_test": lambda: _rows(config)}


def _rows(config: MarkovConfig) -> Iterator[dict]:
    """`eval_samples` sequences of the stream "test", each with its table (S, A); `symbols`
    are the sequence's symbols (symbol a is token a + 1 of the vocabulary)."""
    shared = _table(config)
    for lo in range(0, config.eval_samples, BATCH):
        index = np.arange(lo, min(lo + BATCH, config.eval_samples))
        tokens, tables = draw(config, "test", index)
        for i, sequence in enumerate(tokens.tolist()):
            table = shared if tables is None else tables[i]
            yield {"id": int(index[i]), "text": " ".join(map(str, sequence)),
                   "symbols": sequence, "order": config.order,
                   "table": table.round(10).tolist()}  # machine-independent bytes
