"""Brevo's DAG draw against the exact distribution of the process its docstring specifies (r
roots, r uniform in 1..(n-1)//4 + 1; then each node takes a uniform number 1..min(4, available)
of distinct parents, uniform among the earlier nodes with out-degree below 4), enumerated by an
explicit recursion on small graphs and compared by chi-square; and the context's edge order,
uniform over the edges' orders."""

import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np

from corpus_gen.brevo import dag, items
from corpus_gen.core import compiled_hash, word_tasks
from corpus_gen.core.words import hash_each
from tests.draw_checks import fits


def _exact(n: int, last_only: bool) -> dict[tuple, float]:
    """The exact probability of each graph (each node's parent set, in order) of n nodes, or with
    `last_only` of the last node's parent set, by recursion over nodes with each state's
    out-degrees."""
    states: dict[tuple, Fraction] = defaultdict(Fraction)
    root_counts = range(1, (n - 1) // 4 + 2)
    for roots in root_counts:
        states[((frozenset(),) * roots, (0,) * roots)] += Fraction(1, len(root_counts))
    for node in range(1, n):
        grown: dict[tuple, Fraction] = defaultdict(Fraction)
        for (sets, out), p in states.items():
            if len(sets) > node:  # a root still: nothing to draw
                grown[(sets, out)] += p
                continue
            free = [j for j in range(node) if out[j] < 4]
            for take in range(1, min(4, len(free)) + 1):
                subsets = list(itertools.combinations(free, take))
                for chosen in subsets:
                    degree = tuple(d + (j in chosen) for j, d in enumerate(out)) + (0,)
                    shown = sets[:-1] if last_only and node < n - 1 else sets
                    grown[(shown + (frozenset(chosen),), degree)] += (
                        p / min(4, len(free)) / len(subsets))
        states = grown
    exact: dict[tuple, Fraction] = defaultdict(Fraction)
    for (sets, _), p in states.items():
        exact[sets[-1] if last_only else sets] += p
    return {outcome: float(p) for outcome, p in exact.items()}


def _drawn(n: int, count: int, seed: int) -> list[tuple[frozenset, ...]]:
    keys = word_tasks.doc_keys(seed, np.arange(count), np.zeros(count, dtype=np.int64))
    parents = dag.draw(keys, np.full(count, n)).parents
    return [tuple(frozenset(p for p in row if p >= 0) for row in graph)
            for graph in parents.tolist()]


def test_whole_graphs_of_five_nodes_follow_the_specified_process():
    exact = _exact(5, last_only=False)
    assert len(exact) > 300
    assert fits(_drawn(5, 60000, 1), exact)


def test_the_last_parents_of_seven_nodes_follow_it_where_full_nodes_are_skipped():
    # by node 6 an early node may have its 4 children: it is never a parent again
    exact = _exact(7, last_only=True)
    assert fits((graph[-1] for graph in _drawn(7, 40000, 2)), exact)


def test_graphs_of_mixed_sizes_drawn_together_are_drawn_as_alone():
    keys = word_tasks.doc_keys(3, np.arange(300), np.zeros(300, dtype=np.int64))
    n = 3 + np.arange(300) % 40
    together = dag.draw(keys, n)
    for i in (0, 7, 123, 299):
        alone = dag.draw(keys[i:i + 1], n[i:i + 1])
        assert (alone.parents[0] == together.parents[i, :n[i]]).all()
        assert (alone.depth[0] == together.depth[i, :n[i]]).all()


def test_the_compiled_walk_hashes_as_hash_each():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, 200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    counters = rng.integers(0, 2**45, 200, dtype=np.uint64)
    compiled = [compiled_hash.hash_draw(k, c) for k, c in zip(keys, counters)]
    assert compiled == hash_each(keys, counters).tolist()


def test_the_edges_are_listed_in_a_uniform_order():
    # node 3 under 0, 1 and 2, node 4 under 3: 4 edges, each of the 24 orders 1/24
    count = 12000
    parents = np.full((count, 5, 4), -1, dtype=np.int32)
    parents[:, 3, :3] = [0, 1, 2]
    parents[:, 4, 0] = 3
    graphs = dag.Dags(np.full(count, 5), np.full(count, 3), parents, np.zeros((count, 5), int))
    keys = word_tasks.doc_keys(4, np.arange(count), np.zeros(count, dtype=np.int64))
    words = np.tile(np.arange(5), (count, 1))  # node i's word is i
    laid = items.build(graphs, words, np.full(count, 4), keys, (1, 2), (7, 8, 9))
    context = laid.codes.reshape(count, -1)[:, 1:9]  # every document: <bos>, 4 edges, ...
    orders = [tuple(map(tuple, row.reshape(4, 2).tolist())) for row in context]
    edges = ((0, 3), (1, 3), (2, 3), (3, 4))
    assert fits(orders, {order: 1 / 24 for order in itertools.permutations(edges)})
