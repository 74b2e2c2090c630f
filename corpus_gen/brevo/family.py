"""The brevo family (Physics of LMs Part 4.1, reasoning breadth): a random DAG (dag.py) whose
nodes are distinct words; the context lists every edge `parent child` in random order, then
`? q =>` and the answer: every ancestor of q and q itself, once each, parents before children
(ordered by depth, the longest path from a root, ties in random order; q is last). Only `=>` and
the answer count in the loss; the trainer's EOS after the document ends the answer.

A test instance is the edge set with the query; `brevo_test` rows have n = max_n.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from corpus_gen.brevo import dag
from corpus_gen.brevo.config import BrevoConfig
from corpus_gen.core import word_tasks
from corpus_gen.core.records import BATCH, Record, UnitBatch, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.core.words import MAX_DOCUMENTS, hash_each, letter_names, shuffled

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
    dags: dag.Dags
    words: np.ndarray  # (B, N) each node's word code (-1 past n)
    query: np.ndarray  # (B,) the asked node

    @property
    def n(self) -> np.ndarray:
        return self.dags.n

    def subset(self, rows: np.ndarray) -> "Graphs":
        dags = dag.Dags(self.dags.n[rows], self.dags.parents[rows], self.dags.depth[rows])
        return Graphs(self.keys[rows], dags, self.words[rows], self.query[rows])

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge as (graph, parent, child) positions, each graph's in random order."""
        parents = self.dags.parents.ravel()  # (graph, child, slot) cells, graph-major
        edge = parents >= 0
        cell = np.flatnonzero(edge)
        cell = cell[shuffled(self.keys, edge.reshape(len(self.keys), -1).sum(1), _EDGES)]
        graph, child = np.divmod(cell // dag.MAX_DEGREE, self.dags.parents.shape[1])
        return graph, parents[cell], child

    def hashes(self) -> np.ndarray:
        """Each instance's hash: its set of edges (parent word, child word), and its query."""
        graph, parent, child = self.edges()
        offsets = np.r_[0, np.cumsum(np.bincount(graph, minlength=len(self.keys)))]
        rows = np.arange(len(self.keys))
        asked = self.words[rows, self.query]
        return (word_tasks.set_hash(word_tasks.pair_hash(self.words[graph, parent],
                                               self.words[graph, child]), offsets)
                + word_tasks.pair_hash(asked, asked))  # no edge joins a word to itself

    def answer(self) -> tuple[np.ndarray, np.ndarray]:
        """The ancestors of each query and the query, as (graph, node), each graph's by depth,
        ties in random order."""
        graph, node = np.nonzero(self.dags.ancestors(self.query))
        bits = np.uint64(int(self.dags.depth.shape[1]).bit_length())
        tie = hash_each(self.keys[graph], node.astype(np.uint64) + np.uint64(_ANSWER << 40))
        packed = np.sort(graph.astype(np.uint64) << np.uint64(52)
                         | self.dags.depth[graph, node].astype(np.uint64) << (np.uint64(52) - bits)
                         | (tie >> (np.uint64(12) + 2 * bits)) << bits
                         | node.astype(np.uint64))
        return ((packed >> np.uint64(52)).astype(np.int64),
                (packed & ((np.uint64(1) << bits) - np.uint64(1))).astype(np.int64))


def graphs(config: BrevoConfig, keys: np.ndarray, n: np.ndarray) -> Graphs:
    """The graphs of n[i] nodes, each from its key: DAG, node words (in a random order), query."""
    dags = dag.draw(keys, n)
    codes = config.lexicon.draw_shuffled(keys, n, _WORDS, _ORDER)
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


@dataclass
class Documents:
    graphs: Graphs
    items: word_tasks.Items
    edges: tuple[np.ndarray, np.ndarray, np.ndarray]  # (graph, parent, child) in context order


def documents(config: BrevoConfig, drawn: Graphs) -> Documents:
    graph, parent, child = edges = drawn.edges()
    answer_graph, answer_node = drawn.answer()
    count = len(drawn.keys)
    listed = np.bincount(graph, minlength=count)
    answers = np.bincount(answer_graph, minlength=count)
    items = word_tasks.Items.empty(np.r_[0, np.cumsum(1 + 2 * listed + 3 + answers)])
    starts, codes, marks, loss = items.offsets, items.codes, items.marks, items.loss
    tokens = _tokens(config)
    marks[starts[:-1]] = tokens[BOS]
    words, width = drawn.words.ravel(), drawn.words.shape[1]  # flat: (graph, node) cells
    # each graph's edges come together (edges() is graph-major): a run of items from 1 on
    at = 2 * np.arange(len(graph)) + np.repeat(starts[:-1] + 1 - 2 * (np.cumsum(listed) - listed),
                                               listed)
    codes[at], codes[at + 1] = words[graph * width + parent], words[graph * width + child]
    at = starts[:-1] + 1 + 2 * listed  # "? q =>"
    marks[at], marks[at + 2] = tokens[QUERY], tokens[ANSWER]
    codes[at + 1] = words[np.arange(count) * width + drawn.query]
    loss[at + 2] = 1
    at = np.arange(len(answer_graph)) + np.repeat(at + 3 - (np.cumsum(answers) - answers), answers)
    codes[at] = words[answer_graph * width + answer_node]
    loss[at] = 1
    return Documents(drawn, items, edges)


def batches(config: BrevoConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    tokens = _tokens(config)
    # graphs are drawn node by node: many at once spread that loop's cost
    for lo in range(start, stop, MAX_DOCUMENTS):
        docs = documents(config, _train_graphs(config, lo, min(lo + MAX_DOCUMENTS, stop)))
        n = docs.graphs.dags.n
        depth = docs.graphs.dags.depth[np.arange(len(n)), docs.graphs.query].tolist()
        metas = [f'{{"n":{size},"depth":{d}}}' for size, d in zip(n.tolist(), depth)]
        yield from docs.items.unit_batch(tokens, metas).chunks()


def records(config: BrevoConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: BrevoConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"brevo_test": lambda: _rows(config)}


def _rows(config: BrevoConfig) -> Iterator[dict]:
    """Test rows: graphs of max_n nodes, the query's depth and the edges in context order."""
    names = np.array(vocabulary(config), dtype=object)
    for lo in range(0, config.eval_samples, BATCH):
        index = np.arange(lo, min(lo + BATCH, config.eval_samples))
        drawn = graphs(config, _test_keys(config, index), np.full(len(index), config.max_n))
        docs = documents(config, drawn)
        graph, parent, child = docs.edges
        edges = [list(pair) for pair in zip(config.lexicon.readable(drawn.words[graph, parent]),
                                            config.lexicon.readable(drawn.words[graph, child]))]
        queries = config.lexicon.readable(drawn.words[np.arange(len(index)), drawn.query])
        edge_bounds = np.r_[0, np.cumsum(np.bincount(graph, minlength=len(index)))].tolist()
        rows = docs.items.spell(_tokens(config)).answer_rows(names)
        for i, (row, common) in enumerate(zip(index.tolist(), rows)):
            yield {"id": row, **common, "n": config.max_n,
                   "query": queries[i], "depth": int(drawn.dags.depth[i, drawn.query[i]]),
                   "edges": edges[edge_bounds[i]:edge_bounds[i + 1]]}
