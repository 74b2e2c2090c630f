"""Markov chains over a small alphabet drawn by compiled loops (numba, cached on disk: imported
when sequences are drawn, not by every command that registers the families).

A k-th order chain's state is its last k tokens, the context c = sum_j x_{t-k+j} A^(k-1-j) (the
oldest token the most significant digit); row c of a table (S = A^k rows, A columns) is the law
of the next token. Sequence i of a stream has the key hash(key, i); its token t (0-based) comes
from its counter hash t - k + 1 (the first k tokens from counter 0: one draw of their k-gram
from the initial law), so a sequence is a pure function of (key, i) whatever batch it is drawn in,
and every position up to the last is sampled. A fresh table is drawn from the sequence key's
second stream (`_TABLE`): each row Dirichlet(beta), as normalised Gamma(beta) variates
(Marsaglia and Tsang; Box-Muller normals; shape < 1 boosted by U^(1/beta)).
"""

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit

_TABLE = np.uint64(0xD1B54A32D192ED03)  # xored into a sequence's key: its table's draws
_UNIT = 2.0 ** -53


def sequences(key: int, index: np.ndarray, seq_len: int, order: int, initial: np.ndarray,
              table: np.ndarray | None, alphabet: int, beta: float
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """Sequences `index` of the stream `key`: (tokens (B, T) int64, each sequence's table (B, S,
    A) float64 or None). `initial` (S,) is the law of the first k-gram; `table` (S, A) the
    transition table shared by all, or None: a fresh Dirichlet(beta) table per sequence."""
    index = np.asarray(index, dtype=np.int64)
    contexts = len(initial)
    tokens = np.empty((len(index), seq_len), dtype=np.int64)
    fresh = table is None
    tables = np.empty((len(index) if fresh else 0, contexts, alphabet), dtype=np.float64)
    shared = np.zeros((contexts, alphabet)) if fresh else np.asarray(table, dtype=np.float64)
    _sample(np.uint64(key), index, np.int64(order), np.cumsum(initial), shared, fresh,
            np.float64(beta), tokens, tables)
    return tokens, tables if fresh else None


def dirichlet_table(key: int, contexts: int, alphabet: int, beta: float) -> np.ndarray:
    """(S, A): the table of sequence 0 of the stream `key` had it been fresh (a fixed table)."""
    table = np.empty((contexts, alphabet), dtype=np.float64)
    _table(_start(np.uint64(key), 0) ^ _TABLE, np.float64(beta), table)
    return table


@njit(cache=True, inline="always")
def _start(key, index):  # pragma: no cover - compiled
    """seeding.hash_u64 of one index (mix64 is a hash_draw at counter 0)."""
    return hash_draw(hash_draw(np.uint64(index), np.uint64(0)) ^ key, np.uint64(0))


@njit(cache=True, inline="always")
def _uniform(key, counter):  # pragma: no cover - compiled
    """A uniform in (0, 1) from counter hash `counter` of `key` (53 bits)."""
    return ((hash_draw(key, np.uint64(counter)) >> np.uint64(11)) + 0.5) * _UNIT


@njit(cache=True)
def _gamma(key, counter, shape):  # pragma: no cover - compiled
    """(a Gamma(shape, 1) variate, the next unused counter)."""
    boost = 1.0
    if shape < 1.0:  # Gamma(a) = Gamma(a + 1) U^(1/a)
        boost = _uniform(key, counter) ** (1.0 / shape)
        counter += 1
        shape += 1.0
    d = shape - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    while True:
        u1, u2, u = _uniform(key, counter), _uniform(key, counter + 1), _uniform(key, counter + 2)
        counter += 3
        x = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        v = (1.0 + c * x) ** 3
        if v > 0.0 and np.log(u) < 0.5 * x * x + d - d * v + d * np.log(v):
            return d * v * boost, counter


@njit(cache=True)
def _table(key, beta, out):  # pragma: no cover - compiled
    """Each row of `out` (S, A) ~ Dirichlet(beta), from the counter hashes of `key`."""
    counter = 0
    for c in range(out.shape[0]):
        total = 0.0
        for a in range(out.shape[1]):
            out[c, a], counter = _gamma(key, counter, beta)
            total += out[c, a]
        for a in range(out.shape[1]):
            out[c, a] /= total


@njit(cache=True)
def _sample(key, index, order, initial, shared, fresh, beta, tokens,
            tables):  # pragma: no cover - compiled
    """Each sequence's tokens (B, T) and, `fresh`, its table (B, S, A); `initial` (S,) is the
    cumulative law of the first k-gram."""
    contexts, alphabet = shared.shape
    cumulative = np.empty((contexts, alphabet))
    for i in range(len(index)):
        start = _start(key, index[i])
        if fresh:
            _table(start ^ _TABLE, beta, tables[i])
            table = tables[i]
        else:
            table = shared
        for c in range(contexts):  # the last column 1 + rounding: every uniform falls inside
            running = 0.0
            for a in range(alphabet):
                running += table[c, a]
                cumulative[c, a] = running
            cumulative[c, alphabet - 1] = 2.0
        u = _uniform(start, 0)
        context = 0
        while context < contexts - 1 and u >= initial[context]:
            context += 1
        rest = context
        for j in range(order - 1, -1, -1):  # the k-gram's digits, oldest first
            tokens[i, j] = rest % alphabet
            rest //= alphabet
        for t in range(order, tokens.shape[1]):
            u = _uniform(start, t - order + 1)
            x = 0
            while u >= cumulative[context, x]:
                x += 1
            tokens[i, t] = x
            context = (context * alphabet + x) % contexts
