"""The counter-based hash of `words.hash_each` for one key and counter, for compiled loops
(numba, cached on disk): brevo's DAG walk and layout, depo's draws and mano's expressions hash
their draws as they go, where hashing them with numpy first cost more than the loops."""

import numpy as np

from corpus_gen.core.jit import njit
from corpus_gen.core.words import GAMMA


@njit(cache=True)
def hash_draw(key, counter):  # pragma: no cover - compiled
    """splitmix64: `key` the state, `counter` how many steps along."""
    x = key + counter * np.uint64(GAMMA)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
