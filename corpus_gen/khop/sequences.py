"""k-hop sequences (Sanford, Hsu, Telgarsky 2024) drawn with numpy, and their targets.

Sequence i of a stream has the key hash(key, i); its hop count k comes from that key's counter
hash 0, its letters from counters 1 .. T: the first uniform, each later one uniform over the
A - 1 letters other than the one before, as (previous + 1 + r) mod A with r uniform in
[0, A - 2], so the letters are a cumulative sum. A sequence is thus a pure function of
(key, i) whatever batch it is drawn in.

The k-hop of letter j: hop(j) = (the previous occurrence of letter j's letter) + 1, the letter
after it; the target is the letter at hop^k(j), undefined where a hop finds no previous
occurrence. A hop lands on a letter >= 1 and strictly before j, so 0 marks "undefined" below.
"""

import numpy as np

from corpus_gen.core.seeding import hash_u64, mix64

UNDEFINED = -1  # a target with no k-hop


def draw(key: int, index: np.ndarray, seq_len: int, alphabet: int,
         hop_law: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sequences `index` of the stream `key`: (letters (B, T) int64 in [0, A), hop counts (B,)
    int64 drawn from `hop_law` (K + 1 probabilities))."""
    starts = hash_u64(key, np.asarray(index, dtype=np.int64))  # (B,) each sequence's key
    with np.errstate(over="ignore"):
        draws = mix64(mix64(np.arange(seq_len + 1, dtype=np.uint64))[None, :]
                      ^ starts[:, None])  # (B, T + 1): counter t of each sequence's key
    uniform = (draws[:, 0] >> np.uint64(11)) * 2.0 ** -53
    hops = np.minimum(np.searchsorted(np.cumsum(hop_law), uniform, side="right"),
                      len(hop_law) - 1)  # rounding: a uniform past the last sum is k = K
    steps = (draws[:, 1:] % np.uint64(alphabet - 1)).astype(np.int64) + 1
    steps[:, 0] = (draws[:, 1] % np.uint64(alphabet)).astype(np.int64)
    return np.cumsum(steps, axis=1) % alphabet, hops.astype(np.int64)


def hop_pointers(letters: np.ndarray) -> np.ndarray:
    """(B, T): hop(j), the position after the previous occurrence of letter j's letter, or 0
    where it has none."""
    batch, seq_len = letters.shape
    rows = np.arange(batch)
    last = np.full((batch, letters.max(initial=0) + 1), -1, dtype=np.int64)
    out = np.empty_like(letters)
    for t in range(seq_len):  # one column at a time, all sequences at once
        out[:, t] = last[rows, letters[:, t]] + 1
        last[rows, letters[:, t]] = t
    return out


def targets(letters: np.ndarray, hops: np.ndarray) -> np.ndarray:
    """(B, T): the letter at hop^k(j) for each sequence's k, or UNDEFINED."""
    pointer = hop_pointers(letters)
    rows = np.arange(len(letters))[:, None]
    at = np.broadcast_to(np.arange(letters.shape[1]), letters.shape)
    for step in range(1, int(hops.max(initial=0)) + 1):  # 0 is absorbing: hop(0) = 0
        at = np.where((hops >= step)[:, None], pointer[rows, at], at)
    defined = (hops == 0)[:, None] | (at > 0)
    return np.where(defined, letters[rows, at], UNDEFINED)
