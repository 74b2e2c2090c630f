"""Sampling strings of a layered grammar, a batch at a time, with their parse trees.

A batch of strings is expanded one level at a time over flat arrays (numpy, no Python loop per
node): at level l every node of every string picks a rule, and its children, left to right, make
the next level's nodes. Rules are chosen uniformly by a counter-based hash of (key, level, string
index, node index within its level), so string i of a stream is the same whatever batch it is
drawn in, and a shard, a worker or a Slurm task computes exactly its own strings.

A string's tree is stored as its rule choices in level order (the root's, then level 1's left to
right, ...): with the grammar, that list rebuilds the tree (`replay`), and from it every
position's nonterminal ancestor at each level and whether the position ends that ancestor's span,
which NT probing reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from corpus_gen.cfg.grammar import Grammar
from corpus_gen.core.seeding import derive_key, hash_u64

_NODE_BITS = 22  # node index within a level < 4M: a string index gets the bits above


@dataclass
class Samples:
    """Strings back to back: string i is terminals[offsets[i]:offsets[i+1]] (terminal indices
    0..T-1); its rule choices in level order are rules[rule_offsets[i]:rule_offsets[i+1]]."""

    terminals: np.ndarray
    offsets: np.ndarray
    rules: np.ndarray
    rule_offsets: np.ndarray
    labels: Labels | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def string(self, i: int) -> np.ndarray:
        return self.terminals[self.offsets[i]:self.offsets[i + 1]]

    def rule_list(self, i: int) -> list[int]:
        return self.rules[self.rule_offsets[i]:self.rule_offsets[i + 1]].tolist()


@dataclass
class Labels:
    """Per terminal position (strings back to back) and nonterminal level l = 0..depth-1:
    ancestor[l] is the symbol (index within level l) whose span holds the position, span[l] that
    node's index among level l's nodes of its string, and boundary[l] whether the position is the
    last of that span."""

    ancestor: np.ndarray  # int64 [depth, positions]
    span: np.ndarray  # int64 [depth, positions]
    boundary: np.ndarray  # bool [depth, positions]


Choose = Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def sample(grammar: Grammar, key: int, index: np.ndarray, labels: bool = False) -> Samples:
    """Strings number `index` (int array) of the stream `key`, uniform rule choices."""
    index = np.asarray(index, dtype=np.int64)
    level_keys = [derive_key(key, "level", level) for level in range(grammar.depth)]

    def choose(level: int, owner: np.ndarray, node: np.ndarray, count: np.ndarray) -> np.ndarray:
        draw = hash_u64(level_keys[level], (index[owner] << _NODE_BITS) | node)
        return (draw % count.astype(np.uint64)).astype(np.int64)

    return _expand(grammar, len(index), choose, labels)


def replay(grammar: Grammar, rules: list[list[int]], labels: bool = True) -> Samples:
    """The strings (and labels) of recorded rule choices, one list per string in level order."""
    flat = np.array([r for string in rules for r in string], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(string) for string in rules])])
    cursor = offsets[:-1].copy()  # where each string's next level starts in `flat`

    def choose(level: int, owner: np.ndarray, node: np.ndarray, count: np.ndarray) -> np.ndarray:
        where = cursor[owner] + node
        if (where >= offsets[owner + 1]).any():
            raise ValueError(f"rule choices run out at level {level}")
        picked = flat[where]
        if ((picked < 0) | (picked >= count)).any():
            raise ValueError(f"rule choices do not fit the grammar at level {level}")
        cursor[:] += np.bincount(owner, minlength=len(cursor))
        return picked

    samples = _expand(grammar, len(rules), choose, labels)
    if (cursor != offsets[1:]).any():
        raise ValueError("rule choices left over after the terminal level")
    return samples


def _expand(grammar: Grammar, n: int, choose: Choose, labels: bool) -> Samples:
    owner = np.arange(n, dtype=np.int64)  # the string each node belongs to (grouped, in order)
    symbol = np.zeros(n, dtype=np.int64)  # every string starts at the root
    ancestors: list[np.ndarray] = []  # per level so far: each current node's ancestor there
    spans: list[np.ndarray] = []
    chosen: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for level, table in enumerate(grammar.tables):
        per_string = np.bincount(owner, minlength=n)
        node = np.arange(len(owner)) - np.repeat(np.cumsum(per_string) - per_string, per_string)
        count = table.first[symbol + 1] - table.first[symbol]
        choice = choose(level, owner, node, count)
        chosen.append(choice)
        owners.append(owner)
        rule = table.first[symbol] + choice
        length = table.length[rule]
        parent = np.repeat(np.arange(len(owner)), length)  # each child's parent node
        within = np.arange(len(parent)) - np.repeat(np.cumsum(length) - length, length)
        if labels:
            ancestors = [a[parent] for a in ancestors] + [symbol[parent]]
            spans = [s[parent] for s in spans] + [node[parent]]
        symbol = table.child[rule[parent], within]
        owner = owner[parent]

    lengths = np.bincount(owner, minlength=n)
    order = np.argsort(np.concatenate(owners), kind="stable")  # level order within each string
    rule_counts = sum(np.bincount(o, minlength=n) for o in owners)
    samples = Samples(
        terminals=symbol,
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        rules=np.concatenate(chosen)[order],
        rule_offsets=np.concatenate([[0], np.cumsum(rule_counts)]).astype(np.int64))
    if labels:
        samples.labels = _labels(np.stack(ancestors), np.stack(spans), owner)
    return samples


def _labels(ancestor: np.ndarray, span: np.ndarray, owner: np.ndarray) -> Labels:
    boundary = np.ones_like(span, dtype=bool)  # a string's last position ends every span
    same_string = owner[1:] == owner[:-1]
    boundary[:, :-1] = (span[:, 1:] != span[:, :-1]) | ~same_string
    return Labels(ancestor, span, boundary)
