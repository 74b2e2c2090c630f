"""Bigram sequences with triggers, drawn by one compiled loop (numba, cached on disk: this module
is imported when sequences are drawn, not by every command that registers the families).

Sequence i of a stream is the official sampler's (transformer-birth's `ihead_data.gen_seq`):
K triggers (fixed, or K distinct characters drawn one after another from the unigram law, each
drawn one left out of the next draw: numpy's choice without replacement); each trigger's output
(uniform over a pool of ids, or from the trigger's bigram conditional); the first token from the
unigram law; then each token is its predecessor's output if the predecessor is a trigger, else
drawn from the predecessor's bigram conditional. Its draws are splitmix64 hashes of a key of
(stream key, i) at fixed counters (trigger k: k, output k: K + k, token t: 2K + t, used or not),
so a sequence is a pure function of (key, i) whatever batch it is drawn in. A category is the
first whose cumulative count exceeds hash % total: bias below total / 2**64.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit


@dataclass(frozen=True)
class Law:
    """What a stream's sequences are drawn from."""

    unigram: np.ndarray  # (V,) int64 counts: the first token's and drawn triggers' law
    bigram: np.ndarray  # (V, V) int64 counts: bigram[a, b], b after a
    triggers: int  # K
    fixed: np.ndarray | None  # (K,) the triggers of every sequence, or None: drawn
    bigram_outputs: bool  # outputs from the trigger's bigram conditional, else uniform on pool
    pool: np.ndarray  # (P,) int64 ids a uniform output takes


@dataclass(frozen=True)
class Sequences:
    tokens: np.ndarray  # (B, T) int64 ids
    occurrence: np.ndarray  # (B, T) int32: c if token t is a trigger's c-th output, else 0
    triggers: np.ndarray  # (B, K) int64
    outputs: np.ndarray  # (B, K) int64: trigger k's output


def draw(key: int, index: np.ndarray, seq_len: int, law: Law) -> Sequences:
    """Sequences `index` of the stream `key`."""
    n, k = len(index), law.triggers
    out = Sequences(np.empty((n, seq_len), dtype=np.int64),
                    np.zeros((n, seq_len), dtype=np.int32),
                    np.empty((n, k), dtype=np.int64), np.empty((n, k), dtype=np.int64))
    fixed = law.fixed is not None
    _draw(np.uint64(key), np.asarray(index, dtype=np.int64), np.cumsum(law.unigram),
          np.cumsum(law.bigram, axis=1), law.unigram,
          (law.fixed if fixed else np.empty(0)).astype(np.int64), fixed, law.bigram_outputs,
          law.pool.astype(np.int64), out.tokens, out.occurrence, out.triggers, out.outputs)
    return out


@njit(cache=True)
def _category(cumulative, h):  # pragma: no cover - compiled
    """The first index whose cumulative count exceeds h % total (a binary search)."""
    r = np.int64(h % np.uint64(cumulative[-1]))
    lo, hi = 0, len(cumulative) - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if cumulative[mid] > r:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _draw(key, index, unigram_cum, bigram_cum, unigram, fixed, is_fixed, bigram_outputs, pool,
          tokens, occurrence, triggers, outputs):  # pragma: no cover - compiled
    n, seq_len = tokens.shape
    k_count = triggers.shape[1]
    slot = np.full(len(unigram), -1, dtype=np.int64)  # a trigger's k, -1 for other ids
    seen = np.zeros(k_count, dtype=np.int32)  # outputs of trigger k so far
    weights = np.empty(len(unigram), dtype=np.int64)
    pool_size = np.uint64(len(pool))
    for d in range(n):
        doc = hash_draw(key, np.uint64(index[d]))
        if is_fixed:
            triggers[d] = fixed
        else:  # successive draws, each without those already drawn
            weights[:] = unigram
            total = weights.sum()
            for k in range(k_count):
                r = np.int64(hash_draw(doc, np.uint64(k)) % np.uint64(total))
                c = 0
                while r >= weights[c]:
                    r -= weights[c]
                    c += 1
                triggers[d, k] = c
                total -= weights[c]
                weights[c] = 0
        for k in range(k_count):
            h = hash_draw(doc, np.uint64(k_count + k))
            a = triggers[d, k]
            outputs[d, k] = _category(bigram_cum[a], h) if bigram_outputs else pool[h % pool_size]
            slot[a] = k
            seen[k] = 0
        base = np.uint64(2 * k_count)
        tokens[d, 0] = _category(unigram_cum, hash_draw(doc, base))
        for t in range(1, seq_len):
            previous = tokens[d, t - 1]
            k = slot[previous]
            if k >= 0:
                tokens[d, t] = outputs[d, k]
                seen[k] += 1
                occurrence[d, t] = seen[k]
            else:
                tokens[d, t] = _category(bigram_cum[previous], hash_draw(doc, base + np.uint64(t)))
        for k in range(k_count):
            slot[triggers[d, k]] = -1
