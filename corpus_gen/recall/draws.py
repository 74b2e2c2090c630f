"""The recall documents' draws in one compiled pass (numba, cached on disk): per document the
subject and relation (inverse CDF of their laws, or given: the test set asks each fact), their
two distinct places among the first T - 1, the noise, the separator and the answer. Numpy took
a pass over every token per step (hashes, modulo, scatters) and twice the time."""

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit


@njit(cache=True)
def _inverse_cdf(cdf, bits):  # pragma: no cover - compiled
    """The index drawn from a law with this CDF (its last entry 1.0) by a 64-bit hash."""
    return np.searchsorted(cdf, (bits >> np.uint64(11)) * 2.0 ** -53, side="right")


@njit(cache=True)
def documents(key, index, seq_len, subject_cdf, relation_cdf, noise, table, asked, ids,
              facts):  # pragma: no cover - compiled
    """Fill `ids` (B, T + 1) with unit ids and `facts` (B, 4) with subject, relation, subject
    place, relation place. Document i's hashes are counters i * (T + 3) + slot: slots 0-3 the
    subject, relation and their places, 4.. the T - 1 noise tokens. `asked` (B, 2): the
    (subject, relation) of each document; empty: drawn from the CDFs.
    Unit ids: subjects [0, S), relations [S, S + R), noise [S + R, S + R + N), the separator,
    then the answers (`table` [S, R], answer indices)."""
    subjects, relations = table.shape
    first_noise = subjects + relations
    separator = first_noise + noise
    slots = np.uint64(seq_len + 3)
    for b in range(len(index)):
        base = np.uint64(index[b]) * slots
        if asked.shape[0]:
            subject, relation = asked[b, 0], asked[b, 1]
        else:
            subject = _inverse_cdf(subject_cdf, hash_draw(key, base))
            relation = _inverse_cdf(relation_cdf, hash_draw(key, base + np.uint64(1)))
        subject_at = np.int64(hash_draw(key, base + np.uint64(2)) % np.uint64(seq_len - 1))
        relation_at = np.int64(hash_draw(key, base + np.uint64(3)) % np.uint64(seq_len - 2))
        relation_at += relation_at >= subject_at  # skip the subject's place
        for j in range(seq_len - 1):
            ids[b, j] = first_noise + np.int64(
                hash_draw(key, base + np.uint64(4 + j)) % np.uint64(noise))
        ids[b, subject_at] = subject
        ids[b, relation_at] = subjects + relation
        ids[b, seq_len - 1] = separator
        ids[b, seq_len] = separator + 1 + table[subject, relation]
        facts[b, 0], facts[b, 1] = subject, relation
        facts[b, 2], facts[b, 3] = subject_at, relation_at
