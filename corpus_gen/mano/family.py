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
from corpus_gen.core.seeding import derive_key, randint
from corpus_gen.core.vocabulary import EOS
from corpus_gen.mano import expressions
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
    operator: np.ndarray  # (4, 2): id of OPERATORS[k] written with synonym s, -1 if not used
    number: int  # id of number 0
    answer: int  # id of "="


@functools.lru_cache(maxsize=16)
def tokens(max_ops: int, operators: str, modulus: int) -> Tokens:
    names = [EOS, BOS, *(f"len{n}" for n in range(1, max_ops + 1))]
    operator = np.full((len(OPERATORS), 2), -1, dtype=np.int64)
    for op in operators:
        operator[OPERATORS.index(op)] = [len(names), len(names) + 1]
        names += SYNONYMS[op]
    number = len(names)
    names += [*map(str, range(modulus)), ANSWER]
    return Tokens(tuple(names), Units(names[1:]), 2, operator, number, len(names) - 1)


def _tokens(config: ManoConfig) -> Tokens:
    return tokens(config.max_ops, config.operators(), config.modulus)


def vocabulary(config: ManoConfig) -> tuple[str, ...]:
    return _tokens(config).names


def layout(config: ManoConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "max_ops": config.max_ops, "modulus": config.modulus})


def _draw(config: ManoConfig, stream: str, index: np.ndarray, ops: np.ndarray,
          avoid: np.ndarray | None = None) -> expressions.Expressions:
    return expressions.draw(derive_key(config.seed, "mano", stream), index, ops,
                            config.operators(), config.modulus, config.max_ops, avoid)


def _test_ops(config: ManoConfig, index: np.ndarray) -> np.ndarray:
    """Test row i has l = i // eval_samples + 1: eval_samples rows per l."""
    return index // config.eval_samples + 1


@functools.lru_cache(maxsize=4)
def _test_instances(seed: int, max_ops: int, operators: str, modulus: int,
                    eval_samples: int) -> np.ndarray:
    """The sorted instance hashes of every `mano_test` expression."""
    config = ManoConfig(seed=seed, max_ops=max_ops, ops=operators, modulus=modulus,
                        eval_samples=eval_samples)
    index = np.arange(max_ops * eval_samples)
    drawn = _draw(config, "test", index, _test_ops(config, index))
    return np.unique(expressions.instance_hashes(drawn.codes))


def _token_ids(table: Tokens, drawn: expressions.Expressions, modulus: int) -> np.ndarray:
    """(B, 2L+1) int32 token ids of the expressions, -1 after each one's end: a lookup of
    (code, synonym), PAD first."""
    lookup = np.full((modulus + len(OPERATORS) + 1, 2), -1, dtype=np.int32)
    lookup[1:modulus + 1] = (table.number + np.arange(modulus))[:, None]
    lookup[modulus + 1:] = table.operator
    return lookup.ravel()[(drawn.codes + 1) * 2 + drawn.synonym]


def _documents(config: ManoConfig, table: Tokens, drawn: expressions.Expressions,
               ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, 2L+5) int32 token ids of whole documents, -1 after each one's end, and the loss
    column per document (where "=" is)."""
    n, width = drawn.codes.shape
    docs = np.empty((n, width + 4), dtype=np.int32)
    docs[:, 0] = table.names.index(BOS)
    docs[:, 1] = table.length + ops - 1
    docs[:, 2:width + 2] = _token_ids(table, drawn, config.modulus)
    docs[:, width + 2:] = -1
    flat, answer_at = docs.ravel(), 2 * ops + 3
    at = np.arange(n) * (width + 4) + answer_at
    flat[at], flat[at + 1] = table.answer, table.number + drawn.value
    return docs, answer_at


@functools.lru_cache(maxsize=16)
def _metas(max_ops: int, modulus: int) -> np.ndarray:
    """The meta of each (l, value), at (l - 1) * p + value."""
    return np.array([f'{{"ops":{o},"value":{v}}}' for o in range(1, max_ops + 1)
                     for v in range(modulus)], dtype=object)


def batches(config: ManoConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    """Drawn BLOCK documents at a time (each numpy step then spans many documents), handed
    out BATCH at a time."""
    table = _tokens(config)
    avoid = _test_instances(config.seed, config.max_ops, config.operators(), config.modulus,
                            config.eval_samples)
    ops_key = derive_key(config.seed, "mano", "train", "ops")
    metas = _metas(config.max_ops, config.modulus)
    for lo in range(start, stop, BLOCK):
        index = np.arange(lo, min(lo + BLOCK, stop))
        ops = randint(ops_key, index, config.max_ops) + 1  # l ~ U{1..L}
        drawn = _draw(config, "train", index, ops, avoid)
        docs, _ = _documents(config, table, drawn, ops)
        ids = docs[docs >= 0].astype(np.int64) - 1  # unit i is token i + 1
        offsets = np.concatenate([[0], np.cumsum(2 * ops + 5)])
        loss = np.zeros(len(ids), dtype=np.uint8)  # "=" and the answer: each document's last two
        loss[offsets[1:] - 1] = loss[offsets[1:] - 2] = 1
        yield from UnitBatch(table.units, ids, offsets,
                             metas[(ops - 1) * config.modulus + drawn.value].tolist(),
                             loss).chunks()


def records(config: ManoConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: ManoConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"mano_test": lambda: _rows(config)}


def _rows(config: ManoConfig) -> Iterator[dict]:
    """`eval_samples` test expressions per l = 1..L, l ascending."""
    table = _tokens(config)
    symbols = [*map(str, range(config.modulus)), *OPERATORS]
    for lo in range(0, config.max_ops * config.eval_samples, BATCH):
        index = np.arange(lo, min(lo + BATCH, config.max_ops * config.eval_samples))
        ops = _test_ops(config, index)
        drawn = _draw(config, "test", index, ops)
        docs, answer_at = _documents(config, table, drawn, ops)
        for i, doc in enumerate(docs.tolist()):
            end = answer_at[i] + 1
            codes = drawn.codes[i, :end - 3].tolist()
            yield {"id": int(index[i]), "prompt": doc[:end], "answer": doc[end:end + 1],
                   "text": " ".join(table.names[t] for t in doc[:end + 1]),
                   "ops": int(ops[i]), "expression": " ".join(symbols[c] for c in codes),
                   "value": int(drawn.value[i])}
