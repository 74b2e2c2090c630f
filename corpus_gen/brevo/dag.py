"""Random DAGs as the official Brevo generator draws them, a batch of graphs at once.

Graph i has n[i] nodes in a random order; the first r are roots, r uniform in 1..(n-1)//4 + 1;
each later node takes a uniform number 1..min(4, available) of distinct parents, uniform among
the earlier nodes whose out-degree is still below 4 (available; a node with none stays a root).
One pass over node positions draws that node's parents in every graph at once (graphs sorted by
size, so the graphs still growing are a prefix), by a partial Fisher-Yates shuffle of each
graph's list of available nodes; every draw of the pass is hashed before it, from the graph's
key and the node. Nodes are positions 0..n-1; the family gives them words.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.core.word_tasks import below
from corpus_gen.core.words import hash_each

MAX_DEGREE = 4  # parents per node, and children per node
_ROOTS, _PICK, _QUERY = range(11, 14)  # draw tags


@dataclass
class Dags:
    n: np.ndarray  # (B,) nodes
    parents: np.ndarray  # (B, N, 4) parent positions, -1 past a node's parents
    depth: np.ndarray  # (B, N) longest path in edges from a root (a root: 0)

    def ancestors(self, query: np.ndarray) -> np.ndarray:
        """(B, N) bool: the query's ancestors and the query itself: the parents of the nodes
        found last, level by level (as many levels as the longest path up from a query)."""
        count, width = self.depth.shape
        parents = self.parents.reshape(count * width, MAX_DEGREE)  # flat (graph, node) rows
        found = np.zeros(count * width, dtype=bool)
        frontier = np.arange(count) * width + query
        found[frontier] = True
        first = np.zeros(count * width, dtype=np.int64)  # scratch: one of each node kept
        while len(frontier):
            up = parents[frontier]
            up = ((frontier - frontier % width)[:, None] + up)[up >= 0]
            up = up[~found[up]]
            # a node reached from two children at once goes on once
            first[up] = np.arange(len(up))
            frontier = up[first[up] == np.arange(len(up))]
            found[frontier] = True
        return found.reshape(count, width)

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
    live = np.searchsorted(-sizes, -np.arange(width), side="left")  # per node: graphs n > node
    roots = 1 + below(keys, (sizes - 1) // 4 + 1, _ROOTS)
    # five uniform 32-bit draws per node of each graph, drawn before the walk: the parent
    # count, then each parent's place in the partial Fisher-Yates shuffle below; node-major,
    # so a step's draws are a slice
    steps = np.r_[0, np.cumsum(live)]
    drawing = np.repeat(np.arange(width, dtype=np.uint64), live)  # the node of each draw
    graph = np.arange(steps[-1]) - np.repeat(steps[:-1], live)
    draws = hash_each(keys[graph, None], drawing[:, None] * np.uint64(3) + np.arange(
        3, dtype=np.uint64) + np.uint64(_PICK << 40)).view(np.uint32)
    parents = np.full((count, width, MAX_DEGREE), -1, dtype=np.int32)
    # flat (graph, node) tables, addressed as graph * width + node
    spare = count * width  # a cell of each table no node uses: depth -1, out-degree ignored
    out_degree = np.zeros(count * width + 1, dtype=np.int8)
    depth = np.zeros(count * width + 1, dtype=np.int32)  # small tables: each step reads all rows
    depth[spare] = -1
    # each graph's available nodes (out-degree below 4) in its first `available` columns, in an
    # order of its own draws alone; a node's parents are drawn by a partial Fisher-Yates
    # shuffle of that list, so they end up in its first columns
    listed = np.zeros(count * width + MAX_DEGREE, dtype=np.int32)  # + room to read 4 columns
    rows = listed[:count * width].reshape(count, width)
    available = np.ones(count, dtype=np.int64)  # node 0
    starts = np.arange(count) * width
    # (graphs, 4) tables of each graph's first four places, its start, the column: whole
    # tables, as numpy broadcasts along a short axis slowly
    columns = np.arange(count * MAX_DEGREE).reshape(count, MAX_DEGREE) % MAX_DEGREE
    firsts = np.repeat(starts, MAX_DEGREE).reshape(count, MAX_DEGREE)
    places = firsts + columns
    for node in range(1, width):
        graphs = live[node]
        start, free = starts[:graphs], available[:graphs]  # `free` a view: updated in place
        u = draws[steps[node]:steps[node + 1]]  # uint32: times an int64, an int64
        takes = ((u[:, 0] * np.minimum(free, MAX_DEGREE) >> 32) + 1) * (node >= roots[:graphs])
        for slot in range(int(takes.max(initial=0))):  # graphs past their count swap in place
            there = (u[:, slot + 1] * np.maximum(free - slot, 1) >> 32) * (takes > slot) + (
                start + slot)
            held = rows[:graphs, slot].copy()
            rows[:graphs, slot] = listed[there]
            listed[there] = held
        # each chosen parent's cell, or a spare cell past a graph's count
        first = firsts[:graphs]
        chosen = columns[:graphs] < np.repeat(takes, MAX_DEGREE).reshape(graphs, MAX_DEGREE)
        picked = first + listed[places[:graphs]]
        picked += (spare - picked) * ~chosen
        parents[:graphs, node] = (picked - first + 1) * chosen - 1
        above = depth[picked] + 1  # the deepest, column by column: max(1) is slow on 4
        depth[start + node] = np.maximum(np.maximum(above[:, 0], above[:, 1]),
                                         np.maximum(above[:, 2], above[:, 3]))
        out_degree[picked] += 1  # distinct cells but the spare
        full = out_degree[picked] == MAX_DEGREE
        full &= chosen
        # the graphs with a parent now full (a row of 4 bools read as one int32) drop it
        losing = np.flatnonzero(full.view(np.int32)[:, 0])
        if len(losing):
            full, first, left = full[losing], start[losing], free[losing]
            for slot in range(MAX_DEGREE - 1, -1, -1):  # the last column first: the last moves in
                moved = full[:, slot]
                listed[first + slot] = listed[first + slot + (left - 1 - slot) * moved]
                left -= moved
            free[losing] = left
        listed[start + free] = node  # the new node can take children
        free += 1
    back = np.argsort(order)
    return Dags(n, parents[back],
                depth[:spare].reshape(count, width)[back].astype(np.int64))
