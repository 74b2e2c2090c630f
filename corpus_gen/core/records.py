"""The units every family produces: documents with their text, loss spans and ground truth.

A family yields `Record`s one by one, or, where its documents are assembled from strings that
recur across documents (a template's words, a value with its punctuation), whole `UnitBatch`es:
the text then comes from one join per document and the token ids from one gather per batch.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

BATCH = 256  # documents handled together; a batch's objects and bytes (~1 MB) stay in cache


@dataclass(slots=True)
class Record:
    """One training document.

    `text` is whitespace-normalised (single spaces, no leading or trailing space) so tokenization
    can be done word by word. `no_loss` lists character spans [start, end) that lie on word
    boundaries and are excluded from the loss (mask 0); everything else counts (mask 1).
    `meta` is the family's ground truth, stored beside the text in the shard's `json` member.
    """

    text: str
    meta: dict = field(default_factory=dict)
    no_loss: tuple[tuple[int, int], ...] = ()


class Units:
    """A family's vocabulary of text units, addressed by integer id. A unit is one or more words
    (single spaces inside, none at either end), so a text joined from units by single spaces
    tokenizes as the concatenation of its units' tokens. Compared by identity: the tokenizer
    keeps one table of encoded units per vocabulary."""

    def __init__(self, strings: Sequence[str]):
        for unit in strings:
            if not unit or unit[0] == " " or unit[-1] == " " or "  " in unit:
                raise ValueError(f"text unit {unit!r} is empty or not single-space separated")
        self.strings = np.array(strings, dtype=object)

    def __len__(self) -> int:
        return len(self.strings)


@dataclass(slots=True)
class UnitBatch:
    """Consecutive documents spelled in units: document i is the units
    `ids[offsets[i]:offsets[i + 1]]` joined by single spaces, its ground truth `metas[i]`.
    Every token counts in the loss."""

    units: Units
    ids: np.ndarray  # int64 unit ids, all documents back to back
    offsets: np.ndarray  # int64, len(metas) + 1
    metas: list[dict]

    def __len__(self) -> int:
        return len(self.metas)

    def texts(self) -> list[str]:
        words = self.units.strings[self.ids].tolist()
        bounds = self.offsets.tolist()
        return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]


Batch = list[Record] | UnitBatch


def batch_records(batch: Batch) -> list[Record]:
    if isinstance(batch, UnitBatch):
        return [Record(text, meta) for text, meta in zip(batch.texts(), batch.metas)]
    return batch


def flatten(batches: Iterable[Batch]) -> Iterator[Record]:
    """The records of a stream of batches, one by one."""
    for batch in batches:
        yield from batch_records(batch)
