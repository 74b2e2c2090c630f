"""A chi-square check of drawn outcomes against exact probabilities, for the draw tests."""

from collections import Counter
from collections.abc import Hashable, Iterable

import numpy as np


def chi_square_fits(drawn: Iterable[Hashable], exact: dict[Hashable, float]) -> tuple[float, int]:
    """(statistic, degrees of freedom) of the drawn outcomes against `exact` (probabilities
    summing to 1). Fails at once on an outcome `exact` gives no chance. A fit at a fixed seed
    is a statistic below df + 6 sqrt(2 df): about six standard deviations."""
    counts = Counter(drawn)
    assert set(counts) <= set(exact), f"impossible outcomes drawn: {set(counts) - set(exact)}"
    total = sum(counts.values())
    expected = np.array([total * p for p in exact.values()])
    assert expected.min() >= 5, "too few draws for a chi-square test"
    observed = np.array([counts[outcome] for outcome in exact])
    df = len(exact) - 1
    return float(((observed - expected) ** 2 / expected).sum()), df


def fits(drawn: Iterable[Hashable], exact: dict[Hashable, float]) -> bool:
    statistic, df = chi_square_fits(drawn, exact)
    return statistic < df + 6 * np.sqrt(2 * df)
