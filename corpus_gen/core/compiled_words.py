"""A lexicon's draws as compiled loops (numba, cached on disk), one pass over each document:
its distinct words in a random order (`Lexicon.draw_shuffled`) and the first places of its
random orders (`words.shuffled`). The same values as those numpy draws, which stay the reference
(tests/test_depo_compiled.py checks them against each other): numpy made a dozen passes over a
batch's words and sorted them all at once. For the compiled families (depo, brevo), imported
when documents are drawn: numba's import and first call take ~1 s of CPU.
"""

import numpy as np

from corpus_gen.core.compiled_hash import GAMMA, hash_draw
from corpus_gen.core.jit import njit
from corpus_gen.core.words import MAX_ELEMENTS, Lexicon


def draw_shuffled(lexicon: Lexicon, keys: np.ndarray, n: np.ndarray, tag: int, order_tag: int
                  ) -> np.ndarray:
    """`lexicon.draw_shuffled(keys, n, tag, order_tag)`: each document's n[i] distinct words
    (codes) in a random order, documents back to back."""
    n = np.asarray(n, dtype=np.int64)
    out = np.empty(int(n.sum()), dtype=np.int64)
    if not len(n):
        return out
    scale = 2.0 ** -53 * (lexicon.max_len - lexicon.min_len + 1)
    _draw_shuffled(keys.astype(np.uint64), n, lexicon.bases, scale, lexicon.shuffles_all,
                 np.uint64(tag << 40), np.uint64(order_tag << 40), out)
    return out


def first_places(keys: np.ndarray, sizes: np.ndarray, counts: np.ndarray, tag: int
                 ) -> np.ndarray:
    """The first counts[i] places of `shuffled(keys, sizes, tag)`'s order of document i (as
    positions among all the documents' elements), documents back to back."""
    sizes, counts = np.asarray(sizes, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    out = np.empty(int(counts.sum()), dtype=np.int64)
    if not len(sizes):
        return out
    _first_places(keys.astype(np.uint64), sizes, counts, np.uint64(tag << 40), out)
    return out


@njit(cache=True)
def _order(key, size, tag, packed, drawn, heads):  # pragma: no cover - compiled
    """words.shuffled for one document: packed[:size] sorted by (32 random bits, index), whose
    low 20 bits are then the order's indices. A bucket sort (numba's sort took 3-4x as long):
    the values spread by their leading bits into about one bucket each, then an insertion sort
    mends the few out of order. `drawn` and `heads` are scratch space."""
    bits = 0
    while 1 << bits < size:
        bits += 1
    shift = np.uint64(52 - bits)  # the packed values have 52 bits
    heads[:(1 << bits) + 1] = 0
    for i in range(size):
        draw = hash_draw(key, np.uint64(i) + tag) >> np.uint64(32) << np.uint64(20) | np.uint64(i)
        drawn[i] = draw
        heads[np.int64(draw >> shift) + 1] += 1
    for bucket in range(1 << bits):
        heads[bucket + 1] += heads[bucket]
    for i in range(size):
        bucket = np.int64(drawn[i] >> shift)
        packed[heads[bucket]] = drawn[i]
        heads[bucket] += 1
    for i in range(1, size):
        value, j = packed[i], i - 1
        while j >= 0 and packed[j] > value:
            packed[j + 1] = packed[j]
            j -= 1
        packed[j + 1] = value


@njit(cache=True)
def _scratch(size):  # pragma: no cover - compiled
    """`_order`'s buffers for documents of up to `size` elements."""
    slots = 1
    while slots < size:
        slots *= 2
    return (np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint64),
            np.empty(slots + 1, dtype=np.int64))


@njit(cache=True)
def _first_places(keys, sizes, counts, tag, out):  # pragma: no cover - compiled
    packed, drawn, heads = _scratch(sizes.max())
    low = np.uint64(MAX_ELEMENTS - 1)
    start, at = 0, 0
    for doc in range(len(keys)):
        _order(keys[doc], sizes[doc], tag, packed, drawn, heads)
        for i in range(counts[doc]):
            out[at + i] = start + np.int64(packed[i] & low)
        start += sizes[doc]
        at += counts[doc]


@njit(cache=True)
def _draw_shuffled(keys, n, bases, scale, shuffles_all, tag, order_tag, out
                 ):  # pragma: no cover - compiled
    """Each document's words: with `shuffles_all` (one word length, a small lexicon) the first
    n of its order of every word; otherwise its first n distinct draws (a uniform float: its
    integer part times the lengths the length, the fraction the word), put in its order.
    Distinct words are found in a table of codes by open addressing, twice n slots."""
    size = bases[-1]
    most = n.max()
    packed, scratch, heads = _scratch(size if shuffles_all else most)
    drawn = np.empty(most, dtype=np.int64)
    slots = 1
    while slots < 2 * most:
        slots *= 2
    table = np.empty(slots, dtype=np.int64)
    low = np.uint64(MAX_ELEMENTS - 1)
    at = 0
    for doc in range(len(keys)):
        key, count = keys[doc], n[doc]
        if shuffles_all:
            _order(key, size, order_tag, packed, scratch, heads)
            for i in range(count):
                out[at + i] = np.int64(packed[i] & low)
            at += count
            continue
        table[:] = -1
        found, j = 0, 0
        while found < count:
            u = np.float64(hash_draw(key, np.uint64(j) + tag) >> np.uint64(11)) * scale
            length = np.int64(u)
            words = bases[length + 1] - bases[length]
            code = bases[length] + min(np.int64((u - np.float64(length)) * np.float64(words)),
                                       words - 1)
            # the code's slot: 24 bits of a multiplicative hash (slots <= 2 * MAX_N < 2**24)
            slot = np.int64(np.uint64(code) * np.uint64(GAMMA) >> np.uint64(40)) & (slots - 1)
            while table[slot] != -1 and table[slot] != code:
                slot = (slot + 1) & (slots - 1)
            if table[slot] == -1:
                table[slot] = code
                drawn[found] = code
                found += 1
            j += 1
        _order(key, count, order_tag, packed, scratch, heads)
        for i in range(count):
            out[at + i] = drawn[np.int64(packed[i] & low)]
        at += count
