"""Random modular expressions in prefix notation, drawn and evaluated a batch at a time.

An expression of l operators is drawn as the official Mano generator's recursion draws it: an
operator uniform among the configured ones, its left operand gets l1 ~ U{0..l-1} operators and
its right operand the other l-1-l1, and a leaf is a number uniform over 0..p-1. The recursion
runs as an explicit stack of pending operand sizes per expression, and all expressions of a batch
advance together: step t writes token t (prefix order) of every unfinished expression. Step t's
randomness is one 64-bit counter hash of (key, index, attempt, t), so an expression is a pure
function of those four, whatever batch it is drawn in. Values come from a pass from the last
token back to the first with a stack of values; "/" multiplies by the modular inverse, and an
expression that divides by 0 anywhere is drawn again (next attempt), as is one in `avoid`.

Codes: number v is code v, operator OPERATORS[k] is code p + k, PAD after the expression's end.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.seeding import hash_u64, mix64
from corpus_gen.mano.config import OPERATORS

PAD = -1
_U64 = np.uint64


@dataclass
class Expressions:
    codes: np.ndarray  # (B, 2L+1) int64 codes in prefix order, PAD after the end
    synonym: np.ndarray  # (B, 2L+1) int64: which of its two tokens an operator is written with
    value: np.ndarray  # (B,) int64 value mod p; -1 where the expression divides by 0

    def __len__(self) -> int:
        return len(self.value)

    def take(self, rows: np.ndarray, other: "Expressions") -> None:
        """Replace the expressions at `rows` by `other`'s, in order."""
        self.codes[rows], self.synonym[rows], self.value[rows] = (other.codes, other.synonym,
                                                                  other.value)


def draw(key: int, index: np.ndarray, ops: np.ndarray, operators: str, modulus: int,
         max_ops: int, avoid: np.ndarray | None = None) -> Expressions:
    """Expression `index[i]` of the stream `key`, with `ops[i]` operators among `operators`,
    never dividing by 0 and never with an instance hash (`instance_hashes`) in the sorted
    `avoid`."""
    index = np.asarray(index, dtype=np.int64)
    ops = np.asarray(ops, dtype=np.int64)
    attempt = np.zeros(len(index), dtype=np.int64)
    drawn = _draw_once(key, index, attempt, ops, operators, modulus, max_ops)
    redo = _refused(drawn, avoid)
    while redo.size:
        attempt[redo] += 1
        again = _draw_once(key, index[redo], attempt[redo], ops[redo], operators, modulus,
                           max_ops)
        drawn.take(redo, again)
        redo = redo[_refused(again, avoid)]
    return drawn


def _refused(drawn: Expressions, avoid: np.ndarray | None) -> np.ndarray:
    """Rows to draw again: division by 0, or a test instance."""
    bad = drawn.value < 0
    if avoid is not None and avoid.size:
        hashes = instance_hashes(drawn.codes)
        at = np.minimum(np.searchsorted(avoid, hashes), avoid.size - 1)
        bad |= avoid[at] == hashes
    return np.flatnonzero(bad)


def _draw_once(key: int, index: np.ndarray, attempt: np.ndarray, ops: np.ndarray,
               operators: str, modulus: int, max_ops: int) -> Expressions:
    n, width = len(index), 2 * max_ops + 1
    op_codes = modulus + np.array([OPERATORS.index(op) for op in operators], dtype=np.int64)
    codes = np.full((n, width), PAD, dtype=np.int64)
    synonym = np.zeros((n, width), dtype=np.int64)
    pending = np.zeros((n, max_ops + 2), dtype=np.int64)  # operand sizes still to write
    pending[:, 0] = ops
    top = np.ones(n, dtype=np.int64)  # entries on each stack
    doc = hash_u64(key, index)
    for t in range(width):
        live = np.flatnonzero(top > 0)
        if not live.size:
            break
        # one 64-bit draw per step, read in mixed radix: leaf, operator, synonym, l1
        h = mix64(doc[live] ^ mix64((attempt[live] << 8 | t).astype(_U64)))
        top[live] -= 1
        size = pending[live, top[live]]
        leaf, h = (h % _U64(modulus)).astype(np.int64), h // _U64(modulus)
        op, h = (h % _U64(len(operators))).astype(np.int64), h // _U64(len(operators))
        syn, h = (h % _U64(2)).astype(np.int64), h // _U64(2)
        left = (h % np.maximum(size, 1).astype(_U64)).astype(np.int64)
        node = size > 0
        codes[live, t] = np.where(node, op_codes[op], leaf)
        synonym[live, t] = np.where(node, syn, 0)
        # push the right operand, then the left one (written first)
        rows, at = live[node], top[live[node]]
        pending[rows, at] = size[node] - 1 - left[node]
        pending[rows, at + 1] = left[node]
        top[rows] += 2
    return Expressions(codes, synonym, evaluate(codes, modulus, max_ops))


def evaluate(codes: np.ndarray, modulus: int, max_ops: int) -> np.ndarray:
    """The value mod p of each prefix expression of `codes`, -1 where it divides by 0."""
    n = len(codes)
    inverse = np.array([pow(v, -1, modulus) if v else 0 for v in range(modulus)],
                       dtype=np.int64)
    values = np.zeros((n, max_ops + 2), dtype=np.int64)
    top = np.zeros(n, dtype=np.int64)
    by_zero = np.zeros(n, dtype=bool)
    for t in range(codes.shape[1] - 1, -1, -1):
        code = codes[:, t]
        number = np.flatnonzero((code >= 0) & (code < modulus))
        values[number, top[number]] = code[number]
        top[number] += 1
        rows = np.flatnonzero(code >= modulus)
        if not rows.size:
            continue
        # the left operand was pushed last
        left, right = values[rows, top[rows] - 1], values[rows, top[rows] - 2]
        kind = code[rows] - modulus
        result = np.select([kind == 0, kind == 1, kind == 2],
                           [left + right, left - right, left * right],
                           left * inverse[right]) % modulus
        by_zero[rows] |= (kind == 3) & (right == 0)
        top[rows] -= 1
        values[rows, top[rows] - 1] = result
    return np.where(by_zero, -1, values[:, 0])


def instance_hashes(codes: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each expression with its synonyms collapsed (what a test instance
    is): equal expressions hash equal; codes of the same width compare."""
    h = np.zeros(len(codes), dtype=_U64)
    for column in codes.T:
        h = mix64(h ^ (column + 2).astype(_U64))
    return h
