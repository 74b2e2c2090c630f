"""Counter-based randomness: every draw is a pure function of (seed, stream tags, index).

Nothing here holds state, so shard i, worker j or Slurm task k computes exactly the values the
others would, and a person's attributes never depend on how many people came before.
"""

import hashlib

import numpy as np

_U64 = np.uint64
_MASK64 = (1 << 64) - 1


def derive_key(seed: int, *tags: object) -> int:
    """A 64-bit key for the stream named by `tags` under `seed` (stable across runs and hosts)."""
    text = "\x1f".join([str(seed), *map(str, tags)]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array: a bijection that scrambles every bit."""
    x = np.asarray(x, dtype=_U64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def hash_u64(key: int, index: np.ndarray) -> np.ndarray:
    """Uniform 64-bit values for the indices of one keyed stream."""
    with np.errstate(over="ignore"):
        return mix64(mix64(np.asarray(index, dtype=_U64)) ^ _U64(key & _MASK64))


def randint(key: int, index: np.ndarray, n: int) -> np.ndarray:
    """Integers in [0, n) for each index (modulo bias below 2**-40 for n < 2**24)."""
    return (hash_u64(key, index) % _U64(n)).astype(np.int64)


def feistel_permute(index: np.ndarray, domain: int, key: int, rounds: int = 4) -> np.ndarray:
    """A keyed bijection of [0, domain): balanced Feistel network with cycle walking.

    Lets us shuffle or draw without replacement from 1e8-sized spaces without materialising them.
    """
    index = np.asarray(index, dtype=np.int64)
    if domain <= 1:
        return np.zeros_like(index)
    half_bits = max(1, ((domain - 1).bit_length() + 1) // 2)
    half_mask = _U64((1 << half_bits) - 1)
    round_keys = [derive_key(key, "feistel", r) for r in range(rounds)]

    def encrypt(x: np.ndarray) -> np.ndarray:
        left, right = x >> _U64(half_bits), x & half_mask
        for round_key in round_keys:
            left, right = right, left ^ (hash_u64(round_key, right) & half_mask)
        return (left << _U64(half_bits)) | right

    out = encrypt(index.astype(_U64))
    outside = out >= _U64(domain)
    while outside.any():  # cycle walking: re-encrypt until the value lands inside the domain
        out[outside] = encrypt(out[outside])
        outside = out >= _U64(domain)
    return out.astype(np.int64)


def shuffle_halves(offset: np.ndarray, population: int, key: int) -> np.ndarray:
    """A keyed permutation of [0, population) that keeps each half in place: offsets in the
    first ceil(population / 2) go to people of that half, the rest to the second half, each
    half in its own order. Consecutive rounds of one population thus meet first half against
    second: a person's two documents in consecutive rounds are about population / 2 apart."""
    first = (population + 1) // 2
    in_first = offset < first
    person = np.empty_like(offset)
    person[in_first] = feistel_permute(offset[in_first], first, derive_key(key, 0))
    person[~in_first] = first + feistel_permute(offset[~in_first] - first, population - first,
                                                derive_key(key, 1))
    return person


def junk_mix(position: np.ndarray, junk_ratio: int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """Part 3.3's junk mixes: run u of junk_ratio + 1 stream positions holds useful document u
    at a place keyed by `key`, junk elsewhere. Each position's run u, and whether it is the
    useful one (all are at junk_ratio 0)."""
    period = junk_ratio + 1
    run = position // period
    return run, position % period == randint(key, run, period)
