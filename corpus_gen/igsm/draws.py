"""The `random.Random` draws of the problem generator, spelled out as the `getrandbits` calls
CPython's own methods make, so a draw costs one Python call instead of three or four.

The results are the methods' own, draw for draw (the corpus bytes depend on it): `below(bits, n)`
is `Random._randbelow(n)` (rejection sampling on `n.bit_length()` bits), `shuffled(bits, n)` is
`Random.sample(range(n), n)` and `sample(bits, population, k)` is `Random.sample`, with its
choice between the pool and the set algorithm. `bits` is the generator's bound `getrandbits`.
"""

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
Bits = Callable[[int], int]


def below(bits: Bits, n: int) -> int:
    """A uniform integer in [0, n), n > 0."""
    k = n.bit_length()
    r = bits(k)
    while r >= n:
        r = bits(k)
    return r


def shuffled(bits: Bits, n: int) -> list[int]:
    """0..n-1 in a uniformly random order."""
    return _from_pool(bits, list(range(n)), n)


def _from_pool(bits: Bits, pool: list[T], k: int) -> list[T]:
    """`Random.sample`'s pool algorithm: k picks, each slot refilled by the pool's last item."""
    out = []
    for m in range(len(pool), len(pool) - k, -1):
        b = m.bit_length()
        j = bits(b)
        while j >= m:
            j = bits(b)
        out.append(pool[j])
        pool[j] = pool[m - 1]
    return out


def sample(bits: Bits, population: Sequence[T], k: int) -> list[T]:
    """k distinct items of `population`, in the order drawn."""
    n = len(population)
    if not 0 <= k <= n:
        raise ValueError("Sample larger than population or is negative")
    setsize = 21  # the threshold Random.sample uses to pick its algorithm
    if k > 5:
        setsize += 4 ** math.ceil(math.log(k * 3, 4))
    if n <= setsize:
        return _from_pool(bits, list(population), k)
    out = []
    selected: set[int] = set()
    b = n.bit_length()
    for _ in range(k):
        j = bits(b)
        while j >= n or j in selected:
            j = bits(b)
        selected.add(j)
        out.append(population[j])
    return out


def two(bits: Bits, population: Sequence[T]) -> tuple[T, T]:
    """`sample(bits, population, 2)` without copying the population."""
    n = len(population)
    b = n.bit_length()
    j = bits(b)
    while j >= n:
        j = bits(b)
    if n <= 21:  # the pool algorithm: the first pick's slot now holds the last item
        b = (n - 1).bit_length()
        i = bits(b)
        while i >= n - 1:
            i = bits(b)
        return population[j], population[n - 1] if i == j else population[i]
    i = bits(b)
    while i >= n or i == j:
        i = bits(b)
    return population[j], population[i]
