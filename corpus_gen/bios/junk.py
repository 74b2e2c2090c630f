"""Junk mixes (Part 3.3): what marks a bios corpus's useful documents apart from its junk.

The junk documents themselves are biographies of people outside the population, laid out and
drawn by `stream`. With `domain_token`, every useful document starts with the word DOMAIN_TOKEN,
which the tokenizer holds as one reserved piece (DOMAIN_PIECE, with the leading "▁" every word
gets), so it is always exactly one token.
"""

from functools import lru_cache

import numpy as np

from corpus_gen.bios.config import DOMAIN_TOKEN
from corpus_gen.core.records import Units

DOMAIN_PIECE = "\u2581" + DOMAIN_TOKEN
PREFIX = DOMAIN_TOKEN + " "  # what a useful document's text starts with


@lru_cache(maxsize=4)
def domain_units(units: Units) -> Units:
    """`units` and, as the last unit, DOMAIN_TOKEN (one object per vocabulary: the tokenizer
    keeps a table of encoded units per Units object)."""
    return Units([*units.strings.tolist(), DOMAIN_TOKEN])


def prefix_units(units: Units, ids: np.ndarray, offsets: np.ndarray, useful: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Unit ids and offsets (`spell`'s) with the DOMAIN_TOKEN unit of `units` (domain_units)
    first in each document where `useful`."""
    ids = np.insert(ids, offsets[:-1][useful], len(units) - 1)
    return ids, offsets + np.concatenate([[0], np.cumsum(useful)])


def prefix_record(text: str, masked: tuple[tuple[int, int], ...] = ()
                  ) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A document's text with DOMAIN_TOKEN first, and its spans out of the loss moved past it;
    the token is out of the loss where the document's first word is."""
    shift = len(PREFIX)
    spans = tuple((start + shift if start else 0, end + shift) for start, end in masked)
    return PREFIX + text, spans
