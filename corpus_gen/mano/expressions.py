"""Random modular expressions in prefix notation, drawn and evaluated a batch at a time.

An expression of l operators is drawn as the official Mano generator's recursion draws it: an
operator uniform among the configured ones, its left operand gets l1 ~ U{0..l-1} operators and
its right operand the other l-1-l1, and a leaf is a number uniform over 0..p-1. Expression i has
a key from (key, index, attempt), and from it one 64-bit counter hash per operator (in prefix
order: the low half draws its l1, the high half its operator and synonym) and one per two
tokens (a half each: the token's number, if it is a leaf); 32-bit multiply-shift draws, bias
below bound / 2**32. So an expression is a pure function of those three, whatever batch it is
drawn in.

The recursion walks the operators in prefix order with an explicit stack of right operands that
hold operators (each one's size and first token), all expressions of a batch advancing together
(step j places operator j of each); values come from the operators walked back from the last
(an operator's operands come after it: the left one right after it, the right one after the
left one's 2 l1 + 1 tokens). Expressions are handled most operators first, so the ones still
running at step j are a prefix of the rows (views, not gathers). "/" multiplies by the modular
inverse; an expression that divides by 0 anywhere is drawn again (next attempt), as is one in
`avoid`.

Codes: number v is code v, operator OPERATORS[k] is code p + k, PAD after the expression's end.
"""

import functools
from dataclasses import dataclass

import numpy as np

from corpus_gen.core.seeding import hash_u64, mix64
from corpus_gen.core.words import hash_each
from corpus_gen.mano.config import OPERATORS

PAD = -1
RETRIES = 4  # attempts drawn at once for an expression refused (division by 0, test instance)
_U64 = np.uint64
_LOW = np.uint64(0xFFFFFFFF)
_MUL = OPERATORS.index("*")
_TABLE = 1 << 16  # the most entries of a lookup table of every operation (p up to 127)


@dataclass
class Expressions:
    codes: np.ndarray  # (B, 2L+1) int32 codes in prefix order, PAD after the end
    synonym: np.ndarray  # (B, 2L+1) int8: which of its two tokens an operator is written with
    value: np.ndarray  # (B,) int64 value mod p; -1 where the expression divides by 0

    def __len__(self) -> int:
        return len(self.value)

    def rows(self, rows: np.ndarray) -> "Expressions":
        return Expressions(self.codes[rows], self.synonym[rows], self.value[rows])

    def take(self, rows: np.ndarray, other: "Expressions") -> None:
        """Replace the expressions at `rows` by `other`'s, in order."""
        self.codes[rows], self.synonym[rows], self.value[rows] = (other.codes, other.synonym,
                                                                  other.value)


def draw(key: int, index: np.ndarray, ops: np.ndarray, operators: str, modulus: int,
         max_ops: int, avoid: np.ndarray | None = None) -> Expressions:
    """Expression `index[i]` of the stream `key`, with `ops[i]` operators among `operators`,
    never dividing by 0 and never with an instance hash (`instance_hashes`) in the sorted
    `avoid`: the first attempt 0, 1, 2, ... that is neither."""
    index = np.asarray(index, dtype=np.int64)
    ops = np.asarray(ops, dtype=np.int64)
    drawn = _draw_once(key, index, np.zeros(len(index), dtype=np.int64), ops, operators,
                       modulus, max_ops)
    redo = np.flatnonzero(_refused(drawn, avoid))
    tried = 1  # attempts 0..tried-1 of the rows in `redo` are refused
    while redo.size:
        # RETRIES attempts of each at once (rows redo[j] repeated): keep the first accepted
        rows = np.repeat(redo, RETRIES)
        attempts = tried + np.tile(np.arange(RETRIES), len(redo))
        again = _draw_once(key, index[rows], attempts, ops[rows], operators, modulus, max_ops)
        accepted = ~_refused(again, avoid).reshape(len(redo), RETRIES)
        found = accepted.any(1)
        first = np.flatnonzero(found) * RETRIES + accepted.argmax(1)[found]
        drawn.take(redo[found], again.rows(first))
        redo, tried = redo[~found], tried + RETRIES
    return drawn


def _refused(drawn: Expressions, avoid: np.ndarray | None) -> np.ndarray:
    """Whether each expression is to be drawn again: division by 0, or a test instance."""
    bad = drawn.value < 0
    if avoid is not None and avoid.size:
        hashes = instance_hashes(drawn.codes)
        # the exact search only for the few whose top 16 bits some test instance's share
        shared = np.zeros(1 << 16, dtype=bool)
        shared[avoid >> _U64(48)] = True
        rows = np.flatnonzero(shared[hashes >> _U64(48)])
        at = np.minimum(np.searchsorted(avoid, hashes[rows]), avoid.size - 1)
        bad[rows] |= avoid[at] == hashes[rows]
    return bad


def _draw_once(key: int, index: np.ndarray, attempt: np.ndarray, ops: np.ndarray,
               operators: str, modulus: int, max_ops: int) -> Expressions:
    n, width = len(index), 2 * max_ops + 1
    order = np.argsort(-ops, kind="stable")  # most operators first: those left are a prefix
    sizes = ops[order]
    running = np.searchsorted(-sizes, -np.arange(max_ops))  # per operator j: rows with l > j
    # one 64-bit draw per operator (low half: l1, high half: operator and synonym), then one
    # per two tokens (a half each: its number, if a leaf)
    keys = hash_each(hash_u64(key, index[order]), attempt[order])[:, None]
    h = hash_each(keys, np.arange(max_ops + (width + 1) // 2, dtype=_U64))
    halves = h.view(np.uint32).reshape(n, -1, 2)  # little-endian: (low, high) of each draw
    # rows of width + 1 tokens: the last a scratch column that operators past an expression's
    # end are written to (every (row, j) written at once, no mask of the real ones)
    at, right = _shape(halves[:, :max_ops, 0], sizes, running, width + 1)
    # u * bound / 2**32 in float64 is exact (u * bound < 2**53): the multiply-shift draw
    numbers = (halves[:, max_ops:].reshape(n, -1)[:, :width] * (modulus / 2 ** 32)).astype(
        np.int32)
    codes = np.empty((n, width + 1), dtype=np.int32)
    codes[:, :width] = np.where(np.arange(width) < (2 * sizes + 1)[:, None], numbers, PAD)
    pick = (halves[:, :max_ops, 1] * (2 * len(operators) / 2 ** 32)).astype(np.int32)
    kind = np.array([OPERATORS.index(op) for op in operators], dtype=np.int32)[pick >> 1]
    codes.ravel()[at] = modulus + kind
    synonym = np.zeros((n, width + 1), dtype=np.int8)
    synonym.ravel()[at] = pick & 1
    value = _evaluate(codes.ravel(), at, right, kind, modulus, running)
    back = np.empty_like(order)
    back[order] = np.arange(n)
    return Expressions(codes[back, :width], synonym[back, :width], value[back])


def _shape(low: np.ndarray, sizes: np.ndarray, running: np.ndarray, stride: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Where each operator's token is (prefix order) and where its right operand starts, as
    flat indices into rows of `stride` tokens: (n, L) each, operator j of expressions sorted by
    `sizes` operators, most first; running[j] of them have operator j. Past an expression's
    operators: its row's last token (scratch)."""
    n, max_ops = low.shape
    starts = np.full((n, max_ops), stride - 1, dtype=np.int64)
    rights = np.zeros((n, max_ops), dtype=np.int64)
    # each expression's stack of right operands with operators still to write, flat: row r's
    # from r * depth on; slot 0 a sentinel under the stack; each one packed: start << 8 | size
    depth = max_ops + 1
    pending = np.zeros(n * depth, dtype=np.int64)
    top = np.arange(n, dtype=np.int64) * depth + 1  # the next free slot
    size, start = sizes.copy(), np.zeros(n, dtype=np.int64)  # operator j's subtree and token
    for j in range(max_ops):
        live = running[j]
        size, start, top = size[:live], start[:live], top[:live]
        split = (low[:live, j] * size) >> 32  # l1 ~ U{0..size-1} (uint32 * int64: int64)
        right, right_start = size - 1 - split, start + 2 * split + 2
        starts[:live, j], rights[:live, j] = start, right_start
        # push the right operand if it has operators; go on with the left one if it has,
        # else with the last operand pushed
        pending[top] = right_start << 8 | right
        top = top + (right > 0)
        has_left, last = split > 0, pending[top - 1]
        size = np.where(has_left, split, last & 255)
        start = np.where(has_left, start + 1, last >> 8)
        top = top - ~has_left
    base = np.arange(0, n * stride, stride, dtype=np.int64)[:, None]
    return starts + base, rights + base


def _evaluate(codes: np.ndarray, at: np.ndarray, right: np.ndarray, kind: np.ndarray,
              modulus: int, running: np.ndarray) -> np.ndarray:
    """The value mod p of each expression (-1 where it divides by 0), from its flat codes and
    its operators' flat positions (`_shape`): operators from the last to the first (an
    operator's operands come after it), each reading its left operand's value right after it
    and its right one at `right`."""
    n, max_ops = at.shape
    values = codes.copy()  # a leaf's value is its code; operators' overwritten
    if (modulus + 1) ** 2 * len(OPERATORS) <= _TABLE:
        # one lookup per operator: table[kind, x, y], p where x or y is p or y is a divisor 0
        # (p marks a division by 0 below, and every operator above it gives p too)
        table = _table(modulus)
        offset = kind * (modulus + 1) ** 2
        for j in range(max_ops - 1, -1, -1):
            live = running[j]
            x, y = values[at[:live, j] + 1], values[right[:live, j]]
            values[at[:live, j]] = table[offset[:live, j] + x * (modulus + 1) + y]
        first = values[at[:, 0]]
        return np.where(first == modulus, -1, first).astype(np.int64)
    # int64 ("x op y" is x + y' for + and -, x * y' for * and /, y' = transform[op, y])
    values = values.astype(np.int64)  # a product of two values overflows int32
    numbers = np.arange(modulus, dtype=np.int64)
    transform = np.concatenate([numbers, (modulus - numbers) % modulus, numbers,
                                _inverses(modulus)])
    offset, product = kind.astype(np.int64) * modulus, kind >= _MUL
    by_zero = np.zeros(n, dtype=bool)
    for j in range(max_ops - 1, -1, -1):
        live = running[j]
        x, y = values[at[:live, j] + 1], transform[offset[:live, j] + values[right[:live, j]]]
        by_zero[:live] |= y == modulus  # y / 0
        values[at[:live, j]] = np.where(product[:live, j], x * y, x + y) % modulus
    return np.where(by_zero, -1, values[at[:, 0]])


@functools.lru_cache(maxsize=4)
def _table(modulus: int) -> np.ndarray:
    """(4 (p+1)^2,) int32: OPERATORS[k] applied to x, y in 0..p at k (p+1)^2 + x (p+1) + y;
    p where x or y is p (a division by 0 below) or the operator divides by 0."""
    x, y = np.divmod(np.arange((modulus + 1) ** 2), modulus + 1)
    inverse = np.append(_inverses(modulus), 0)  # y = p: overwritten below
    table = np.stack([x + y, x - y, x * y, x * inverse[y]]) % modulus
    table[:, (x == modulus) | (y == modulus)] = modulus
    table[OPERATORS.index("/"), y == 0] = modulus
    return table.ravel().astype(np.int32)


def _inverses(modulus: int) -> np.ndarray:
    """(p,) int64: each value's inverse mod p, and p at 0 (no inverse: a division by 0)."""
    return np.array([pow(v, -1, modulus) if v else modulus for v in range(modulus)])


def instance_hashes(codes: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each expression with its synonyms collapsed (what a test instance
    is): equal expressions hash equal; codes of the same width compare. A polynomial in the
    codes (one multiply-add per token), then mixed."""
    powers = np.cumprod(np.full(codes.shape[1], 0x9E3779B97F4A7C15, dtype=_U64), dtype=_U64)
    with np.errstate(over="ignore"):
        return mix64((codes + 2).astype(_U64) @ powers)
