"""The information a biod corpus holds, in bits (Part 3.3's lower bound on what a model that
generates the population must store): which N of the N0 names are taken, log2 C(N0, N); each
person's K * C chunk indices, N * K * C * log2 D; and each attribute's dictionary, a D-subset
of the T**L chunks, K * log2 C(T**L, D)."""

import functools
import math

import numpy as np

from corpus_gen.biod.config import BiodConfig

_TERMS = 1 << 22  # log1p terms summed at once


@functools.lru_cache(maxsize=32)
def log2_binomial(n: int, k: int) -> float:
    """log2 C(n, k) for integers 0 <= k <= n, n of any size (T**L may have thousands of
    digits). C(n, k) = prod_{i<k} (n - i) / k!, summed in logs as k log2 n + sum log2(1 - i/n)
    - log2 k!: lgamma(n + 1) - lgamma(n - k + 1) would cancel two numbers of ~n log n, keeping
    their rounding (~0.005 bits at n ~ 1e12, thousands at n ~ 1e18), and overflow past 1e305."""
    k = min(k, n - k)
    inverse = 1 / n  # 0.0 for an n past float range: then every log1p term is 0 too
    total = k * math.log2(n) - math.lgamma(k + 1) / math.log(2)
    for lo in range(0, k, _TERMS):
        i = np.arange(lo, min(lo + _TERMS, k), dtype=np.float64)
        total += float(np.log1p(-i * inverse).sum()) / math.log(2)
    return total


def information(config: BiodConfig) -> dict[str, float]:
    """The three terms and their sum."""
    names = log2_binomial(config.name_space, config.people)
    values = config.people * config.attributes * config.chunks * math.log2(config.dictionary)
    dictionaries = config.attributes * log2_binomial(config.chunk_space, config.dictionary)
    return {"name_bits": names, "value_bits": values, "dictionary_bits": dictionaries,
            "information_bits": names + values + dictionaries}
