"""numba's `njit`, for physlm's compiled kernels, loaded without numba's BLAS probe.

On its first compile or cache load in a process numba checks whether BLAS is available by
importing `scipy.linalg`, which with a current SciPy costs ~0.4 s, a third of numba's whole
start-up and more than most `physlm gen` commands spend drawing. No physlm kernel uses BLAS
(no `np.dot` or `@` in compiled code), so SciPy is hidden while numba sets itself up, and
only then: a later `import scipy` in the same process works as usual.
"""

import sys

_hide_scipy = "scipy" not in sys.modules
if _hide_scipy:
    sys.modules["scipy"] = None  # `import scipy` raises ImportError: numba records "no BLAS"
try:
    from numba import njit
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()  # the setup that runs the probe, done now
finally:
    if _hide_scipy:
        del sys.modules["scipy"]

__all__ = ["njit"]
