"""The depo family (Physics of LMs Part 4.1, reasoning depth): n distinct words on one hidden
cycle; the context lists every (word, successor) pair in random order, then queries
`hop<k> q => a` with a the k-th successor of q. Only `=>` and the answer count in the loss.

Document: `<bos> a1 b1 a2 b2 ... hop3 q => a ...` (words spelled in letters, corpus_gen.core.words).
A test instance is the cycle up to rotation, i.e. its set of pairs; `depo_test` rows have
n = max_n and one query each, eval_samples rows per tested k.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from corpus_gen.core import word_tasks
from corpus_gen.core.records import BATCH, Record, UnitBatch, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.core.words import letter_names
from corpus_gen.depo.config import DepoConfig

BOS, ANSWER = "<bos>", "=>"
# draw tags: each kind of draw of a document has its own counters
_SIZE, _WORDS, _CYCLE, _PAIRS, _QUERIES, _HOPS = range(1, 7)


def vocabulary(config: DepoConfig) -> tuple[str, ...]:
    hops = tuple(f"hop{k}" for k in range(1, config.max_k + 1))
    return (EOS, BOS, *hops, ANSWER, *letter_names(config.mini_vocab))


def _tokens(config: DepoConfig) -> word_tasks.Tokens:
    names = vocabulary(config)
    return word_tasks.Tokens(names, names.index(ANSWER) + 1, config.lexicon)


def layout(config: DepoConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "max_n": config.max_n, "max_k": config.max_k,
                           "words_possible": config.lexicon.size})


@dataclass
class Cycles:
    """Each document's words in cycle order (codes, back to back): word j's successor is word
    j + 1, the last word's the first."""

    keys: np.ndarray
    n: np.ndarray
    words: np.ndarray
    offsets: np.ndarray

    @property
    def docs(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.n)), self.n)

    def ahead(self, position: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The position `steps` along the cycle from each (global) position."""
        docs = self.docs[position]
        start = self.offsets[docs]
        return start + (position - start + steps) % self.n[docs]

    def subset(self, rows: np.ndarray) -> "Cycles":
        n = self.n[rows]
        offsets = np.r_[0, np.cumsum(n)]
        words = self.words[np.arange(offsets[-1]) + np.repeat(self.offsets[rows] - offsets[:-1], n)]
        return Cycles(self.keys[rows], n, words, offsets)

    def hashes(self) -> np.ndarray:
        """Each cycle's hash up to rotation: its set of (word, successor) pairs."""
        every = np.arange(len(self.words))
        pairs = word_tasks.pair_hash(self.words, self.words[self.ahead(every, 1)])
        return word_tasks.set_hash(pairs, self.offsets)


def cycles(config: DepoConfig, keys: np.ndarray, n: np.ndarray) -> Cycles:
    """The cycles of n[i] distinct words, each from its key."""
    # compiled_words.py compiles with numba (~1 s to import and load): paid when documents are
    # drawn, not by every command that registers the families
    from corpus_gen.core import compiled_words

    # each document's words in a random order: its cycle
    words = compiled_words.draw_shuffled(config.lexicon, keys, n, _WORDS, _CYCLE)
    return Cycles(keys, n, words, np.r_[0, np.cumsum(n)])


def _sizes(config: DepoConfig, keys: np.ndarray) -> np.ndarray:
    return word_tasks.graph_sizes(keys, config.max_n, _SIZE)


def _test_hashes(config: DepoConfig) -> np.ndarray:
    known = ("depo", config.seed, config.max_n, config.max_k, config.mini_vocab, config.min_len,
             config.max_len, config.eval_samples)
    return word_tasks.test_hashes(known, config.eval_samples * len(config.tested_hops()),
                             lambda index: cycles(config, _test_keys(config, index),
                                                  np.full(len(index), config.max_n)).hashes())


def _test_keys(config: DepoConfig, index: np.ndarray) -> np.ndarray:
    return word_tasks.doc_keys(derive_key(config.seed, "depo", "test"), index, np.zeros_like(index))


def _train_cycles(config: DepoConfig, start: int, stop: int) -> Cycles:
    return word_tasks.training_draw(
        derive_key(config.seed, "depo", "train"), start, stop, config.max_n,
        lambda keys, n: cycles(config, keys, n), lambda keys: _sizes(config, keys),
        lambda: _test_hashes(config))


@dataclass
class Documents:
    cycles: Cycles
    items: word_tasks.Items
    queries: np.ndarray  # positions of the queried words, in order
    hops: np.ndarray  # k of each query


def documents(config: DepoConfig, drawn: Cycles, queries: np.ndarray,
              hops: np.ndarray | None) -> Documents:
    """The documents of the cycles with `queries[i]` queries each; their k drawn from 1..K, or
    `hops` (one per query) when given."""
    from corpus_gen.core import compiled_words  # numba, as in cycles()
    from corpus_gen.depo import draws

    n, keys = drawn.n, drawn.keys
    pairs = compiled_words.first_places(keys, n, n, _PAIRS)
    asked = compiled_words.first_places(keys, n, queries, _QUERIES)
    tokens = _tokens(config)
    items, hops = draws.lay_out(keys, drawn.words, n, pairs, asked, queries, hops, config.max_k,
                                _HOPS, (tokens[BOS], tokens["hop1"], tokens[ANSWER]))
    return Documents(drawn, items, asked, hops)


def batches(config: DepoConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    tokens = _tokens(config)
    for lo in range(start, stop, BATCH):
        drawn = _train_cycles(config, lo, min(lo + BATCH, stop))
        asked = np.minimum(drawn.n, config.queries)
        docs = documents(config, drawn, asked, None)
        yield docs.items.unit_batch(tokens, _metas(config, drawn.n, asked, docs.hops))


def _metas(config: DepoConfig, n: np.ndarray, asked: np.ndarray, hops: np.ndarray
           ) -> list[str]:
    """Each document's meta, {"n":..,"hops":[..]}: one join of the batch's pieces, split at
    the documents' ends (a format per document costs as much as drawing it)."""
    ends = np.cumsum(asked)
    heads = ends - asked + np.arange(len(n))  # where each document's pieces start
    pieces = np.empty(len(n) + len(hops), dtype=object)
    pieces[heads] = [f'{{"n":{size},"hops":[' for size in n.tolist()]
    # a hop, then "," or, the document's last, its end
    texts = np.array([f"{k}," for k in range(config.max_k + 1)]
                     + [f"{k}]}}\n" for k in range(config.max_k + 1)], dtype=object)
    last = np.zeros(len(hops), dtype=np.int64)
    last[ends - 1] = config.max_k + 1
    listed = np.ones(len(pieces), dtype=bool)
    listed[heads] = False
    pieces[listed] = texts[hops + last]
    return "".join(pieces.tolist()).split("\n")[:-1]


def records(config: DepoConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: DepoConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"depo_test": lambda: _rows(config)}


def _rows(config: DepoConfig) -> Iterator[dict]:
    """Test rows: a cycle of max_n words, one query of the row's k; eval_samples rows per k."""
    hops = np.repeat(config.tested_hops(), config.eval_samples)
    readable = config.lexicon.readable
    for lo in range(0, len(hops), BATCH):
        index = np.arange(lo, min(lo + BATCH, len(hops)))
        keys = _test_keys(config, index)
        drawn = cycles(config, keys, np.full(len(index), config.max_n))
        docs = documents(config, drawn, np.ones(len(index), dtype=np.int64), hops[index])
        # the context's pairs, all rows back to back: items 1..2n of each row's 2n + 5
        pairs = docs.items.codes.reshape(len(index), -1)[:, 1:1 + 2 * config.max_n]
        listed = readable(pairs.ravel())
        # pairs as tuples: JSON arrays all the same, and cheaper for the garbage collector
        edges = list(zip(listed[::2], listed[1::2]))
        for i, (row, common, k, query) in enumerate(zip(
                index.tolist(), docs.items.answer_rows(_tokens(config)), docs.hops.tolist(),
                readable(drawn.words[docs.queries]))):
            yield {"id": row, **common, "n": config.max_n, "k": k, "query": query,
                   "edges": edges[i * config.max_n:(i + 1) * config.max_n]}
