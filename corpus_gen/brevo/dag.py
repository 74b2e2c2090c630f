"""Random DAGs as the official Brevo generator draws them, a batch of graphs at once.

Graph i has n[i] nodes in a random order; the first r are roots, r uniform in 1..(n-1)//4 + 1;
each later node takes a uniform number 1..min(4, available) of distinct parents, uniform among
the earlier nodes whose out-degree is still below 4 (available; a node with none stays a root).
One pass over node positions draws that node's parents in every graph at once (graphs sorted by
size, so the graphs still growing are a prefix). Nodes are positions 0..n-1; the family gives
them words.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.word_tasks import below
from corpus_gen.core.words import hash_each

MAX_DEGREE = 4  # parents per node, and children per node
_ROOTS, _PICK, _QUERY = range(11, 14)  # draw tags
_LOW = np.uint64(0xFFFFFFFF)


@dataclass
class Dags:
    n: np.ndarray  # (B,) nodes
    parents: np.ndarray  # (B, N, 4) parent positions, -1 past a node's parents
    depth: np.ndarray  # (B, N) longest path in edges from a root (a root: 0)

    def ancestors(self, query: np.ndarray) -> np.ndarray:
        """(B, N) bool: the query's ancestors and the query itself."""
        graphs = np.arange(len(self.n))
        found = np.zeros(self.depth.shape, dtype=bool)
        found[graphs, query] = True
        for node in range(self.depth.shape[1] - 1, 0, -1):  # parents come before children
            parents = self.parents[:, node]
            rows, slots = np.nonzero(found[:, node, None] & (parents >= 0))
            found[rows, parents[rows, slots]] = True
        return found

    def queries(self, keys: np.ndarray, last: bool) -> np.ndarray:
        """The node asked in each graph: uniform among the nodes with a parent (`last`: among
        those in the last quarter of the order)."""
        candidates = self.parents[:, :, 0] >= 0
        if last:
            candidates &= np.arange(candidates.shape[1]) >= (3 * self.n // 4)[:, None]
        ranks = below(keys, candidates.sum(1), _QUERY)
        return np.argmax(np.cumsum(candidates, 1) > ranks[:, None], axis=1)


def draw(keys: np.ndarray, n: np.ndarray) -> Dags:
    """The DAGs of graphs with n[i] nodes, each from its key."""
    order = np.argsort(-n, kind="stable")  # largest first: the graphs growing are a prefix
    keys, sizes = keys[order], n[order]
    count, width = len(n), int(n.max())
    roots = 1 + below(keys, (sizes - 1) // 4 + 1, _ROOTS)
    parents = np.full((count, width, MAX_DEGREE), -1, dtype=np.int64)
    # flat (graph, node) tables, addressed as graph * width + node
    out_degree = np.zeros(count * width, dtype=np.int8)
    depth = np.zeros(count * width, dtype=np.int64)
    # each graph's available nodes (out-degree below 4) in its first `available` columns, in an
    # order of its own draws alone; a node's parents are drawn by a partial Fisher-Yates
    # shuffle of that list, so they end up in its first columns
    listed = np.zeros(count * width + MAX_DEGREE, dtype=np.int64)  # + room to read 4 columns
    available = np.ones(count, dtype=np.int64)  # node 0
    starts = np.arange(count) * width
    for node in range(1, width):
        live = int(np.searchsorted(-sizes, -node, side="left"))  # the graphs with n > node
        start, free = starts[:live], available[:live]
        # five uniform 32-bit draws per graph: the parent count, then each parent
        draws = hash_each(keys[:live, None], np.arange(3, dtype=np.uint64) + np.uint64(
            (_PICK << 40) + 3 * node))
        draws = np.concatenate([draws & _LOW, draws >> np.uint64(32)], axis=1)
        takes = np.where(node >= roots[:live],
                         1 + _scaled(draws[:, 0], np.minimum(free, MAX_DEGREE)), 0)
        for slot in range(int(takes.max(initial=0))):  # graphs past their count swap in place
            other = np.where(slot < takes,
                             slot + _scaled(draws[:, slot + 1], np.maximum(free - slot, 1)), slot)
            here, there = start + slot, start + other
            listed[here], listed[there] = listed[there], listed[here]
        chosen = np.arange(MAX_DEGREE) < takes[:, None]
        picked = start[:, None] + listed[start[:, None] + np.arange(MAX_DEGREE)]
        picked = np.where(chosen, picked, start[:, None] + width - 1)  # a spare cell: unused
        parents[:live, node] = np.where(chosen, picked - start[:, None], -1)
        depth[start + node] = np.where(chosen, depth[picked] + 1, 0).max(1)
        out_degree[picked[chosen]] += 1
        full = chosen & (out_degree[picked] == MAX_DEGREE)
        for slot in range(MAX_DEGREE - 1, -1, -1):  # the last column first: the last moves in
            moved = full[:, slot]
            listed[start + slot] = listed[np.where(moved, start + free - 1, start + slot)]
            free -= moved
        listed[start + free] = node  # the new node can take children
        available[:live] = free + 1
    back = np.argsort(order)
    return Dags(n, parents[back], depth.reshape(count, width)[back])


def _scaled(draws: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Uniform 32-bit draws scaled to integers in [0, bound) (bias below bound / 2**32)."""
    return ((draws * bound.astype(np.uint64)) >> np.uint64(32)).astype(np.int64)
