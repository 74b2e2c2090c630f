"""The mano family: documents "<bos> len<l> <prefix expression> = a" over a fixed vocabulary,
the loss on "=" and the answer only, and the `mano_test` rows (every l in 1..L).

Expression i of a stream is a pure function of (seed, stream, i) (expressions.py); a training
draw that is a test instance (the same expression, synonyms collapsed) is drawn again, so no
`mano_test` expression is ever trained on.
"""

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from corpus_gen.core.records import BATCH, Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.mano.config import OPERATORS, ManoConfig

BOS, ANSWER = "<bos>", "="
BLOCK = 16 * BATCH  # documents drawn together
SYNONYMS = {"+": ("+", "plus"), "-": ("-", "minus"), "*": ("*", "times"), "/": ("/", "over")}


@dataclass(frozen=True)
class Tokens:
    """The token ids of one vocabulary (EOS is 0, so unit i is token i + 1)."""

    names: tuple[str, ...]
    units: Units  # every name but EOS: one per token, one table per vocabulary
    length: int  # id of len1 (len<l> is length + l - 1)
    # (p + 4, 2): the id of expression code c (number c, or operator OPERATORS[c - p]) written
    # with synonym s; -1 for an operator not used
    code: np.ndarray
    answer: int  # id of "="


@functools.lru_cache(maxsize=16)
def tokens(max_ops: int, operators: str, modulus: int) -> Tokens:
    names = [EOS, BOS, *(f"len{n}" for n in range(1, max_ops + 1))]
    operator = np.full((len(OPERATORS), 2), -1, dtype=np.int64)
    for op in operators:
        operator[OPERATORS.index(op)] = [len(names), len(names) + 1]
        names += SYNONYMS[op]
    numbers = np.arange(len(names), len(names) + modulus)
    names += [*map(str, range(modulus)), ANSWER]
    code = np.concatenate([np.stack([numbers, numbers], 1), operator])
    return Tokens(tuple(names), Units(names[1:]), 2, code, len(names) - 1)


def _tokens(config: ManoConfig) -> Tokens:
    return tokens(config.max_ops, config.operators(), config.modulus)


def vocabulary(config: ManoConfig) -> tuple[str, ...]:
    return _tokens(config).names


def layout(config: ManoConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "max_ops": config.max_ops, "modulus": config.modulus})


def _test_ops(config: ManoConfig, index: np.ndarray) -> np.ndarray:
    """Test row i has l = i // eval_samples + 1: eval_samples rows per l."""
    return index // config.eval_samples + 1


def _arguments(config: ManoConfig, stream: str) -> tuple:
    """`expressions.draw`'s and `documents`' key and shape arguments for a stream."""
    return derive_key(config.seed, "mano", stream), config.operators(), config.modulus, \
        config.max_ops


@functools.lru_cache(maxsize=4)
def _test_instances(seed: int, max_ops: int, operators: str, modulus: int,
                    eval_samples: int) -> np.ndarray:
    """The sorted instance hashes of every `mano_test` expression."""
    from corpus_gen.mano import expressions  # numba: paid when expressions are drawn

    config = ManoConfig(seed=seed, max_ops=max_ops, ops=operators, modulus=modulus,
                        eval_samples=eval_samples)
    index = np.arange(max_ops * eval_samples)
    key, *shape = _arguments(config, "test")
    return np.unique(expressions.draw(key, index, _test_ops(config, index), *shape).instance)


def _documents(config: ManoConfig, stream: str, index: np.ndarray, ops: np.ndarray,
               unit: int, avoid: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`expressions.documents` of the stream, in token ids less `unit` (1: unit ids, unit i
    is token i + 1)."""
    from corpus_gen.mano import expressions  # numba, as in _test_instances

    table = _tokens(config)
    spelling = expressions.Spelling(table.code - unit, table.names.index(BOS) - unit,
                                    table.length - unit, table.answer - unit)
    key, *shape = _arguments(config, stream)
    return expressions.documents(key, index, ops, *shape, spelling, avoid)


@functools.lru_cache(maxsize=16)
def _metas(max_ops: int, modulus: int) -> np.ndarray:
    """The meta of each (l, value), at (l - 1) * p + value."""
    return np.array([f'{{"ops":{o},"value":{v}}}' for o in range(1, max_ops + 1)
                     for v in range(modulus)], dtype=object)


def batches(config: ManoConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    """Drawn and handed out BLOCK documents at a time: each call then spans many documents, and
    a block of mano's short documents (~130k tokens) costs the writer its per-batch steps once."""
    from corpus_gen.mano import expressions  # numba, as in _test_instances

    table = _tokens(config)
    avoid = _test_instances(config.seed, config.max_ops, config.operators(), config.modulus,
                            config.eval_samples)
    ops_key = derive_key(config.seed, "mano", "train", "ops")
    metas = _metas(config.max_ops, config.modulus)
    for lo in range(start, stop, BLOCK):
        index = np.arange(lo, min(lo + BLOCK, stop))
        ops = expressions.operator_counts(ops_key, index, config.max_ops)  # l ~ U{1..L}
        ids, offsets, value = _documents(config, "train", index, ops, 1, avoid)
        loss = np.zeros(len(ids), dtype=np.uint8)  # "=" and the answer: each document's last two
        loss[offsets[1:] - 1] = loss[offsets[1:] - 2] = 1
        yield UnitBatch(table.units, ids, offsets,
                        metas[(ops - 1) * config.modulus + value].tolist(), loss)


def records(config: ManoConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: ManoConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"mano_test": lambda: _rows(config)}


def _rows(config: ManoConfig) -> Iterator[dict]:
    """`eval_samples` test expressions per l = 1..L, l ascending."""
    names = _tokens(config).names
    # each token's readable symbol: an operator's, whichever synonym writes it
    symbols = [{word: op for op, words in SYNONYMS.items() for word in words}.get(name, name)
               for name in names]
    for lo in range(0, config.max_ops * config.eval_samples, BATCH):
        index = np.arange(lo, min(lo + BATCH, config.max_ops * config.eval_samples))
        ops = _test_ops(config, index)
        ids, offsets, value = _documents(config, "test", index, ops, 0)
        ids, bounds = ids.tolist(), offsets.tolist()
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            doc = ids[a:b]
            yield {"id": int(index[i]), "prompt": doc[:-1], "answer": doc[-1:],
                   "text": " ".join(names[t] for t in doc), "ops": int(ops[i]),
                   "expression": " ".join(symbols[t] for t in doc[2:-2]),
                   "value": int(value[i])}
