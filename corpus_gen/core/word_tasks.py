"""Documents of words and marker tokens, what Depo and Brevo share: documents keyed by stream
position and attempt, the distribution of the graph size n, test instances kept out of
training, and documents assembled from words and marker tokens in one pass over a batch.

Document i of a stream is a pure function of (seed, stream, i): its draws come from its own key
(`doc_keys`), each by a counter under a tag, so a batch of documents is drawn at once with numpy
and any shard or worker count writes the same bytes. A training draw that hits a test instance is
drawn again under the next attempt index (`avoid`), still a pure function of (seed, i).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.records import BATCH, UnitBatch, Units
from corpus_gen.core.seeding import hash_u64
from corpus_gen.core.words import Lexicon, hash_each

MAX_ATTEMPTS = 64  # redraws of one document before the test set is said to cover training
D = TypeVar("D", bound="Drawn")


def doc_keys(stream_key: int, index: np.ndarray, attempt: np.ndarray) -> np.ndarray:
    """Each document's key: its stream position and attempt under the stream's key."""
    return hash_each(hash_u64(stream_key, index), np.asarray(attempt, dtype=np.uint64))


def uniform(keys: np.ndarray, tag: int, index: np.ndarray | int = 0) -> np.ndarray:
    """Floats in [0, 1), one per key, by (tag, index)."""
    return (hash_each(keys, np.asarray(index, dtype=np.uint64) + np.uint64(tag << 40))
            >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def below(keys: np.ndarray, bound: np.ndarray, tag: int, index: np.ndarray | int = 0
          ) -> np.ndarray:
    """Integers in [0, bound), one per key (bias below 2**-40 for bounds under 2**24)."""
    h = hash_each(keys, np.asarray(index, dtype=np.uint64) + np.uint64(tag << 40))
    return (h % np.asarray(bound, dtype=np.uint64)).astype(np.int64)


def graph_sizes(keys: np.ndarray, max_n: int, tag: int) -> np.ndarray:
    """Training n in 3..max_n with P(n) proportional to 1 / (n + sqrt(max_n)) (the official
    Depo and Brevo samplers): small graphs often, every size up to max_n seen."""
    sizes = np.arange(3, max_n + 1)
    cdf = np.cumsum(1.0 / (sizes + np.sqrt(max_n)))
    picked = np.searchsorted(cdf / cdf[-1], uniform(keys, tag), side="right")
    return sizes[np.minimum(picked, len(sizes) - 1)]


def avoid(keys_for: Callable[[np.ndarray], np.ndarray], count: int, max_n: int,
          sizes_of: Callable[[np.ndarray], np.ndarray],
          hashes_of: Callable[[np.ndarray], np.ndarray], test: Callable[[], np.ndarray]
          ) -> np.ndarray:
    """The keys of `count` training documents whose instance is no test instance: documents of
    n = max_n (test instances all have n = max_n) whose instance hash is among `test()` are
    drawn again under the next attempt. `keys_for(attempts)` gives the keys."""
    attempts = np.zeros(count, dtype=np.int64)
    suspects = np.arange(count)
    while True:
        keys = keys_for(attempts)
        suspects = suspects[sizes_of(keys[suspects]) == max_n]
        if not len(suspects):
            return keys
        hits = suspects[among(hashes_of(keys[suspects]), test())]
        if not len(hits):
            return keys
        attempts[hits] += 1
        if attempts.max() >= MAX_ATTEMPTS:
            raise CorpusError(f"{MAX_ATTEMPTS} training draws in a row were test instances: the "
                              "test set covers nearly every graph of size max_n; raise max_n or "
                              "the word space, or lower eval_samples")
        suspects = hits


class Drawn(Protocol):
    """A batch of drawn instances: their sizes, a subset of rows, and each one's hash."""

    n: np.ndarray

    def subset(self, rows: np.ndarray) -> "Drawn": ...

    def hashes(self) -> np.ndarray: ...


def training_draw(key: int, start: int, stop: int, max_n: int,
                  draw: Callable[[np.ndarray, np.ndarray], D],
                  sizes_of: Callable[[np.ndarray], np.ndarray],
                  test: Callable[[], np.ndarray]) -> D:
    """The training instances at stream positions [start, stop) of the stream `key`, `draw`n
    from their keys and sizes. Drawn first as if none were a test instance (drawing those of
    size max_n again only to check them costs as much as a call per batch); only if one is, the
    keys go the way of `avoid` and the batch is drawn again."""
    index = np.arange(start, stop)
    keys = doc_keys(key, index, np.zeros_like(index))
    drawn = draw(keys, sizes_of(keys))
    at_max = np.flatnonzero(drawn.n == max_n)
    if not len(at_max) or not among(drawn.subset(at_max).hashes(), test()).any():
        return drawn
    keys = avoid(lambda attempts: doc_keys(key, index, attempts), stop - start, max_n, sizes_of,
                 lambda keys: draw(keys, np.full(len(keys), max_n)).hashes(), test)
    return draw(keys, sizes_of(keys))


def among(hashes: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Whether each hash is in the sorted `known` (a binary search: np.isin builds a table of
    `known` on every call)."""
    if not known.size:
        return np.zeros(len(hashes), dtype=bool)
    return known[np.minimum(np.searchsorted(known, hashes), known.size - 1)] == hashes


_TEST_HASHES: dict[tuple, np.ndarray] = {}


def test_hashes(known: tuple, count: int, hashes_of: Callable[[np.ndarray], np.ndarray]
                ) -> np.ndarray:
    """The sorted hashes of a test set's `count` instances (`hashes_of` the stream positions of
    a run of them), computed once per process and `known`: what determines the set."""
    if known not in _TEST_HASHES:
        runs = [np.arange(lo, min(lo + BATCH, count)) for lo in range(0, count, BATCH)]
        _TEST_HASHES[known] = np.unique(np.concatenate([np.zeros(0, np.uint64),
                                                        *map(hashes_of, runs)]))
    return _TEST_HASHES[known]


def pair_hash(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each ordered pair of word codes."""
    return hash_each(hash_each(first.astype(np.uint64), np.uint64(0)), second.astype(np.uint64))


def set_hash(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each segment's hashes summed (mod 2**64): a hash of the set, whatever its order."""
    total = np.r_[np.uint64(0), np.cumsum(hashes, dtype=np.uint64)]
    return total[offsets[1:]] - total[offsets[:-1]]


@dataclass(frozen=True)
class Tokens:
    """A vocabulary: marker tokens by name, then the letters from id `letters` on; `<eos>` is
    id 0."""

    names: tuple[str, ...]
    letters: int  # id of the first letter (letter_names order)
    lexicon: Lexicon

    def __getitem__(self, name: str) -> int:
        return self.names.index(name)

    @property
    def word_units(self) -> bool:
        """Whether training documents are spelled in whole words, one text unit each (a small
        lexicon: every word is a unit), not letters: a few times fewer units to join and
        gather, the same text and tokens."""
        return self.lexicon.size <= WORD_UNITS


WORD_UNITS = 1 << 16  # lexicons up to this size give every word a text unit
_UNITS: dict[Tokens, Units] = {}


def units(tokens: Tokens) -> Units:
    """The text units of training batches: the names after `<eos>` (unit u is token u + 1),
    then with word units every word by code. One object per vocabulary: the tokenizer keeps a
    table for it."""
    if tokens not in _UNITS:
        lexicon = tokens.lexicon
        words = lexicon.readable(np.arange(lexicon.size)) if tokens.word_units else []
        _UNITS[tokens] = Units([*tokens.names[1:], *words])
    return _UNITS[tokens]


@dataclass
class Spelled:
    """Documents spelled in token ids, back to back: document i is ids[offsets[i]:offsets[i+1]],
    `loss` 1 where a token counts in the loss."""

    ids: np.ndarray
    loss: np.ndarray
    offsets: np.ndarray

    def rows(self, texts: list[str]) -> Iterator[dict]:
        """Each document as an eval row's common fields: `prompt` (ids through the answer
        marker), `answer` (the ids after it: the loss covers the marker and the answer) and
        `text` (texts[i], the document's tokens' names joined by spaces)."""
        starts, ends = self.offsets[:-1], self.offsets[1:]
        # the answer: the tokens after each document's first in the loss (the marker)
        counted = np.flatnonzero(self.loss)
        cuts = counted[np.searchsorted(counted, starts)] + 1
        ids = self.ids
        for a, c, b, text in zip(starts.tolist(), cuts.tolist(), ends.tolist(), texts):
            yield {"prompt": ids[a:c].tolist(), "answer": ids[c:b].tolist(), "text": text}


@dataclass
class Items:
    """Documents as items, each a word (`codes` >= 0) or a marker token (`marks`, where codes is
    -1), document i its items offsets[i]:offsets[i+1]; `loss` 1 for an item in the loss."""

    codes: np.ndarray
    marks: np.ndarray
    loss: np.ndarray
    offsets: np.ndarray

    @classmethod
    def empty(cls, offsets: np.ndarray) -> "Items":
        """Items to fill in: no word, marker 0, out of the loss."""
        size = int(offsets[-1])
        return cls(np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64),
                   np.zeros(size, dtype=np.uint8), offsets)

    def spell(self, tokens: Tokens) -> Spelled:
        """The documents in token ids."""
        is_word = self.codes >= 0
        lexicon = tokens.lexicon
        words, rows = lexicon.spell(self.codes[is_word])
        # one table row per word spelled and per token (see Lexicon.spell): -1 where no token
        table = np.full((len(words) + len(tokens.names), lexicon.max_len), -1, dtype=np.int32)
        table[:len(words)] = np.where(words >= 0, words + tokens.letters, -1)
        table[len(words):, -1] = np.arange(len(tokens.names))
        widths = (table >= 0).sum(1)
        index = self.marks + len(words)
        index[is_word] = rows
        grid = np.take(table, index, axis=0)
        width = np.take(widths, index)
        return Spelled(grid[grid >= 0].astype(np.int64),
                       np.repeat(self.loss, width), np.r_[0, np.cumsum(width)][self.offsets])

    def texts(self, tokens: Tokens) -> list[str]:
        """Each document's text: its items' readable forms (a word's, a marker's name) joined
        by spaces, as its tokens' names are."""
        if tokens.word_units:
            strings = units(tokens).strings[self._unit_ids(tokens)].tolist()
        else:
            is_word = self.codes >= 0
            named = np.array(tokens.names, dtype=object)[self.marks]
            named[is_word] = tokens.lexicon.readable(self.codes[is_word])
            strings = named.tolist()
        bounds = self.offsets.tolist()
        return [" ".join(strings[a:b]) for a, b in zip(bounds, bounds[1:])]

    def answer_rows(self, tokens: Tokens) -> Iterator[dict]:
        """Each document as an eval row's common fields (`Spelled.rows`), its text joined from
        its items: a few times fewer strings than its tokens."""
        return self.spell(tokens).rows(self.texts(tokens))

    def _unit_ids(self, tokens: Tokens) -> np.ndarray:
        """Each item's unit of `units(tokens)`, where words are units."""
        return np.where(self.codes >= 0, self.codes + len(tokens.names) - 1, self.marks - 1)

    def unit_batch(self, tokens: Tokens, metas: list[str]) -> UnitBatch:
        """The documents as a UnitBatch of `units(tokens)`."""
        if tokens.word_units:
            return UnitBatch(units(tokens), self._unit_ids(tokens), self.offsets, metas, self.loss)
        spelled = self.spell(tokens)
        return UnitBatch(units(tokens), spelled.ids - 1, spelled.offsets, metas, spelled.loss)

