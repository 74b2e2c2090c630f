"""The units every family produces: documents with their text, loss spans and ground truth.

A family yields `Record`s one by one, or, where its documents are assembled from strings that
recur across documents (a template's words, a value with its punctuation), whole `UnitBatch`es:
the text then comes from one join per document and the token ids from one gather per batch.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import orjson

BATCH = 512  # documents handled together; a batch's objects and bytes (~2 MB) stay in cache


@dataclass(slots=True)
class Record:
    """One training document.

    `text` is whitespace-normalised (single spaces, no leading or trailing space) so tokenization
    can be done word by word. `masked` lists character spans [start, end) that lie on word
    boundaries and are excluded from the loss: the loss mask (the shard's `mask.npy`) is 0 there
and 1 everywhere else.
    `meta` is the family's ground truth, stored beside the text in the shard's `json` member.
    """

    text: str
    meta: dict = field(default_factory=dict)
    masked: tuple[tuple[int, int], ...] = ()


class Document(NamedTuple):
    """A record as its shard members need it: its ground truth already serialized (kept from
    the tokenizer sample without the dozens of objects a `meta` holds)."""

    text: str
    masked: tuple[tuple[int, int], ...]
    json: bytes


def document(record: Record) -> Document:
    return Document(record.text, record.masked, orjson.dumps({"text": record.text,
                                                              **record.meta}))


class Units:
    """A family's vocabulary of text units, addressed by integer id. A unit is one or more words
    (single spaces inside, none at either end), so a text joined from units by single spaces
    tokenizes as the concatenation of its units' tokens. Compared by identity: the tokenizer
    keeps one table of encoded units per vocabulary. `json_strings` are the units escaped as
    in a JSON string (orjson's escapes: escaping is per character, so a text's JSON form is its
    units' JSON forms joined by spaces)."""

    def __init__(self, strings: Sequence[str]):
        for unit in strings:
            if not unit or unit[0] == " " or unit[-1] == " " or "  " in unit:
                raise ValueError(f"text unit {unit!r} is empty or not single-space separated")
        self.strings = np.array(strings, dtype=object)
        self.json_strings = np.array([orjson.dumps(u).decode()[1:-1] for u in strings],
                                     dtype=object)

    def __len__(self) -> int:
        return len(self.strings)


@dataclass(slots=True)
class UnitBatch:
    """Consecutive documents spelled in units: document i is the units
    `ids[offsets[i]:offsets[i + 1]]` joined by single spaces, its ground truth `metas[i]`, given
    as the text of a JSON object with at least one field (what `orjson.dumps` writes: shards
    store it as is, beside the text). `loss`, parallel to `ids`, says which units' tokens count
    in the loss (1) and which do not (0); None: every token counts.

    `targets`, parallel to `ids` (None: the usual next-token prediction), is what each position
    is trained to predict instead of the next token: a task with a label per position (k-hop
    induction). Then every unit is one token; `loss` says which positions' targets count, and
    the shards hold the targets' tokens as `targets.npy` beside `ids.npy`."""

    units: Units
    ids: np.ndarray  # int64 unit ids, all documents back to back
    offsets: np.ndarray  # int64, len(metas) + 1
    metas: list[str]
    loss: np.ndarray | None = None  # uint8 per unit occurrence, or None: all count
    targets: np.ndarray | None = None  # int64 unit id per unit occurrence, or None

    def __len__(self) -> int:
        return len(self.metas)

    def chunks(self, size: int = BATCH) -> Iterator["UnitBatch"]:
        """This batch as consecutive batches of at most `size` documents (what the shard writer
        takes at once), sharing its units."""
        for lo in range(0, len(self), size):
            hi = min(lo + size, len(self))
            a, b = self.offsets[lo], self.offsets[hi]
            yield UnitBatch(self.units, self.ids[a:b], self.offsets[lo:hi + 1] - a,
                            self.metas[lo:hi], None if self.loss is None else self.loss[a:b],
                            None if self.targets is None else self.targets[a:b])

    def texts(self, json: bool = False) -> list[str]:
        """Each document's text, or with `json` the text as escaped inside a JSON string."""
        words = (self.units.json_strings if json else self.units.strings)[self.ids].tolist()
        bounds = self.offsets.tolist()
        return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]


Batch = list[Record] | UnitBatch


def batch_texts(batch: Batch) -> list[str]:
    return batch.texts() if isinstance(batch, UnitBatch) else [r.text for r in batch]


def batch_records(batch: Batch) -> list[Record]:
    if isinstance(batch, UnitBatch):
        return [Record(text, orjson.loads(meta), spans)
                for text, meta, spans in zip(batch.texts(), batch.metas, _masked_spans(batch))]
    return batch


def _masked_spans(batch: UnitBatch) -> list[tuple[tuple[int, int], ...]]:
    """Each document's character spans out of the loss (`Record.masked`): one per unit that
    does not count."""
    if batch.loss is None:
        return [()] * len(batch)
    lengths = np.vectorize(len, otypes=[np.int64])(batch.units.strings)[batch.ids] + 1
    spans = []
    for a, b in zip(batch.offsets[:-1].tolist(), batch.offsets[1:].tolist()):
        starts = np.concatenate([[0], np.cumsum(lengths[a:b - 1])])
        out = np.flatnonzero(batch.loss[a:b] == 0)
        spans.append(tuple((int(starts[i]), int(starts[i] + lengths[a + i] - 1)) for i in out))
    return spans


def flatten(batches: Iterable[Batch]) -> Iterator[Record]:
    """The records of a stream of batches, one by one."""
    for batch in batches:
        yield from batch_records(batch)
