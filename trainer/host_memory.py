"""Freed host memory kept for the next step, for training on CPU (glibc's malloc).

A training step allocates and frees the same activation-sized buffers every step. By default
glibc hands large freed blocks back to the kernel (blocks above its mmap threshold, and the
heap's free top above its trim threshold), so the next step's buffers are fresh pages, each
zeroed by the kernel on its first touch: on the quickstart's model about 35,000 page faults and
~50 ms of system time per ~210 ms step (bench/bench_host_memory.py). Raising both thresholds
keeps the freed memory in the process for the next step to reuse; the process's memory stays at
its peak, which a training loop reaches every step anyway. PyTorch's CPU tuning guides get the
same from jemalloc or tcmalloc through LD_PRELOAD; this needs neither.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 1 << 30  # blocks up to 1 GiB come from the heap, and go back to it
TRIM_THRESHOLD = 1 << 30  # up to 1 GiB of free heap top stays in the process


def keep_freed_host_memory() -> bool:
    """Set glibc's thresholds so that freed blocks stay for reuse; False where the C library
    is not glibc (musl, macOS: nothing is changed there). Process-wide and for good."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
