"""corpus_gen/core/jit.py: numba set up without importing SciPy, which stays importable."""

import subprocess
import sys

CHECK = """
import sys
import numpy as np
from corpus_gen.core.jit import njit

@njit
def total(a):
    s = 0
    for x in a:
        s += x
    return s

assert total(np.arange(5)) == 10
print("scipy" in sys.modules)
import scipy.linalg
print(scipy.linalg.norm(np.ones(4)))
"""


def test_numba_loads_without_scipy_and_scipy_imports_afterwards():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "2.0"]
