"""A `UnitBatch`'s tokens, loss mask and tokens per document, copied out of the tokenizer's unit
table by one compiled pass (numba, cached on disk) for the families whose generators are
compiled anyway (`Family.compiled`).

The same arrays as `encode_units` and numpy's steps after it (a take of the padded rows, a
boolean compress, a repeat of the units' loss flags, a cumsum over every unit to find the
documents' ends): a pass per step over every unit, each step costing about what copying a
unit's few tokens costs. Here each unit is visited once.
"""

import numpy as np

from corpus_gen.core.jit import njit
from corpus_gen.core.records import UnitBatch
from corpus_gen.core.tokenizer import UnitTable


@njit(cache=True)
def _copy(rows: np.ndarray, length: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
          loss: np.ndarray, masked: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Units `ids`' rows[u, :length[u]] back to back, each token's unit's loss flag (empty when
    not `masked`), and each document's token count. Each unit's whole padded row is copied,
    the next unit's overwriting the padding: a copy of each unit's own length mispredicts its
    loop's end, which costs more than the padding's few stores."""
    width = rows.shape[1]
    total = 0
    for j in range(len(ids)):
        total += length[ids[j]]
    tokens = np.empty(total + width, dtype=rows.dtype)
    mask = np.empty(total + width if masked else 0, dtype=np.uint8)
    counts = np.empty(len(offsets) - 1, dtype=np.int64)
    at = 0
    for d in range(len(offsets) - 1):
        first = at
        for j in range(offsets[d], offsets[d + 1]):
            unit = ids[j]
            for k in range(width):
                tokens[at + k] = rows[unit, k]
            if masked:
                for k in range(width):
                    mask[at + k] = loss[j]
            at += length[unit]
        counts[d] = at - first
    return tokens[:total], mask[:total], counts


def unit_tokens(table: UnitTable, batch: UnitBatch
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The batch's tokens back to back (the table's dtype), their loss mask (uint8; None: every
    token counts) and each document's token count (int64); every unit of the batch is in
    `table` (`CorpusTokenizer.unit_table`)."""
    masked = batch.loss is not None
    loss = batch.loss.astype(np.uint8, copy=False) if masked else np.empty(0, np.uint8)
    tokens, mask, counts = _copy(table.rows, table.length, batch.ids, batch.offsets, loss,
                                 masked)
    return tokens, mask if masked else None, counts
