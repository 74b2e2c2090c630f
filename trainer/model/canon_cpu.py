"""Canon's convolution on CPU as two compiled loops (numba, cached on disk; canon.py imports this
module at a Canon model's first CPU pass, so a model without Canon never loads numba).

Both run over the B * T tokens of a pass as one sequence, x [N, C] and the taps [K, C] (row
K-1-j: the weight of the token j places back); `reach[n]` (0..K-1) is how many tokens before n
are of n's own row and document, so no sum reads across one. Each is one pass over its
activations, which ATen could not give (a convolution call, its boundary fix-ups and the taps'
gradient were three passes and more): the backward computes the input's gradient and the taps'
gradient from the same rows while they are in cache.

The tokens are cut into fixed chunks, shared among torch's thread count: the caller's thread and
a small pool (the loops release the GIL). Not numba's parallel loops: their OpenMP pool, beside
torch's, stalled calls for tens of milliseconds on a busy machine. Each chunk sums its own taps'
gradient and the chunks' sums are added in order: the same bits for any thread count.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np
import torch
from torch import Tensor

from corpus_gen.core.jit import njit

_CHUNK = 1024  # tokens per task


def forward(x: Tensor, taps: Tensor, reach: Tensor) -> Tensor:
    """z_n = sum_(j <= reach[n]) taps[K-1-j] * x_(n-j) for x [N, C], taps [K, C]: [N, C]."""
    z = torch.empty_like(x)
    arrays = x.numpy(), taps.numpy(), reach.numpy(), z.numpy()
    _each_chunk(len(x), lambda start, stop: _forward(*arrays, start, stop))
    return z


def backward(dz: Tensor, x: Tensor, taps: Tensor, reach: Tensor) -> tuple[Tensor, Tensor]:
    """forward's gradients for the output's gradient dz [N, C]: x's [N, C] and the taps' [K, C]."""
    dx = torch.empty_like(x)
    arrays = dz.numpy(), x.numpy(), taps.numpy(), reach.numpy(), dx.numpy()
    first, *rest = _each_chunk(len(x), lambda start, stop: _backward(*arrays, start, stop))
    for part in rest:  # in chunk order
        first += part
    return dx, torch.from_numpy(first)


def _each_chunk(length: int, run: Callable[[int, int], object]) -> list:
    """run(start, stop) for each chunk of `length` tokens, the chunks split in as many runs of
    consecutive ones as torch has threads (the first on this thread): the results in order."""
    chunks = [(start, min(length, start + _CHUNK)) for start in range(0, length, _CHUNK)]
    threads = min(torch.get_num_threads(), len(chunks))
    shares = [chunks[i * len(chunks) // threads:(i + 1) * len(chunks) // threads]
              for i in range(threads)]
    pool = _pool(threads - 1, os.getpid()) if threads > 1 else None
    pending = [pool.submit(lambda share=share: [run(*c) for c in share]) for share in shares[1:]]
    return [run(*c) for c in shares[0]] + [out for done in pending for out in done.result()]


@cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """The pool of `workers` threads of process `pid` (a forked child has none of its
    parent's threads: it makes its own)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="canon")


# Kernel 4 (the default, the paper's): a token whose taps all read its document sums its four
# rows at once, each output written once. Accumulating into the output row tap by tap reads
# back values just stored, which stalls (1.1-1.5x slower at 128-512 channels).


@njit(cache=True, nogil=True, fastmath=True)
def _forward(x, taps, reach, z, start, stop):  # pragma: no cover - compiled
    """fastmath: fused multiply-adds."""
    back = taps.shape[0] - 1
    for n in range(start, stop):
        out = z[n]
        if back == 3 and reach[n] == 3:
            x0, x1, x2, x3 = x[n], x[n - 1], x[n - 2], x[n - 3]
            w0, w1, w2, w3 = taps[3], taps[2], taps[1], taps[0]
            for c in range(x.shape[1]):
                out[c] = w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c] + w3[c] * x3[c]
            continue
        now, tap = x[n], taps[back]
        for c in range(x.shape[1]):
            out[c] = tap[c] * now[c]
        for j in range(1, reach[n] + 1):
            earlier, tap = x[n - j], taps[back - j]
            for c in range(x.shape[1]):
                out[c] += tap[c] * earlier[c]


@njit(cache=True, nogil=True, fastmath=True)
def _backward(dz, x, taps, reach, dx, start, stop):  # pragma: no cover - compiled
    """dx_n = sum of taps[K-1-j] * dz_(n+j) over the tokens n + j that read n (j <= their
    reach), for n in start..stop-1; returns those tokens' part of the taps' gradient [K, C]:
    row K-1-j sums dz_n * x_(n-j), j <= reach[n], two tokens at a time where both read all
    their taps (each row of it then loaded and stored half as often)."""
    length, width = x.shape
    back = taps.shape[0] - 1
    for n in range(start, stop):
        out = dx[n]
        if (back == 3 and n + 3 < length and reach[n + 1] >= 1 and reach[n + 2] >= 2
                and reach[n + 3] == 3):
            d0, d1, d2, d3 = dz[n], dz[n + 1], dz[n + 2], dz[n + 3]
            w0, w1, w2, w3 = taps[3], taps[2], taps[1], taps[0]
            for c in range(width):
                out[c] = w0[c] * d0[c] + w1[c] * d1[c] + w2[c] * d2[c] + w3[c] * d3[c]
            continue
        for c in range(width):
            out[c] = taps[back, c] * dz[n, c]
        for j in range(1, back + 1):
            if n + j < length and reach[n + j] >= j:
                for c in range(width):
                    out[c] += taps[back - j, c] * dz[n + j, c]
    dtaps = np.zeros_like(taps)  # allocated here: the compiler knows it aliases no input
    n = start
    while n < stop:
        if n + 1 < stop and reach[n] == back and reach[n + 1] == back:
            for j in range(back + 1):
                row, a0, a1, b0, b1 = dtaps[back - j], dz[n], dz[n + 1], x[n - j], x[n + 1 - j]
                for c in range(width):
                    row[c] += a0[c] * b0[c] + a1[c] * b1[c]
            n += 2
            continue
        for j in range(reach[n] + 1):
            for c in range(width):
                dtaps[back - j, c] += dz[n, c] * x[n - j, c]
        n += 1
    return dtaps
