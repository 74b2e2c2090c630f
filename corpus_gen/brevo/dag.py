"""Random DAGs as the official Brevo generator draws them, a batch of graphs at once.

Graph i has n[i] nodes in a random order; the first r are roots, r uniform in 1..(n-1)//4 + 1;
each later node takes a uniform number 1..min(4, available) of distinct parents, uniform among
the earlier nodes whose out-degree is still below 4 (available: never none, as the node just
before has no child yet).
Each graph keeps its available nodes in a list and draws a node's parents by a partial
Fisher-Yates shuffle of it; every draw is hashed before the walk, from the graph's key and the
node. The walk is a compiled loop over each graph's nodes (numba, cached on disk): numpy would
step all graphs through a node at a time, a few dozen calls per node. Nodes are positions
0..n-1; the family gives them words.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit
from corpus_gen.core.word_tasks import below

MAX_DEGREE = 4  # parents per node, and children per node
_ROOTS, _PICK, _QUERY = range(11, 14)  # draw tags


@dataclass
class Dags:
    n: np.ndarray  # (B,) nodes
    roots: np.ndarray  # (B,) roots: nodes 0..roots-1, every later node has a parent
    parents: np.ndarray  # (B, N, 4) parent positions, -1 past a node's parents
    depth: np.ndarray  # (B, N) longest path in edges from a root (a root: 0)

    def subset(self, rows: np.ndarray) -> "Dags":
        return Dags(self.n[rows], self.roots[rows], self.parents[rows], self.depth[rows])

    def queries(self, keys: np.ndarray, last: bool) -> np.ndarray:
        """The node asked in each graph: uniform among the nodes with a parent, the non-roots
        (`last`: among those in the last quarter of the order)."""
        first = np.maximum(self.roots, 3 * self.n // 4) if last else self.roots
        return first + below(keys, self.n - first, _QUERY)


def draw(keys: np.ndarray, n: np.ndarray) -> Dags:
    """The DAGs of graphs with n[i] nodes, each from its key."""
    count, width = len(n), int(n.max(initial=1))
    roots = 1 + below(keys, (n - 1) // 4 + 1, _ROOTS)
    parents = np.full((count, width, MAX_DEGREE), -1, dtype=np.int32)
    depth = np.zeros((count, width), dtype=np.int64)
    _walk(keys.astype(np.uint64), n.astype(np.int64), roots, parents, depth)
    return Dags(n, roots, parents, depth)


@njit(cache=True)
def _walk(keys, n, roots, parents, depth):  # pragma: no cover - compiled
    """Each graph's nodes in order: its parent count, its parents (the first places of the
    available list after a partial Fisher-Yates shuffle), its depth; then the parents now at 4
    children leave the list (the last place moves into each, the last parent's first) and the
    node joins it. A node's five uniform 32-bit draws: the halves of three hashes of its key
    and (node, 0..2) under the tag, low half first (the parent count, then each place)."""
    width = parents.shape[1]
    listed = np.empty(width, dtype=np.int64)  # the available nodes, in the first `free` places
    out_degree = np.empty(width, dtype=np.int64)
    u = np.empty(6, dtype=np.int64)
    low = np.uint64(0xFFFFFFFF)
    for graph in range(len(n)):
        listed[0], out_degree[0], free = 0, 0, 1
        for node in range(1, n[graph]):
            for j in range(3):
                h = hash_draw(keys[graph], np.uint64(3 * node + j + (_PICK << 40)))
                u[2 * j], u[2 * j + 1] = h & low, h >> np.uint64(32)
            takes = (u[0] * min(free, MAX_DEGREE) >> 32) + 1 if node >= roots[graph] else 0
            deepest = -1
            for slot in range(takes):
                there = slot + (u[slot + 1] * (free - slot) >> 32)
                listed[slot], listed[there] = listed[there], listed[slot]
                parent = listed[slot]
                parents[graph, node, slot] = parent
                deepest = max(deepest, depth[graph, parent])
                out_degree[parent] += 1
            depth[graph, node] = deepest + 1
            for slot in range(takes - 1, -1, -1):
                if out_degree[listed[slot]] == MAX_DEGREE:
                    free -= 1
                    listed[slot] = listed[free]
            listed[free], out_degree[node] = node, 0
            free += 1
