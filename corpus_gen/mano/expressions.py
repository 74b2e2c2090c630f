"""Random modular expressions in prefix notation, drawn, evaluated and spelled by compiled loops
(numba, cached on disk: this module is imported when expressions are drawn, not by every
command that registers the families).

An expression of l operators is drawn as the official Mano generator's recursion draws it: an
operator uniform among the configured ones, its left operand gets l1 ~ U{0..l-1} operators and
its right operand the other l-1-l1, and a leaf is a number uniform over 0..p-1. Expression i has
a key from (key, index, attempt), and from it one 64-bit counter hash per operator (in prefix
order: the low half draws its l1, the high half its operator and synonym) and one per two
tokens (a half each: the token's number, if it is a leaf); 32-bit multiply-shift draws, bias
below bound / 2**32. So an expression is a pure function of those three, whatever batch it is
drawn in.

The walk places the operators in prefix order with a stack of the right operands that hold
operators; values come from the operators walked back from the last (an operator's operands
come after it: the left one right after it, the right one after the left one's 2 l1 + 1 tokens).
"/" multiplies by the modular inverse; an expression that divides by 0 anywhere is drawn again
(next attempt), as is one whose instance hash is in `avoid`. The splits and operators are
random, so the walk and the evaluation select rather than branch (a mispredicted branch costs
more than both sides).

Codes: number v is code v, operator OPERATORS[k] is code p + k, PAD after the expression's end.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit
from corpus_gen.mano.config import OPERATORS

PAD = -1
_MULTIPLY = OPERATORS.index("*")  # "*" and "/" multiply, "+" and "-" add
_POWER = np.uint64(0x9E3779B97F4A7C15)  # the instance hash's polynomial base
_LOW, _32 = np.uint64(0xFFFFFFFF), np.uint64(32)


@dataclass
class Expressions:
    codes: np.ndarray  # (B, 2L+1) int32 codes in prefix order, PAD after the end
    synonym: np.ndarray  # (B, 2L+1) int8: which of its two tokens an operator is written with
    value: np.ndarray  # (B,) int64 value mod p
    instance: np.ndarray  # (B,) uint64: the instance hash (synonyms collapsed; see _draw_one)


@dataclass(frozen=True)
class Spelling:
    """The ids documents "<bos> len<l> <expression> = <value>" are written with."""

    code: np.ndarray  # (p + 4, 2) int64: the id of code c written with synonym s
    bos: int
    length: int  # the id of len1 (len<l> is length + l - 1)
    answer: int  # the id of "="


def draw(key: int, index: np.ndarray, ops: np.ndarray, operators: str, modulus: int,
         max_ops: int, avoid: np.ndarray | None = None) -> Expressions:
    """Expression `index[i]` of the stream `key`, with `ops[i]` operators among `operators`,
    never dividing by 0 and never with an instance hash in the sorted `avoid`: the first
    attempt 0, 1, 2, ... that is neither."""
    ops = np.asarray(ops, dtype=np.int64)
    # the documents' kernel with each (code, synonym) spelled 2 code + synonym
    spelling = Spelling(np.arange(2 * (modulus + len(OPERATORS))).reshape(-1, 2), 0, 0, 0)
    ids, offsets, value, instance = _documents(key, index, ops, operators, modulus, max_ops,
                                               spelling, avoid)
    width = 2 * max_ops + 1
    inside = np.arange(width) < (2 * ops + 1)[:, None]  # (B, 2L+1): the expression's places
    spelled = np.full((len(ops), width), 2 * PAD, dtype=np.int64)
    spelled[inside] = np.delete(ids, np.concatenate([offsets[:-1], offsets[:-1] + 1,
                                                     offsets[1:] - 2, offsets[1:] - 1]))
    return Expressions((spelled >> 1).astype(np.int32), (spelled & 1).astype(np.int8), value,
                       instance)


def documents(key: int, index: np.ndarray, ops: np.ndarray, operators: str, modulus: int,
              max_ops: int, spelling: Spelling, avoid: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The documents of `draw`'s expressions back to back: (ids (sum 2 ops + 5,) int64,
    offsets (B + 1,) int64 where each starts, value (B,) int64); "=" and the answer are each
    document's last two ids."""
    ids, offsets, value, _ = _documents(key, index, np.asarray(ops, dtype=np.int64), operators,
                                        modulus, max_ops, spelling, avoid)
    return ids, offsets, value


def _documents(key: int, index: np.ndarray, ops: np.ndarray, operators: str, modulus: int,
               max_ops: int, spelling: Spelling, avoid: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`documents` and each expression's instance hash."""
    avoid = np.empty(0, dtype=np.uint64) if avoid is None else avoid.astype(np.uint64)
    shared = np.zeros(1 << 16, dtype=np.bool_)  # top 16 bits of some test instance's hash
    shared[avoid >> np.uint64(48)] = True
    kinds = np.array([OPERATORS.index(op) for op in operators], dtype=np.int64)
    # "x op y" is x + y' for + and -, x * y' for * and /: y' = transform[op * p + y] (p: the
    # inverse of 0, a division by 0)
    numbers = np.arange(modulus, dtype=np.int64)
    inverse = [pow(v, -1, modulus) if v else modulus for v in range(modulus)]
    transform = np.concatenate([numbers, (modulus - numbers) % modulus, numbers, inverse])
    ids = np.empty(int(2 * ops.sum()) + 5 * len(ops), dtype=np.int64)
    offsets = np.empty(len(ops) + 1, dtype=np.int64)
    value, instance = np.empty_like(ops), np.empty(len(ops), dtype=np.uint64)
    _spell(np.uint64(key), np.asarray(index, dtype=np.int64), ops, kinds, np.int64(modulus),
           transform, np.int64(max_ops), avoid, shared, spelling.code.astype(np.int64),
           np.int64(spelling.bos), np.int64(spelling.length), np.int64(spelling.answer), ids,
           offsets, value, instance)
    return ids, offsets, value, instance


def operator_counts(key: int, index: np.ndarray, max_ops: int) -> np.ndarray:
    """`seeding.randint(key, index, max_ops) + 1` (l ~ U{1..L}), compiled: numpy's uint64
    modulo alone cost as much as drawing an expression of one operator."""
    ops = np.empty(len(index), dtype=np.int64)
    _operator_counts(np.uint64(key), np.asarray(index, dtype=np.int64), np.uint64(max_ops), ops)
    return ops


@njit(cache=True)
def _operator_counts(key, index, max_ops, ops):  # pragma: no cover - compiled
    for i in range(len(index)):
        ops[i] = np.int64(_hash_u64(key, index[i]) % max_ops) + 1


@njit(cache=True)
def _hash_u64(key, index):  # pragma: no cover - compiled
    """seeding.hash_u64 of one index (mix64 is a hash_draw at counter 0)."""
    return hash_draw(hash_draw(np.uint64(index), np.uint64(0)) ^ key, np.uint64(0))


@njit(cache=True)
def _spell(key, index, ops, kinds, modulus, transform, max_ops, avoid, shared, spell, bos,
           length, answer, ids, offsets, value, instance):  # pragma: no cover - compiled
    """Each document's tokens at its offset, the expression's spelled by its draw: attempts
    0, 1, ... until one neither divides by 0 nor has its instance hash in `avoid` (searched
    only where its top 16 bits are `shared`). The attempts' loop is here, not in a function
    of its own: one called per document counted references to every array it is passed
    (~3x slower)."""
    scratch, powers = _scratch(max_ops), _powers(max_ops)
    at = 0
    for i in range(len(index)):
        offsets[i] = at
        ids[at], ids[at + 1] = bos, length + ops[i] - 1
        start = _hash_u64(key, index[i])
        attempt = 0
        while True:
            value[i], instance[i] = _draw_one(hash_draw(start, np.uint64(attempt)), ops[i],
                                              kinds, modulus, transform, max_ops, spell, ids,
                                              at + 2, scratch, powers)
            if value[i] >= 0 and not (avoid.size and shared[instance[i] >> np.uint64(48)]
                                      and _found(avoid, instance[i])):
                break
            attempt += 1
        at += 2 * ops[i] + 5
        ids[at - 2], ids[at - 1] = answer, spell[value[i], 0]
    offsets[len(index)] = at


@njit(cache=True)
def _scratch(max_ops):  # pragma: no cover - compiled
    """(4, 2L + 2) int64 work rows for `_draw_one`: each operator's token, its right operand's
    token, the stack of right operands (packed), the values."""
    return np.empty((4, 2 * max_ops + 2), dtype=np.int64)


@njit(cache=True)
def _powers(max_ops):  # pragma: no cover - compiled
    """(2, 2L + 2) uint64 for the instance hash: the polynomial's power at each token
    (C^(t + 1)), and after t tokens the sum of the later ones' (what PADs add: PAD + 2 is 1)."""
    width = 2 * max_ops + 1
    powers = np.zeros((2, width + 1), dtype=np.uint64)
    power = np.uint64(1)
    for t in range(width):
        power *= _POWER
        powers[0, t] = power
    for t in range(width - 1, -1, -1):
        powers[1, t] = powers[1, t + 1] + powers[0, t]
    return powers


@njit(cache=True, inline="always")
def _found(values, value):  # pragma: no cover - compiled
    """Whether the sorted `values` hold `value` (a binary search)."""
    lo, hi = 0, len(values)
    while lo < hi:
        middle = (lo + hi) >> 1
        if values[middle] < value:
            lo = middle + 1
        else:
            hi = middle
    return lo < len(values) and values[lo] == value


@njit(cache=True, inline="always")
def _draw_one(key, ops, kinds, modulus, transform, max_ops, spell, out, first, scratch,
              powers):  # pragma: no cover - compiled
    """One attempt's expression of `ops` operators: its tokens spelled (`spell[code,
    synonym]`) into `out` from `first` on; (its value mod p, or -1 where it divides by 0; its
    instance hash). Nothing written is read back by a loop
    over many places: a (vectorised) loop reading stores still in flight stalls, ~4x slower."""
    place, right, stack, values = scratch
    # every token's number (an operator's redone) and the instance hash's polynomial in the
    # codes of all 2L + 1 places (code + 2: PAD's is 1): what a test instance is, synonyms
    # collapsed (equal expressions hash equal, those of one L compare)
    total = powers[1, 2 * ops + 1]
    for t in range(0, 2 * ops + 1, 2):  # a hash per two tokens, low half first
        h = hash_draw(key, np.uint64(max_ops + t // 2))
        for half in range(min(2, 2 * ops + 1 - t)):
            number = np.int64((h >> np.uint64(32 * half) & _LOW) * np.uint64(modulus) >> _32)
            values[t + half], out[first + t + half] = number, spell[number, 0]
            total += np.uint64(number + 2) * powers[0, t + half]
    size, start, top = ops, 0, 1  # operator j's subtree (operators) and token; stack[0]: spare
    for j in range(ops):
        h = hash_draw(key, np.uint64(j))
        split = np.int64((h & _LOW) * np.uint64(size) >> _32)  # l1 ~ U{0..size-1}
        pick = np.int64((h >> _32) * np.uint64(2 * len(kinds)) >> _32)
        code = modulus + kinds[pick >> 1]
        total += np.uint64(code - values[start]) * powers[0, start]
        out[first + start] = spell[code, pick & 1]
        place[j], right[j] = start << 8 | code - modulus, start + 2 * split + 2
        # push the right operand (start << 8 | operators) if it has operators; go on with the
        # left one if it has, else with the last operand pushed (selects, not branches)
        stack[top] = right[j] << 8 | (size - 1 - split)
        top += size - 1 - split > 0
        last, left = stack[top - 1], split > 0
        start, size = start + 1 if left else last >> 8, split if left else last & 255
        top -= not left
    # operators from the last to the first (an operator's operands come after it)
    by_zero, reciprocal = False, 1.0 / modulus
    for j in range(ops - 1, -1, -1):
        at, kind = place[j] >> 8, place[j] & 255
        x, y = values[at + 1], transform[kind * modulus + values[right[j]]]
        by_zero |= y == modulus
        v = x * y if kind >= _MULTIPLY else x + y  # < 2**32: x mod p by a float reciprocal
        v -= np.int64(v * reciprocal) * modulus  # off by at most one p
        values[at] = v - modulus if v >= modulus else v
    return -1 if by_zero else values[0], hash_draw(total, np.uint64(0))
