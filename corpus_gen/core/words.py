"""Words of one or more tokens, for integer-token families (Part 4.1's Depo and Brevo).

A word is tokens over a mini vocabulary of `mini_vocab` letters whose last token comes from a
second copy of the letters, the end letters, so where each word ends is read off its tokens
alone (a word's tokens are never a prefix of another word's). Letter i (1-based) is the token
named `w<i>`, its end copy `w<i>.`: "w2 w1 w3." is one word of three tokens, "w7." one of one.
A word's readable form is its token names joined by single spaces.

For generators, `Lexicon` numbers the words of a word space by a code and draws, for a batch of
documents at once, each document's distinct words from its own key (`hash_each`, `shuffled`:
counter-based, so a document never depends on the others drawn with it).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.seeding import mix64

END = "."  # the suffix of an end letter's name
MAX_DOCUMENTS = 1 << 12  # documents drawn in one call (their index takes 12 bits of a sort key)
MAX_ELEMENTS = 1 << 20  # elements of one document shuffled at once (20 bits)
_TABLE_WORDS = 1 << 16  # lexicons up to this size are spelled from a table of every word
_DENSE_CELLS = 1 << 22  # (document, code) cells up to which a batch finds first draws in a table
_SHUFFLE_ALL = 1 << 13  # words of one length up to which draw_shuffled orders them all
GAMMA = 0x9E3779B97F4A7C15  # splitmix64's step: odd, so every counter differs


def letter_names(mini_vocab: int) -> tuple[str, ...]:
    """The token names of a mini vocabulary: the inner letters w1..wM, then the end letters
    w1...wM. (M = mini_vocab)."""
    inner = tuple(f"w{i}" for i in range(1, mini_vocab + 1))
    return inner + tuple(name + END for name in inner)


def is_word_end(name: str) -> bool:
    return name.endswith(END)


def split_words(names: Sequence[str]) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """The complete words of a run of token names, in order, and what follows the last complete
    word (an unfinished word, or names that are no letters at all)."""
    words: list[tuple[str, ...]] = []
    start = 0
    for i, name in enumerate(names):
        if is_word_end(name):
            words.append(tuple(names[start:i + 1]))
            start = i + 1
    return words, tuple(names[start:])


def readable(word: Sequence[str]) -> str:
    """A word's readable form: its token names joined by single spaces."""
    return " ".join(word)


def distinct_words_possible(mini_vocab: int, min_len: int, max_len: int) -> int:
    """How many different words of min_len..max_len tokens the letters spell."""
    return sum(mini_vocab ** length for length in range(min_len, max_len + 1))


def hash_each(keys: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniform 64-bit values, element j from its own key and counter: draws of many documents at
    once, each document's a pure function of its key (splitmix64: the key is the state, the
    counter how many steps along)."""
    with np.errstate(over="ignore"):
        return mix64(np.asarray(keys, dtype=np.uint64)
                     + np.asarray(counters, dtype=np.uint64) * np.uint64(GAMMA))


def shuffled(keys: np.ndarray, sizes: np.ndarray, tag: int) -> np.ndarray:
    """Each document's elements 0..sizes[i]-1 in a random order (from its key and `tag`), as
    indices into its elements back to back; documents stay in place. A sort of packed
    (document, 32 random bits, index) values: ties keep the index order, so a document's order
    never depends on the others drawn with it. Documents all of one size sort as rows (a sort
    per document: a few times faster than one sort of them all)."""
    if len(sizes) > MAX_DOCUMENTS or sizes.max(initial=0) > MAX_ELEMENTS:
        raise ValueError(f"shuffled: at most {MAX_DOCUMENTS} documents of {MAX_ELEMENTS} "
                         "elements at once")
    starts = np.cumsum(sizes) - sizes
    first = np.repeat(starts, sizes)  # each element's document's first position
    within = (np.arange(len(first)) - first).astype(np.uint64)
    draws = hash_each(np.repeat(keys, sizes), within + np.uint64(tag << 40)) >> np.uint64(32)
    packed = draws << np.uint64(20) | within
    if len(sizes) and (sizes == sizes[0]).all():
        packed = np.sort(packed.reshape(len(sizes), -1), axis=1).ravel()
    else:
        docs = np.repeat(np.arange(len(sizes), dtype=np.uint64), sizes)
        packed = np.sort(docs << np.uint64(52) | packed)
    # sorted by document first: each document's elements stay at its positions
    return first + (packed & np.uint64(MAX_ELEMENTS - 1)).astype(np.int64)


@dataclass(frozen=True)
class Lexicon:
    """The words of `min_len..max_len` letters over `mini_vocab`, numbered by a code: the words
    of length l are codes base(l) .. base(l) + mini_vocab**l - 1, the value's base-mini_vocab
    digits the letters (first letter most significant)."""

    mini_vocab: int
    min_len: int
    max_len: int

    @property
    def size(self) -> int:
        return distinct_words_possible(self.mini_vocab, self.min_len, self.max_len)

    @cached_property
    def bases(self) -> np.ndarray:
        counts = [self.mini_vocab ** length for length in range(self.min_len, self.max_len + 1)]
        return np.cumsum([0, *counts]).astype(np.int64)  # code where each length starts, and end

    def draw(self, keys: np.ndarray, counts: np.ndarray, tag: int) -> np.ndarray:
        """Document i's first counts[i] distinct words of its stream of draws (length uniform,
        then letters uniform, as the official generators), as codes, documents back to back,
        each document's in the order first drawn (callers shuffle them)."""
        counts = np.asarray(counts, dtype=np.int64)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        starts = np.cumsum(counts) - counts
        pending = np.arange(len(counts))
        budget = self._budget(counts)
        while len(pending):
            codes, docs, found = self._first_distinct(keys[pending], counts[pending],
                                                      budget[pending], tag)
            done = found >= counts[pending]
            # a done document's words at its slot of `out`
            kept = np.bincount(docs, minlength=len(pending))
            rank = np.arange(len(docs)) - np.repeat(np.cumsum(kept) - kept, kept)
            keep = done[docs]
            out[starts[pending][docs[keep]] + rank[keep]] = codes[keep]
            pending, budget = pending[~done], budget * 2
        return out

    def draw_shuffled(self, keys: np.ndarray, counts: np.ndarray, tag: int, order_tag: int
                      ) -> np.ndarray:
        """`draw`'s words, each document's in a random order (from `order_tag`). A lexicon of
        one word length, small beside the batch, takes each document's first counts[i] words of
        a random order of all its words: the first n distinct of uniform draws are a uniform
        n-subset in a uniform order, and so are those (no redraw, no sort of draws, one
        shuffle)."""
        counts = np.asarray(counts, dtype=np.int64)
        if not self.shuffles_all:
            return self.draw(keys, counts, tag)[shuffled(keys, counts, order_tag)]
        step = _DENSE_CELLS // self.size  # documents whose orders fit the cells at once
        if len(keys) > step:
            return np.concatenate([self.draw_shuffled(keys[lo:lo + step], counts[lo:lo + step],
                                                      tag, order_tag)
                                   for lo in range(0, len(keys), step)])
        everything = np.full(len(keys), self.size)
        codes = shuffled(keys, everything, order_tag) - np.repeat(np.arange(len(keys)) * self.size,
                                                                  self.size)
        return codes[np.tile(np.arange(self.size), len(keys)) < np.repeat(counts, self.size)]

    @property
    def shuffles_all(self) -> bool:
        """Whether `draw_shuffled` takes a random order of every word: one word length of at
        most _SHUFFLE_ALL words (whatever the batch: a document never depends on the others
        drawn with it)."""
        return self.min_len == self.max_len and self.size <= _SHUFFLE_ALL

    def _budget(self, counts: np.ndarray) -> np.ndarray:
        """Draws that give counts[i] distinct words with high probability: the expected number
        (distinct words after t draws, summed over the lengths, is sum s (1 - (1 - p/s)^t) for
        a length of s words drawn with probability p) with a margin; short documents redraw."""
        sizes = np.diff(self.bases).astype(np.float64)
        most = int(counts.max(initial=0))
        limit = 2 * most + 16
        while True:
            t = np.arange(limit, dtype=np.float64)[:, None]
            found = (sizes * -np.expm1(t * np.log1p(-1 / (sizes * len(sizes))))).sum(1)
            if found[-1] >= most or limit > 64 * most:
                break
            limit *= 2
        expected = np.searchsorted(found, counts - 0.5)
        return expected + expected // 8 + 16

    def _first_distinct(self, keys: np.ndarray, counts: np.ndarray, budget: np.ndarray,
                        tag: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct words among the first budget[i] draws of each document, in draw order:
        codes, their documents, and how many each document found."""
        docs = np.repeat(np.arange(len(keys)), budget)
        draw = np.arange(len(docs)) - np.repeat(np.cumsum(budget) - budget, budget)
        # one 53-bit uniform per draw: its integer part times the lengths picks the length,
        # the fraction left the word of that length
        u = ((hash_each(keys[docs], draw + (tag << 40)) >> np.uint64(11)).astype(np.float64)
             * (2.0 ** -53 * (self.max_len - self.min_len + 1)))
        lengths = u.astype(np.int64)
        words = self.bases[lengths + 1] - self.bases[lengths]
        values = np.minimum(((u - lengths) * words).astype(np.int64), words - 1)
        codes = self.bases[lengths] + values
        new = self._firsts(docs, codes, draw, int(budget.max(initial=0)), len(keys))
        # the first draws counted in draw order: keep each document's first counts[i]
        seen = np.cumsum(new)
        ends = np.cumsum(budget)
        before = np.r_[0, seen[ends[:-1] - 1]]
        keep = new & (seen <= np.repeat(before + counts, budget))
        return codes[keep], docs[keep], seen[ends - 1] - before

    def _firsts(self, docs: np.ndarray, codes: np.ndarray, draw: np.ndarray, most: int,
                count: int) -> np.ndarray:
        """Whether each draw is its document's first of its code. A batch whose (document,
        code) table is small enough marks, in the table, each cell's first draw (one unbuffered
        minimum per draw: no sort); otherwise one sort of packed (document, code, draw), all
        different, so the result never depends on what else is drawn at once."""
        if count * self.size <= _DENSE_CELLS:
            cells = docs * self.size + codes
            dtype = np.int16 if most < 1 << 15 else np.int64
            first = np.full(count * self.size, most, dtype=dtype)
            np.minimum.at(first, cells, draw.astype(dtype))
            return first[cells] == draw
        code_bits, draw_bits = (self.size - 1).bit_length(), most.bit_length()
        if count.bit_length() + code_bits + draw_bits > 64:
            raise CorpusError(f"{self.size} possible words and {most} draws of a "
                              "document do not fit a 64-bit sort key; lower max_n or max_len")
        c, d = np.uint64(code_bits), np.uint64(draw_bits)
        packed = np.sort(docs.astype(np.uint64) << (c + d) | codes.astype(np.uint64) << d
                         | draw.astype(np.uint64))
        head = packed >> d
        first = packed[np.r_[True, head[1:] != head[:-1]]]
        # back at their draws: the sorted order is document-major, as the draws are
        at = np.searchsorted(docs, (first >> (c + d)).astype(np.int64)) + (
            first & ((np.uint64(1) << d) - np.uint64(1))).astype(np.int64)
        new = np.zeros(len(docs), dtype=bool)
        new[at] = True
        return new

    def lengths(self, codes: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bases, codes, side="right") - 1 + self.min_len

    def spell(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The words spelled as a table and each code's row in it. A row holds a word's
        letters right-aligned in max_len columns (-1 before a shorter word), as indices into
        `letter_names(mini_vocab)`: the last column holds the end letters (letter + mini_vocab),
        so reading rows' letters >= 0 in order spells their words back to back. A small
        lexicon's table is every word (built once); a large one's the distinct `codes`."""
        if self.size <= _TABLE_WORDS:
            return self._table, codes
        distinct, rows = np.unique(codes, return_inverse=True)
        return self._spelled(distinct), rows

    @cached_property
    def _table(self) -> np.ndarray:
        return self._spelled(np.arange(self.size)).astype(np.int32)

    def _spelled(self, codes: np.ndarray) -> np.ndarray:
        lengths = self.lengths(codes)
        values = codes - self.bases[lengths - self.min_len]
        places = self.mini_vocab ** np.arange(self.max_len - 1, -1, -1, dtype=np.int64)
        letters = values[:, None] // places % self.mini_vocab
        letters[:, -1] += self.mini_vocab
        letters[np.arange(self.max_len) < self.max_len - lengths[:, None]] = -1
        return letters

    def readable(self, codes: np.ndarray) -> list[str]:
        """Each word's readable form."""
        codes = np.asarray(codes, dtype=np.int64)
        if self.size <= _TABLE_WORDS:
            return self._readable[codes].tolist()
        distinct, rows = np.unique(codes, return_inverse=True)
        return self._joined(self._spelled(distinct))[rows].tolist()

    @cached_property
    def _readable(self) -> np.ndarray:
        return self._joined(self._table)

    def _joined(self, table: np.ndarray) -> np.ndarray:
        """The readable form of each row of a `spell` table, as an object array."""
        names = np.array([*letter_names(self.mini_vocab), ""], dtype=object)  # -1: no letter
        return np.array([" ".join(row).strip() for row in names[table].tolist()], dtype=object)
