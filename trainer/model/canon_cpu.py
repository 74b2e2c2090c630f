"""Canon's convolution on CPU as two compiled loops (numba, cached on disk; canon.py imports this
module at a Canon model's first CPU pass, so a model without Canon never loads numba).

Both run over the B * T tokens of a pass as one sequence, x [N, C] and the site's weight w [C, K]
(w[:, K-1-j] weighs the token j places back; each unit of work copies its channels' taps into rows
[K, C_p], which the loops read a row at a time); `reach[n]` (0..K-1) is how many tokens before n
are of n's own row and document, so no sum reads across one. Each is one pass over its activations,
which ATen could not give (a convolution call, its boundary fix-ups and the taps' gradient were
three passes and more): the backward computes a token's input gradient and its part of the taps'
gradient from the same rows while they are in cache.

The tokens are cut into fixed chunks of `_CHUNK`, which the threads of torch's own OpenMP team take
one at a time (`GOMP_parallel`, called through ctypes on a compiled C callback): the team that runs
torch's operators, whose threads spin between them, starts on a chunk at once, where a second pool
of threads (ours or numba's) fought those spinning threads for the cores. Each chunk writes its own
part of the taps' gradient, and the thread that finishes the last unit adds the parts in chunk
order into w's gradient: the same bits for any thread count. Without an OpenMP runtime that has
`GOMP_parallel` (GNU's, LLVM's and Intel's all have it), the chunks run one after the other on the
calling thread.
"""

from __future__ import annotations

import ctypes
import os
import struct
from functools import cache
from itertools import accumulate

import numpy as np
import torch
from llvmlite import ir
from numba import carray, cfunc, types
from numba.core.extending import intrinsic
from torch import Tensor

from corpus_gen.core.jit import njit

_CHUNK = 256  # tokens per task: 16 tasks for the quickstart's 16 x 256 tokens


def forward(xs: list[Tensor], w: Tensor, extra: float, reach: Tensor) -> list[Tensor]:
    """For each part x [N, C_i] of a site whose weight is w [C, K] (the parts' channels in order;
    w[:, K-1-j] weighs the token j places back): z_n = sum_(j <= reach[n]) w[:, K-1-j] * x_(n-j)
    + extra * x_n, [N, C_i]."""
    zs = [torch.empty_like(x) for x in xs]
    _run(_FORWARD, xs, zs, xs, w, extra, reach, w[:0], w[:0])  # dz, dw, scratch: unused
    return zs


def backward(dzs: list[Tensor], xs: list[Tensor], w: Tensor, extra: float, reach: Tensor
             ) -> tuple[list[Tensor], Tensor]:
    """forward's gradients for the outputs' gradients dz [N, C_i]: each x's [N, C_i], and w's
    [C, K]."""
    dxs = [torch.empty_like(x) for x in xs]
    dw = torch.empty_like(w)
    scratch = w.new_empty(_chunks(reach), *w.shape)  # each chunk's part of dw, in chunk order
    _run(_BACKWARD, xs, dxs, dzs, w, extra, reach, dw, scratch)
    return dxs, dw


def _run(tasks: dict, xs: list[Tensor], outs: list[Tensor], dzs: list[Tensor], w: Tensor,
         extra: float, reach: Tensor, dw: Tensor, scratch: Tensor) -> None:
    """A task over every chunk of every part's tokens, on torch's OpenMP team where there is
    one. All arrays are contiguous (the kernels read them by address)."""
    offsets = accumulate((x.shape[1] for x in xs[:-1]), initial=0)  # each part's first channel
    record = np.array([0, 0, _chunks(reach), len(xs), len(reach), w.shape[1],
                       w.shape[0], _bits(extra), reach.data_ptr(), w.data_ptr(), dw.data_ptr(),
                       scratch.data_ptr()]
                      + [value for x, offset, out, dz in zip(xs, offsets, outs, dzs)
                         for value in (x.shape[1], offset, x.data_ptr(), out.data_ptr(),
                                       dz.data_ptr())], dtype=np.int64)
    task, threads = tasks[w.dtype], torch.get_num_threads()
    parallel = _openmp_parallel() if threads > 1 else None
    if parallel is None:
        task.ctypes(record.ctypes.data)
    else:  # ctypes lets the GIL go while the team works
        parallel(task.address, record.ctypes.data, threads, 0)


def _chunks(reach: Tensor) -> int:
    """How many chunks of _CHUNK tokens a pass of len(reach) tokens has (the last one shorter)."""
    return -(-len(reach) // _CHUNK)


def _bits(value: float) -> int:
    """The bits of `value` as a float64, as an int64 (the record holds int64s)."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


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


# A task reads its arguments from an int64 record: [0] the next unit to take and [1] the units
# done (each thread adds one to them atomically), [2] chunks, [3] parts P, [4] tokens N, [5] taps
# K, [6] the site's channels C, [7] extra (a float64's bits), then the addresses of [8] reach
# (int64 [N]), [9] w [C, K], [10] dw [C, K] and [11] the chunks' parts of dw [chunks, C, K] (in
# each chunk, part p's [K, C_p] at p's channel offset times K); then for each part its width C_p,
# channel offset and the addresses of x, the output (z or dx) and dz. Unit u is chunk u // P of
# part u % P.
_HEADER, _PER_PART = 12, 5


@intrinsic
def _record(typingctx, data):  # pragma: no cover - compiled
    """The task's void* argument as the int64 record it points to."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64).as_pointer())
    return types.CPointer(types.int64)(types.voidptr), codegen


@intrinsic
def _add_one(typingctx, data, at):  # pragma: no cover - compiled
    """Atomically add one to the record's value at `at`; the value before. Acquire-release: the
    thread that finishes the last unit sees what every other unit wrote."""
    def codegen(context, builder, signature, args):
        record = builder.bitcast(args[0], ir.IntType(64).as_pointer())
        counter = builder.gep(record, [args[1]])
        return builder.atomic_rmw("add", counter, ir.Constant(ir.IntType(64), 1), "acq_rel")
    return types.int64(types.voidptr, types.int64), codegen


@intrinsic
def _as_float(typingctx, bits):  # pragma: no cover - compiled
    """The float64 whose bits the int64 holds."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _pointer(typingctx, address, like):  # pragma: no cover - compiled
    """The int64 `address` as a pointer to values of like's type."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(like).as_pointer())
    return types.CPointer(like)(types.int64, like), codegen


@njit(cache=True, nogil=True)
def _units(data, like, backward):  # pragma: no cover - compiled
    """Take units until none is left and run the forward or the backward kernel on each; in the
    backward, the thread that finishes the last unit adds the chunks' parts of dw in order."""
    header = carray(_record(data), _HEADER)
    chunks, count, length, kernel, channels = header[2], header[3], header[4], header[5], header[6]
    extra = _as_float(header[7])
    record = carray(_record(data), _HEADER + _PER_PART * count)
    reach = carray(_pointer(record[8], np.int64(0)), length)
    w = carray(_pointer(record[9], like), (channels, kernel))
    scratch = carray(_pointer(record[11], like), chunks * channels * kernel)
    units = chunks * count
    while True:
        unit = _add_one(data, 0)
        if unit >= units:
            return
        chunk, at = unit // count, _HEADER + _PER_PART * (unit % count)
        width, offset = record[at], record[at + 1]
        x = carray(_pointer(record[at + 2], like), (length, width))
        out = carray(_pointer(record[at + 3], like), (length, width))
        taps = np.empty((kernel, width), x.dtype)  # [K, C_p]: a row per tap, for the kernels
        for c in range(width):
            for tap in range(kernel):
                taps[tap, c] = w[offset + c, tap]
            taps[kernel - 1, c] += extra
        start, stop = chunk * _CHUNK, min(length, (chunk + 1) * _CHUNK)
        if not backward:
            _forward(x, taps, reach, out, start, stop)
            continue
        dz = carray(_pointer(record[at + 4], like), (length, width))
        begin = (chunk * channels + offset) * kernel
        _backward(dz, x, taps, reach, out, scratch[begin:begin + kernel * width].reshape(
            (kernel, width)), start, stop)
        if _add_one(data, 1) == units - 1:  # the last unit done: dw, the chunks in order
            dw = carray(_pointer(record[10], like), (channels, kernel))
            _add_chunks(scratch.reshape((chunks, channels * kernel)), record, count, dw)


@njit(cache=True, nogil=True)
def _add_chunks(scratch, record, count, dw):  # pragma: no cover - compiled
    """dw [C, K] from the chunks' parts [chunks, C * K], each part's [K, C_p] at its offset."""
    kernel = dw.shape[1]
    dw[:] = 0
    for chunk in range(scratch.shape[0]):
        for part in range(count):
            at = _HEADER + _PER_PART * part
            width, offset = record[at], record[at + 1]
            block = scratch[chunk, offset * kernel:(offset + width) * kernel]
            for tap in range(kernel):
                for c in range(width):
                    dw[offset + c, tap] += block[tap * width + c]


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
