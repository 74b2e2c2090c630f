"""The biod population as pure functions of the seed: names, the attributes' dictionaries, each
person's values and each document's attribute order. Every draw is a counter-based hash
(corpus_gen.core.seeding), so person i's facts never depend on which others are drawn with it."""

import functools

import numpy as np

from corpus_gen.biod.config import MAX_NAME_SPACE, BiodConfig
from corpus_gen.core.seeding import derive_key, feistel_permute, hash_u64, randint

# chunk spaces up to this size are permuted (distinct chunks by construction); larger ones take
# the first D distinct of uniform draws, which then almost never repeat
PERMUTED_SPACE = MAX_NAME_SPACE


def name_codes(config: BiodConfig, index: np.ndarray) -> np.ndarray:
    """Name codes in [0, N0) of permutation places `index`: one keyed bijection of the name
    space, so places [0, N) are the population's N distinct names (and places >= N names
    no one has) without holding the space."""
    return feistel_permute(index, config.name_space, derive_key(config.seed, "biod", "names"))


def digits(codes: np.ndarray, radices: list[int]) -> np.ndarray:
    """(B, len(radices)) mixed-radix digits of `codes`, the first the most significant."""
    places = np.cumprod([1, *radices[:0:-1]])[::-1]
    return codes[:, None] // places % np.array(radices)


def values(config: BiodConfig, key: int, index: np.ndarray) -> np.ndarray:
    """(B, K, C) chunk indices in [0, D), uniform with replacement, for counters `index`."""
    per = config.attributes * config.chunks
    counters = index[:, None] * per + np.arange(per)
    return randint(key, counters, config.dictionary).reshape(len(index), config.attributes,
                                                            config.chunks)


def orders(key: int, index: np.ndarray, attributes: int) -> np.ndarray:
    """(B, K) a uniform permutation of the attributes for each counter of `index`: the order
    that sorts K uniform 64-bit hashes."""
    return np.argsort(hash_u64(key, index[:, None] * attributes + np.arange(attributes)), axis=1)


def person_values(config: BiodConfig, person: np.ndarray) -> np.ndarray:
    return values(config, derive_key(config.seed, "biod", "values"), person)


def person_orders(config: BiodConfig, person: np.ndarray, rendering: int) -> np.ndarray:
    """The attribute orders of the people's `rendering`-th documents."""
    return orders(derive_key(config.seed, "biod", "order", rendering), person, config.attributes)


def dictionaries(config: BiodConfig) -> np.ndarray:
    """(K, D, L) alphabet indices: attribute k's D distinct chunks."""
    return _dictionaries(config.seed, config.attributes, config.dictionary, config.chunk_len,
                         config.alphabet)


@functools.lru_cache(maxsize=8)
def _dictionaries(seed: int, attributes: int, size: int, length: int, alphabet: int
                  ) -> np.ndarray:
    space = alphabet ** length
    keys = [derive_key(seed, "biod", "dictionary", k) for k in range(attributes)]
    if space <= PERMUTED_SPACE:
        chunks = [digits(feistel_permute(np.arange(size), space, key), [alphabet] * length)
                  for key in keys]
    else:
        chunks = [_first_distinct_rows(key, size, length, alphabet) for key in keys]
    table = np.stack(chunks)
    table.flags.writeable = False  # cached: shared by every caller
    return table


def _first_distinct_rows(key: int, count: int, length: int, alphabet: int) -> np.ndarray:
    """The first `count` distinct rows of a stream of uniform rows of `length` tokens: a
    uniform sample without replacement, whatever number of rows is drawn to find them."""
    drawn = count
    while True:
        rows = randint(key, np.arange(drawn * length), alphabet).reshape(drawn, length)
        _, first = np.unique(rows, axis=0, return_index=True)
        if len(first) >= count:
            return rows[np.sort(first)[:count]]
        drawn += 2 * (count - len(first))
