"""Exact counts in bits: the information a corpus holds (Part 3.3's capacity bounds)."""

import functools
import math

import numpy as np

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
