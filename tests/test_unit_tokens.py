"""The compiled copy of a unit batch's tokens (corpus_gen/core/unit_tokens.py) gives the arrays
numpy's path gives: the tokens of the joined text, each token's unit's loss flag and the tokens
per document, for units of several tokens each."""

import numpy as np
import pytest

from corpus_gen.core.records import UnitBatch, Units
from corpus_gen.core.unit_tokens import unit_tokens
from corpus_gen.core.vocabulary import Vocabulary

NAMES = ("<eos>", "a", "b", "c", "=", "?")
# units of 1 to 4 tokens
UNITS = Units(["a", "b c", "a = b ?", "c c", "?", "= a"])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("masked", [False, True])
def test_tokens_mask_and_counts_equal_numpys(seed, masked):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, 30)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = rng.integers(0, len(UNITS), int(offsets[-1])).astype(np.int64)
    loss = rng.integers(0, 2, len(ids)).astype(np.uint8) if masked else None
    batch = UnitBatch(UNITS, ids, offsets, ['{"n":0}'] * 30, loss)
    vocabulary = Vocabulary(NAMES, "test")
    tokens, mask, counts = unit_tokens(vocabulary.unit_table(UNITS, ids), batch)

    expected, unit_counts = vocabulary.encode_units(UNITS, ids)
    assert tokens.dtype == expected.dtype and tokens.tolist() == expected.tolist()
    texts = [" ".join(UNITS.strings[ids[a:b]]) for a, b in zip(offsets, offsets[1:])]
    assert counts.tolist() == [len(vocabulary.encode(text)) for text in texts]
    if masked:
        assert mask.tolist() == np.repeat(loss, unit_counts).tolist()
    else:
        assert mask is None
