"""The brevo family (Physics of LMs Part 4.1, reasoning breadth): a random DAG (dag.py) whose
nodes are distinct words; the context lists every edge `parent child` in random order, then
`? q =>` and the answer: every ancestor of q and q itself, once each, parents before children
(ordered by depth, the longest path from a root, ties in random order; q is last). Only `=>` and
the answer count in the loss; the trainer's EOS after the document ends the answer.

A test instance is the edge set with the query; `brevo_test` rows have n = max_n.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from corpus_gen.brevo.config import BrevoConfig
from corpus_gen.core import word_tasks
from corpus_gen.core.records import BATCH, Record, UnitBatch, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.core.words import MAX_DOCUMENTS, letter_names

if TYPE_CHECKING:
    from corpus_gen.brevo.dag import Dags

BOS, QUERY, ANSWER = "<bos>", "?", "=>"
_SIZE, _WORDS, _ORDER, _EDGES, _ANSWER = range(1, 6)  # draw tags (dag.py has its own)


def vocabulary(config: BrevoConfig) -> tuple[str, ...]:
    return (EOS, BOS, QUERY, ANSWER, *letter_names(config.mini_vocab))


def _tokens(config: BrevoConfig) -> word_tasks.Tokens:
    names = vocabulary(config)
    return word_tasks.Tokens(names, names.index(ANSWER) + 1, config.lexicon)


def layout(config: BrevoConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "max_n": config.max_n, "words_possible": config.lexicon.size})


@dataclass
class Graphs:
    """Drawn graphs with their node words and query."""

    keys: np.ndarray
    dags: Dags
    words: np.ndarray  # (B, N) each node's word code (-1 past n)
    query: np.ndarray  # (B,) the asked node

    @property
    def n(self) -> np.ndarray:
        return self.dags.n

    def subset(self, rows: np.ndarray) -> Graphs:
        return Graphs(self.keys[rows], self.dags.subset(rows), self.words[rows], self.query[rows])

    def hashes(self) -> np.ndarray:
        """Each instance's hash: its set of edges (parent word, child word), and its query."""
        graph, child, slot = np.nonzero(self.dags.parents >= 0)  # graph-major
        parent = self.dags.parents[graph, child, slot]
        offsets = np.r_[0, np.cumsum(np.bincount(graph, minlength=len(self.keys)))]
        rows = np.arange(len(self.keys))
        asked = self.words[rows, self.query]
        return (word_tasks.set_hash(word_tasks.pair_hash(self.words[graph, parent],
                                                         self.words[graph, child]), offsets)
                + word_tasks.pair_hash(asked, asked))  # no edge joins a word to itself


def graphs(config: BrevoConfig, keys: np.ndarray, n: np.ndarray) -> Graphs:
    """The graphs of n[i] nodes, each from its key: DAG, node words (in a random order), query."""
    # dag.py and items.py compile with numba, ~1 s to import and load: paid when graphs are
    # drawn, not by every command that registers the families
    from corpus_gen.brevo import dag
    from corpus_gen.core import compiled_words

    dags = dag.draw(keys, n)
    codes = compiled_words.draw_shuffled(config.lexicon, keys, n, _WORDS, _ORDER)
    words = np.full(dags.depth.shape, -1, dtype=np.int64)
    words[np.arange(dags.depth.shape[1]) < n[:, None]] = codes
    return Graphs(keys, dags, words, dags.queries(keys, config.query == "last"))


def _sizes(config: BrevoConfig, keys: np.ndarray) -> np.ndarray:
    return word_tasks.graph_sizes(keys, config.max_n, _SIZE)


def _test_keys(config: BrevoConfig, index: np.ndarray) -> np.ndarray:
    key = derive_key(config.seed, "brevo", "test")
    return word_tasks.doc_keys(key, index, np.zeros_like(index))


def _test_hashes(config: BrevoConfig) -> np.ndarray:
    known = ("brevo", config.seed, config.max_n, config.mini_vocab, config.min_len,
             config.max_len, config.query, config.eval_samples)
    return word_tasks.test_hashes(known, config.eval_samples,
                             lambda index: graphs(config, _test_keys(config, index),
                                                  np.full(len(index), config.max_n)).hashes())


def _train_graphs(config: BrevoConfig, start: int, stop: int) -> Graphs:
    return word_tasks.training_draw(
        derive_key(config.seed, "brevo", "train"), start, stop, config.max_n,
        lambda keys, n: graphs(config, keys, n), lambda keys: _sizes(config, keys),
        lambda: _test_hashes(config))


def documents(config: BrevoConfig, drawn: Graphs) -> word_tasks.Items:
    """The drawn graphs' documents (items.py), `=>` and the answer in the loss."""
    from corpus_gen.brevo import items  # numba, as in graphs()

    tokens = _tokens(config)
    return items.build(drawn.dags, drawn.words, drawn.query, drawn.keys, (_EDGES, _ANSWER),
                        (tokens[BOS], tokens[QUERY], tokens[ANSWER]))


def batches(config: BrevoConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    tokens = _tokens(config)
    # many documents at once spread the cost of each numpy call (sizes, words, test checks)
    for lo in range(start, stop, MAX_DOCUMENTS):
        drawn = _train_graphs(config, lo, min(lo + MAX_DOCUMENTS, stop))
        depth = drawn.dags.depth[np.arange(len(drawn.keys)), drawn.query].tolist()
        metas = [f'{{"n":{size},"depth":{d}}}' for size, d in zip(drawn.n.tolist(), depth)]
        yield from documents(config, drawn).unit_batch(tokens, metas).chunks()


def records(config: BrevoConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: BrevoConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"brevo_test": lambda: _rows(config)}


def _rows(config: BrevoConfig) -> Iterator[dict]:
    """Test rows: graphs of max_n nodes, the query's depth and the edges in context order."""
    for lo in range(0, config.eval_samples, BATCH):
        index = np.arange(lo, min(lo + BATCH, config.eval_samples))
        drawn = graphs(config, _test_keys(config, index), np.full(len(index), config.max_n))
        laid = documents(config, drawn)
        # each document's context, the words after <bos>: its edges' ends in context order
        ends = 2 * (drawn.dags.parents >= 0).sum((1, 2))
        at = np.arange(ends.sum()) + np.repeat(laid.offsets[:-1] + 1 - (np.cumsum(ends) - ends),
                                               ends)
        context = config.lexicon.readable(laid.codes[at])
        edges = [list(pair) for pair in zip(context[::2], context[1::2])]
        edge_bounds = np.r_[0, np.cumsum(ends // 2)].tolist()
        queries = config.lexicon.readable(drawn.words[np.arange(len(index)), drawn.query])
        rows = laid.answer_rows(_tokens(config))
        for i, (row, common) in enumerate(zip(index.tolist(), rows)):
            yield {"id": row, **common, "n": config.max_n,
                   "query": queries[i], "depth": int(drawn.dags.depth[i, drawn.query[i]]),
                   "edges": edges[edge_bounds[i]:edge_bounds[i + 1]]}
