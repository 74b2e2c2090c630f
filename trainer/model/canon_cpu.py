"""Canon's convolution on CPU as two compiled loops (numba, cached on disk; canon.py imports this
module at a Canon model's first CPU pass, so a model without Canon never loads numba).

Both run over the B * T tokens of a pass as one sequence, x [N, C] and the taps [K, C] (row
K-1-j: the weight of the token j places back); `reach[n]` (0..K-1) is how many tokens before n
are of n's own row and document, so no sum reads across one. Each is one pass over its
activations, which ATen could not give (a convolution call, its boundary fix-ups and the taps'
gradient were three passes and more): the backward computes a token's input gradient and its
part of the taps' gradient from the same rows while they are in cache.

The tokens are cut into fixed chunks of `_CHUNK`, which the threads of torch's own OpenMP team
take one at a time (`GOMP_parallel`, called through ctypes on a compiled C callback): the team
that runs torch's operators, whose threads spin between them, starts on a chunk at once, where a
second pool of threads (ours or numba's) fought those spinning threads for the cores. Each chunk
writes its own part of the taps' gradient and the parts are added in chunk order: the same bits
for any thread count. Without an OpenMP runtime that has `GOMP_parallel` (GNU's, LLVM's and
Intel's all have it), the chunks run one after the other on the calling thread.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache

import numpy as np
import torch
from llvmlite import ir
from numba import carray, cfunc, types
from numba.core.extending import intrinsic
from torch import Tensor

from corpus_gen.core.jit import njit

_CHUNK = 256  # tokens per task: 16 tasks for the quickstart's 16 x 256 tokens


def forward(xs: list[Tensor], taps: list[Tensor], reach: Tensor) -> list[Tensor]:
    """For each part x [N, C_i] and its taps [K, C_i] (one site's channels, split as its inputs
    come): z_n = sum_(j <= reach[n]) taps[K-1-j] * x_(n-j), [N, C_i]."""
    zs = [torch.empty_like(x) for x in xs]
    _run(_FORWARD, reach, [(x, t, z, z, z[:1]) for x, t, z in zip(xs, taps, zs)])  # z: unused
    return zs


def backward(dzs: list[Tensor], xs: list[Tensor], taps: list[Tensor], reach: Tensor
             ) -> tuple[list[Tensor], list[Tensor]]:
    """forward's gradients for the outputs' gradients dz [N, C_i]: each x's [N, C_i] and each
    part's taps' [K, C_i]."""
    chunks = -(-len(reach) // _CHUNK)
    dxs = [torch.empty_like(x) for x in xs]
    parts = [x.new_empty(chunks, *t.shape) for x, t in zip(xs, taps)]  # [chunks, K, C_i]
    _run(_BACKWARD, reach, list(zip(xs, taps, dxs, dzs, parts)))
    return dxs, [torch.from_numpy(p.numpy().sum(0)) for p in parts]  # the chunks added in order


def _run(tasks: dict, reach: Tensor, parts: list[tuple[Tensor, ...]]) -> None:
    """A task over every chunk of every part's tokens, on torch's OpenMP team where there is
    one; each part is (x, taps, out, dz, taps' parts)."""
    parts = [tuple(t.contiguous() for t in part) for part in parts]  # read by address
    reach = reach.contiguous()
    header = [0, -(-len(reach) // _CHUNK), len(parts), len(reach), len(parts[0][1]),
              reach.data_ptr()]
    record = np.array(header + [value for x, *arrays in parts
                                for value in (x.shape[1], x.data_ptr(),
                                              *(a.data_ptr() for a in arrays))],
                      dtype=np.int64)
    task, threads = tasks[parts[0][0].dtype], torch.get_num_threads()
    parallel = _openmp_parallel() if threads > 1 else None
    if parallel is None:
        task.ctypes(record.ctypes.data)
    else:  # ctypes lets the GIL go while the team works
        parallel(task.address, record.ctypes.data, threads, 0)


@cache
def _openmp_parallel() -> ctypes._CFuncPtr | None:
    """`GOMP_parallel(fn, data, threads, flags)` of the OpenMP runtime torch loaded (found among
    the process's mapped files, torch's own first), or None."""
    try:
        with open("/proc/self/maps") as maps:
            files = {line.split()[-1] for line in maps if line.rstrip().endswith((".so", ".so.1",
                                                                                   ".so.5"))}
    except OSError:  # not Linux
        return None
    runtimes = sorted((f for f in files if os.path.basename(f).startswith(
        ("libgomp", "libiomp", "libomp"))), key=lambda f: os.path.dirname(torch.__file__) not in f)
    for path in runtimes:
        function = getattr(ctypes.CDLL(path), "GOMP_parallel", None)
        if function is not None:
            function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            function.restype = None
            return function
    return None


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
def _backward(dz, x, taps, reach, dx, dtaps, start, stop):  # pragma: no cover - compiled
    """For n in start..stop-1, one token at a time: dx_n = sum of taps[K-1-j] * dz_(n+j) over
    the tokens n + j that read n (j <= their reach), and into dtaps [K, C] (zeroed first) n's
    part of the taps' gradient: row K-1-j gets dz_n * x_(n-j), j <= reach[n]."""
    length, width = x.shape
    back = taps.shape[0] - 1
    dtaps[:] = 0
    for n in range(start, stop):
        out = dx[n]
        if (back == 3 and n + 3 < length and reach[n + 3] == 3 and reach[n + 2] >= 2
                and reach[n + 1] >= 1):
            d0, d1, d2, d3 = dz[n], dz[n + 1], dz[n + 2], dz[n + 3]
            w0, w1, w2, w3 = taps[3], taps[2], taps[1], taps[0]
            for c in range(width):
                out[c] = w0[c] * d0[c] + w1[c] * d1[c] + w2[c] * d2[c] + w3[c] * d3[c]
        else:
            for c in range(width):
                out[c] = taps[back, c] * dz[n, c]
            for j in range(1, back + 1):
                if n + j < length and reach[n + j] >= j:
                    for c in range(width):
                        out[c] += taps[back - j, c] * dz[n + j, c]
        grad = dz[n]
        if back == 3 and reach[n] == 3:
            x0, x1, x2, x3 = x[n], x[n - 1], x[n - 2], x[n - 3]
            r0, r1, r2, r3 = dtaps[3], dtaps[2], dtaps[1], dtaps[0]
            for c in range(width):
                r0[c] += grad[c] * x0[c]
                r1[c] += grad[c] * x1[c]
                r2[c] += grad[c] * x2[c]
                r3[c] += grad[c] * x3[c]
            continue
        for j in range(reach[n] + 1):
            row, earlier = dtaps[back - j], x[n - j]
            for c in range(width):
                row[c] += grad[c] * earlier[c]


# A task reads its arguments from an int64 record: [0] the next unit to take (each thread adds
# one to it atomically), [1] chunks, [2] parts P, [3] tokens N, [4] taps K, [5] the address of
# reach (int64 [N]); then for each part its width C_i and the addresses of x, taps [K, C_i], the
# output (z or dx), dz and the taps' parts [chunks, K, C_i]. Unit u is chunk u // P of part u % P.
_HEADER, _PER_PART = 6, 6


@intrinsic
def _record(typingctx, data):  # pragma: no cover - compiled
    """The task's void* argument as the int64 record it points to."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64).as_pointer())
    return types.CPointer(types.int64)(types.voidptr), codegen


@intrinsic
def _take_unit(typingctx, data):  # pragma: no cover - compiled
    """Atomically add one to the record's first value; the value before."""
    def codegen(context, builder, signature, args):
        counter = builder.bitcast(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", counter, ir.Constant(ir.IntType(64), 1), "monotonic")
    return types.int64(types.voidptr), codegen


@intrinsic
def _pointer(typingctx, address, like):  # pragma: no cover - compiled
    """The int64 `address` as a pointer to values of like's type."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(like).as_pointer())
    return types.CPointer(like)(types.int64, like), codegen


@njit(cache=True, nogil=True)
def _units(data, like, backward):  # pragma: no cover - compiled
    """Take units until none is left and run the forward or the backward kernel on each."""
    header = carray(_record(data), _HEADER)
    chunks, count, length, kernel = header[1], header[2], header[3], header[4]
    record = carray(_record(data), _HEADER + _PER_PART * count)
    reach = carray(_pointer(record[5], np.int64(0)), length)
    while True:
        unit = _take_unit(data)
        if unit >= chunks * count:
            return
        chunk, at = unit // count, _HEADER + _PER_PART * (unit % count)
        width = record[at]
        x = carray(_pointer(record[at + 1], like), (length, width))
        taps = carray(_pointer(record[at + 2], like), (kernel, width))
        out = carray(_pointer(record[at + 3], like), (length, width))
        start, stop = chunk * _CHUNK, min(length, (chunk + 1) * _CHUNK)
        if backward:
            dz = carray(_pointer(record[at + 4], like), (length, width))
            parts = carray(_pointer(record[at + 5], like), (chunks, kernel, width))
            _backward(dz, x, taps, reach, out, parts[chunk], start, stop)
        else:
            _forward(x, taps, reach, out, start, stop)


_TASK = types.void(types.voidptr)


@cfunc(_TASK, nogil=True, cache=True)
def _forward_f32(data):  # pragma: no cover - compiled
    _units(data, np.float32(0), False)


@cfunc(_TASK, nogil=True, cache=True)
def _forward_f64(data):  # pragma: no cover - compiled
    _units(data, np.float64(0), False)


@cfunc(_TASK, nogil=True, cache=True)
def _backward_f32(data):  # pragma: no cover - compiled
    _units(data, np.float32(0), True)


@cfunc(_TASK, nogil=True, cache=True)
def _backward_f64(data):  # pragma: no cover - compiled
    _units(data, np.float64(0), True)


_FORWARD = {torch.float32: _forward_f32, torch.float64: _forward_f64}
_BACKWARD = {torch.float32: _backward_f32, torch.float64: _backward_f64}
