"""Brevo documents laid out item by item, one compiled pass over each graph (numba, cached on
disk): its edges in a random order, then the query's ancestors found and ordered. numpy would
sort a batch's edges all at once and walk its ancestors a level at a time over every graph.

A graph's edges, listed in (child, slot) order, are shuffled by Fisher-Yates: place i swaps with
a place uniform in 0..i, a 32-bit draw of (key, tag, i) times i + 1 over 2**32 (each place's
chance off by under (i + 1) / 2**32 of itself, 1e-7 at 440 edges; a sort by 32-bit draws cost as
much as the rest of the layout). The answer is sorted by depth, then a draw of (key, tag, node),
then node: 64-bit keys of depth, the draw's top bits and the node.
"""

import numpy as np

from corpus_gen.brevo.dag import MAX_DEGREE, Dags
from corpus_gen.core import word_tasks
from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit


def build(dags: Dags, words: np.ndarray, query: np.ndarray, keys: np.ndarray,
          tags: tuple[int, int], marks: tuple[int, int, int]) -> word_tasks.Items:
    """Each graph's document: `marks` (begin, query, answer markers), the edges (parent word,
    child word) shuffled under tags[0], `? q =>` and the answer ordered with ties drawn under
    tags[1]; the answer marker and the answer in the loss."""
    count, width = words.shape
    keys = keys.astype(np.uint64)
    answer = np.empty((count, width), dtype=np.int64)  # (B, N) each answer's nodes in order
    edges, answers = _answers(keys, dags.parents, dags.depth, dags.n.astype(np.int64), query,
                              np.uint64(tags[1] << 40), answer)
    laid = word_tasks.Items.empty(np.r_[0, np.cumsum(1 + 2 * edges + 3 + answers)])
    _fill(keys, dags.parents, dags.n, words, query, answer, answers, laid.offsets,
          np.uint64(tags[0] << 40), np.array(marks, dtype=np.int64), laid.codes, laid.marks,
          laid.loss)
    return laid


@njit(cache=True)
def _answers(keys, parents, depth, n, query, tag, answer):  # pragma: no cover - compiled
    """Fills answer[g, :a] with graph g's answer in order and gives each graph's edge count and
    answer length a: the query's ancestors by a depth-first search, then sorted."""
    count, width = depth.shape
    bits = np.uint64(0)
    while np.uint64(1) << bits <= np.uint64(width):
        bits += np.uint64(1)  # width's bit length
    edges = np.zeros(count, dtype=np.int64)
    answers = np.zeros(count, dtype=np.int64)
    seen = np.full(width, -1, dtype=np.int64)  # the last graph that reached each node
    stack = np.empty(width, dtype=np.int64)
    packed = np.empty(width, dtype=np.uint64)
    for graph in range(count):
        for node in range(n[graph]):
            for slot in range(MAX_DEGREE):
                edges[graph] += parents[graph, node, slot] >= 0
        stack[0], seen[query[graph]], top, found = query[graph], graph, 1, 0
        while top:
            top -= 1
            node = stack[top]
            tie = hash_draw(keys[graph], np.uint64(node) + tag) >> (np.uint64(12) + 2 * bits)
            packed[found] = (np.uint64(depth[graph, node]) << (np.uint64(52) - bits)
                             | tie << bits | np.uint64(node))
            found += 1
            for slot in range(MAX_DEGREE):
                parent = parents[graph, node, slot]
                if parent >= 0 and seen[parent] != graph:
                    seen[parent], stack[top] = graph, parent
                    top += 1
        packed[:found].sort()
        for i in range(found):
            answer[graph, i] = packed[i] & ((np.uint64(1) << bits) - np.uint64(1))
        answers[graph] = found
    return edges, answers


@njit(cache=True)
def _fill(keys, parents, n, words, query, answer, answers, offsets, tag, marks, codes, marked,
          loss):  # pragma: no cover - compiled
    """Writes each graph's items from offsets[g]: begin, the edges in their random order, the
    query, the answer."""
    ends = np.empty((words.shape[1] * MAX_DEGREE, 2), dtype=np.int64)  # (parent, child) each
    for graph in range(len(words)):
        at = offsets[graph]
        marked[at] = marks[0]
        edges = 0
        for child in range(n[graph]):
            for slot in range(MAX_DEGREE):
                if parents[graph, child, slot] >= 0:
                    ends[edges, 0], ends[edges, 1] = parents[graph, child, slot], child
                    edges += 1
        for last in range(edges - 1, 0, -1):  # Fisher-Yates, from the last place down
            draw = hash_draw(keys[graph], np.uint64(last) + tag) >> np.uint64(32)
            other = np.int64(draw * np.uint64(last + 1) >> np.uint64(32))
            for end in range(2):
                ends[last, end], ends[other, end] = ends[other, end], ends[last, end]
        at += 1
        for edge in range(edges):
            codes[at], codes[at + 1] = words[graph, ends[edge, 0]], words[graph, ends[edge, 1]]
            at += 2
        marked[at], codes[at + 1], marked[at + 2] = marks[1], words[graph, query[graph]], marks[2]
        loss[at + 2] = 1
        for i in range(answers[graph]):
            codes[at + 3 + i], loss[at + 3 + i] = words[graph, answer[graph, i]], 1
