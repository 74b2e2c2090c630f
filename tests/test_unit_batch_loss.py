"""A UnitBatch's per-unit loss flags reach the shard's mask exactly as the same documents'
masked character spans do through the Record path."""

import numpy as np
import pytest

from corpus_gen.core.records import UnitBatch, Units, batch_records, document
from corpus_gen.core.vocabulary import Vocabulary
from corpus_gen.core.write import _documents

NAMES = ("<eos>", "a", "bb", "=>", "ccc")


def _masks(tokenizer, batch, compiled=False) -> list[list[int]]:
    """Each document's loss mask as the shard writer lays it out (`compiled`: a compiled
    family's writer path)."""
    docs = _documents(tokenizer, batch, compiled=compiled)
    bounds = docs.token_bounds().tolist()
    return [docs.full_mask()[a:b].tolist() for a, b in zip(bounds, bounds[1:])]


def _batch(loss):
    units = Units(list(NAMES[1:]))  # unit i is token name i + 1
    ids = np.array([0, 1, 2, 3, 1, 2, 0], dtype=np.int64)
    offsets = np.array([0, 4, 7], dtype=np.int64)
    return UnitBatch(units, ids, offsets, ['{"n":0}', '{"n":1}'], loss)


@pytest.mark.parametrize("compiled", [False, True])
def test_unit_loss_flags_become_the_token_mask_and_the_record_spans(compiled):
    vocabulary = Vocabulary(NAMES, "test")
    loss = np.array([0, 0, 1, 1, 0, 1, 1], dtype=np.uint8)
    batch = _batch(loss)
    masks = _masks(vocabulary, batch, compiled)
    assert masks == [[0, 0, 1, 1], [0, 1, 1]]
    records = batch_records(batch)
    assert records[0].text == "a bb => ccc" and records[0].masked == ((0, 1), (2, 4))
    assert records[1].masked == ((0, 2),)
    # the Record path writes the same masks
    assert _masks(vocabulary, [document(r) for r in records]) == masks


@pytest.mark.parametrize("compiled", [False, True])
def test_without_flags_every_token_counts(compiled):
    assert _masks(Vocabulary(NAMES, "test"), _batch(None), compiled) == [[1] * 4, [1] * 3]
    assert [r.masked for r in batch_records(_batch(None))] == [(), ()]
