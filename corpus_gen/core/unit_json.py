"""The `json` members of a `UnitBatch`'s documents, assembled by one compiled pass (numba, cached
on disk) for the families whose generators are compiled anyway (`Family.compiled`).

Document i's object is `{"text":"` + its units' JSON-escaped forms joined by single spaces +
`",` + its meta without the leading `{`: the bytes `orjson.dumps({"text": text, **meta})`
writes. In Python that is a join and a format per document, ~1.3 us, as much as drawing one of
mano's documents; numpy's byte gathers cost as much again (a pass per step over every byte),
so the objects are copied out in one loop, a unit's bytes in 8-byte blocks. numba's ~1 s
import is paid once per process, which a compiled family pays for its own kernels already.
"""

from functools import lru_cache

import numpy as np

from corpus_gen.core.jit import njit
from corpus_gen.core.records import UnitBatch, Units

_PREFIX = b'{"text":"'
_PREFIX_ARRAY = np.frombuffer(_PREFIX, dtype=np.uint8)
_BLOCK = 8  # bytes a unit's row is copied by


@lru_cache(maxsize=16)
def _unit_bytes(units: Units) -> tuple[np.ndarray, np.ndarray]:
    """Every unit's JSON-escaped UTF-8 bytes, a row each padded to whole blocks of 8 bytes
    [units, 8 * blocks], and each one's length. Units hash by identity: one table per
    vocabulary."""
    encoded = [s.encode() for s in units.json_strings.tolist()]
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    width = -(-int(lengths.max()) // _BLOCK) * _BLOCK
    rows = np.zeros((len(encoded), width), dtype=np.uint8)
    rows[np.arange(width) < lengths[:, None]] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return rows, lengths


def _meta_bytes(metas: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The metas' UTF-8 bytes back to back, and where each starts, then the end."""
    joined = "".join(metas)
    encoded = joined.encode()
    lengths = (np.fromiter(map(len, metas), np.int64, len(metas)) if len(encoded) == len(joined)
               else np.fromiter((len(m.encode()) for m in metas), np.int64, len(metas)))
    return np.frombuffer(encoded, dtype=np.uint8), np.concatenate([[0], np.cumsum(lengths)])


@njit(cache=True)
def _assemble(prefix: np.ndarray, units: np.ndarray, unit_lengths: np.ndarray, ids: np.ndarray,
              offsets: np.ndarray, metas: np.ndarray, meta_bounds: np.ndarray, out: np.ndarray,
              bounds: np.ndarray) -> None:
    """Write each document's object then a comma into `out`, each one's start into `bounds`.
    A unit's row goes in whole 8-byte blocks, the next unit's overwriting the padding: a copy
    of each unit's own length mispredicts its loop's end (about twice the time), a slice
    costs more than its few bytes. `out` has a row's width of room past the end."""
    at = 0
    for d in range(len(offsets) - 1):
        bounds[d] = at
        for k in range(len(prefix)):
            out[at + k] = prefix[k]
        at += len(prefix)
        for j in range(offsets[d], offsets[d + 1]):
            if j > offsets[d]:
                out[at] = 32  # " "
                at += 1
            row = units[ids[j]]
            for block in range(0, len(row), _BLOCK):
                for k in range(_BLOCK):
                    out[at + block + k] = row[block + k]
            at += unit_lengths[ids[j]]
        out[at] = 34  # '"'
        out[at + 1] = 44  # ","
        at += 2
        for k in range(meta_bounds[d] + 1, meta_bounds[d + 1]):  # the meta without its "{"
            out[at] = metas[k]
            at += 1
        out[at] = 44
        at += 1
    bounds[len(offsets) - 1] = at


def json_objects(batch: UnitBatch) -> tuple[np.ndarray, np.ndarray]:
    """The documents' objects, each followed by a comma, back to back (uint8), and where each
    starts, then the end ([documents + 1])."""
    units, unit_lengths = _unit_bytes(batch.units)
    metas, meta_bounds = _meta_bytes(batch.metas)
    documents = len(batch)
    spaces = np.maximum(np.diff(batch.offsets) - 1, 0).sum()
    # per document: prefix, units and the spaces between, '",', the meta less "{", ","
    size = (int(unit_lengths[batch.ids].sum()) + int(spaces)
            + documents * (len(_PREFIX) + 2) + len(metas))
    objects = np.empty(size + units.shape[1], dtype=np.uint8)  # room for a unit's last block
    bounds = np.empty(documents + 1, dtype=np.int64)
    _assemble(_PREFIX_ARRAY, units, unit_lengths, batch.ids, batch.offsets, metas, meta_bounds,
              objects, bounds)
    return objects[:size], bounds
