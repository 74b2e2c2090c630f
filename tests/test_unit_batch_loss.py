"""A UnitBatch's per-unit loss flags reach the shard's mask exactly as the same documents'
masked character spans do through the Record path."""

import numpy as np

from corpus_gen.core.records import UnitBatch, Units, batch_records, document
from corpus_gen.core.vocabulary import Vocabulary
from corpus_gen.core.write import _members

NAMES = ("<eos>", "a", "bb", "=>", "ccc")


def _batch(loss):
    units = Units(list(NAMES[1:]))  # unit i is token name i + 1
    ids = np.array([0, 1, 2, 3, 1, 2, 0], dtype=np.int64)
    offsets = np.array([0, 4, 7], dtype=np.int64)
    return UnitBatch(units, ids, offsets, ['{"n":0}', '{"n":1}'], loss)


def test_unit_loss_flags_become_the_token_mask_and_the_record_spans():
    vocabulary = Vocabulary(NAMES, "test")
    loss = np.array([0, 0, 1, 1, 0, 1, 1], dtype=np.uint8)
    batch = _batch(loss)
    _, _, masks, counts = _members(vocabulary, batch)
    assert counts == [4, 3]
    got = [np.frombuffer(m[-n:], dtype=np.uint8).tolist() for m, n in zip(masks, counts)]
    assert got == [[0, 0, 1, 1], [0, 1, 1]]
    records = batch_records(batch)
    assert records[0].text == "a bb => ccc" and records[0].masked == ((0, 1), (2, 4))
    assert records[1].masked == ((0, 2),)
    # the Record path writes the same members
    _, _, record_masks, _ = _members(vocabulary, [document(r) for r in records])
    assert list(record_masks) == masks


def test_without_flags_every_token_counts():
    _, _, masks, counts = _members(Vocabulary(NAMES, "test"), _batch(None))
    assert [np.frombuffer(m[-n:], dtype=np.uint8).tolist() for m, n in zip(masks, counts)] == [
        [1] * 4, [1] * 3]
    assert [r.masked for r in batch_records(_batch(None))] == [(), ()]
