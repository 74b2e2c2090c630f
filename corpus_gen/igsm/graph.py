"""An iGSM problem graph: the structure (items per level, edges) and the dependencies.

Parameters are numbered: instance parameters 0..E-1 (one per structure edge: "the number of each
X's Y"), then abstract parameters ("how many Cells does X have"), one per item and deeper level,
in a fixed order derived from the structure. The graph serialises to a small dict (`to_dict`),
the ground truth a record carries and the checker reads back (`Graph.from_dict`).

An instance parameter's expression is (outer, n, inner, deps), with its arithmetic operations:
  no deps            "equals n"                                   0 operations
  one dep            "equals each A"                              0
                     "equals n more than / n times as much as each A"  1  (outer "+" / "*")
  two deps           "equals the sum / difference of each A and each B"  1  (inner "+" / "-")
                     "equals n more than / n times as much as the sum ..."  2
A problem's `op` follows the official generator: each parameter its solution computes costs its
arithmetic operations but at least 1 (a constant or a copy is one step too), so `op` is
comparable with the papers' op axis. All arithmetic is mod 23.
"""

from functools import cache
from itertools import chain
from typing import NamedTuple

MOD = 23


class Expr(NamedTuple):  # a tuple: cheap to make, and millions are made
    outer: str  # "" | "+" | "*": combine with the constant n (or, with no deps, "=": equals n)
    n: int
    inner: str  # "" | "+" | "-": with two deps, their sum or difference
    deps: tuple[int, ...]

    @property
    def ops(self) -> int:
        return (len(self.deps) == 2) + (self.outer in ("+", "*"))

    @classmethod
    def from_list(cls, row: list) -> "Expr":
        return cls(row[0], row[1], row[2], tuple(row[3:]))


def apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return (a + b) % MOD
    if op == "-":
        return (a - b) % MOD
    return (a * b) % MOD


@cache
def abstract_layout(widths: tuple[int, ...]) -> tuple[tuple[tuple[int, int, int], ...],
                                                      tuple[int, ...]]:
    """The abstract parameters (i, j, t) of a structure whose levels hold `widths` items: item j
    of level i and a deeper level t, level by level; and `first`: abstract parameter (i, j, t)
    is number first[i] + j * (d - 1 - i) + t - i - 1 among them."""
    d = len(widths)
    abstract = tuple((i, j, t) for i in range(d - 1) for j in range(widths[i])
                     for t in range(i + 1, d))
    first = [0] * d
    for i in range(d - 1):
        first[i + 1] = first[i] + widths[i] * (d - 1 - i)
    return abstract, tuple(first)


class Graph:
    """Structure plus (once `exprs` is set) dependencies; names, deps and op costs per parameter
    (`cost`: the official op count of the step computing it)."""

    __slots__ = ("levels", "items", "inst", "exprs", "question", "abstract", "deps", "cost",
                 "n_inst", "_names", "_terms")

    def __init__(self, levels: list[str], items: list[list[str]], inst: list[tuple[int, int, int]]):
        self.levels, self.items, self.inst = levels, items, inst
        self.n_inst = n = len(inst)
        self.exprs: list[Expr] = []
        self.question = -1
        self._names: list[str] | None = None
        self._terms: list[list[tuple[int, int]]] | None = None
        d = len(levels)
        kids: list[list[list[int]]] = [[[] for _ in row] for row in items]
        for p, (i, j, _k) in enumerate(inst):
            kids[i][j].append(p)
        self.abstract, first = abstract_layout(tuple(map(len, items)))
        # an abstract parameter depends on its item's children p (t = i+1), or on each child p
        # and the abstract parameter (p's item, t) below it, in pairs (t > i+1); see `terms`
        self.deps: list[tuple[int, ...]] = [()] * n
        self.cost: list[int] = [0] * n
        for i, j, t in self.abstract:
            children = kids[i][j]
            if t == i + 1:
                self.deps.append(tuple(children))
                self.cost.append(max(1, len(children) - 1))
            else:
                below = n + first[i + 1] + t - i - 2
                width = d - 2 - i
                self.deps.append(tuple(chain.from_iterable(
                    (p, below + inst[p][2] * width) for p in children)))
                self.cost.append(2 * len(children) - 1)

    def __len__(self) -> int:
        return len(self.deps)

    @property
    def terms(self) -> list[list[tuple[int, int]]]:
        """Per abstract parameter, its terms (instance p, abstract below it or -1): its value is
        the sum of the p (t = i+1) or of p * below (t > i+1). Made from `deps` when first read
        (the generator's rejected draws never read them)."""
        if self._terms is None:
            n = self.n_inst
            self._terms = [[(p, -1) for p in deps] if t == i + 1
                           else list(zip(deps[::2], deps[1::2]))
                           for (i, _j, t), deps in zip(self.abstract, self.deps[n:])]
        return self._terms

    def set_exprs(self, exprs: list[Expr]) -> None:
        self.exprs = exprs
        for p, e in enumerate(exprs):
            self.deps[p] = e.deps
            self.cost[p] = max(1, e.ops)

    # ---- names -------------------------------------------------------------------------------
    def name(self, p: int) -> str:
        """How the solution names a parameter: "Jaguar's Endothelium", "Jaguar's Cells"."""
        return self.names[p]

    @property
    def names(self) -> list[str]:
        """Every parameter's `name`, computed once (the structure never changes)."""
        if self._names is None:
            items, levels = self.items, self.levels
            self._names = ([f"{items[i][j]}'s {items[i + 1][k]}" for i, j, k in self.inst]
                           + [f"{items[i][j]}'s {levels[t]}" for i, j, t in self.abstract])
        return self._names

    def question_text(self) -> str:
        p = self.question
        if p < self.n_inst:
            i, j, k = self.inst[p]
            return f"How many {self.items[i + 1][k]} does {self.items[i][j]} have?"
        i, j, t = self.abstract[p - self.n_inst]
        return f"How many {self.levels[t]} does {self.items[i][j]} have?"

    def sentence(self, p: int) -> str:
        """The problem's sentence defining instance parameter p (without the final period)."""
        e, names = self.exprs[p], self.names
        if not e.deps:
            rhs = str(e.n)
        else:
            refs = ["each " + names[x] for x in e.deps]
            if len(refs) == 1:
                rhs = refs[0]
            else:
                rhs = (f"the {'sum' if e.inner == '+' else 'difference'} of {refs[0]} and "
                       f"{refs[1]}")
            if e.outer == "+":
                rhs = f"{e.n} more than {rhs}"
            elif e.outer == "*":
                rhs = f"{e.n} times as much as {rhs}"
        return f"The number of each {names[p]} equals {rhs}"

    # ---- values and closure ------------------------------------------------------------------
    def values(self) -> list[int]:
        """Every parameter's value (the graph must be acyclic)."""
        values: list[int | None] = [None] * len(self.deps)
        for p in range(len(values)):
            if values[p] is None:
                self._value(p, values)
        return values  # type: ignore[return-value]

    def _value(self, root: int, values: list) -> None:
        stack = [root]
        while stack:
            p = stack[-1]
            pending = [x for x in self.deps[p] if values[x] is None]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if values[p] is None:
                values[p] = self.compute(p, values)

    def compute(self, p: int, values: list) -> int:
        if p < self.n_inst:
            e = self.exprs[p]
            if not e.deps:
                return e.n % MOD
            v = values[e.deps[0]]
            if len(e.deps) == 2:
                v = apply(e.inner, v, values[e.deps[1]])
            return apply(e.outer, e.n, v) if e.outer in ("+", "*") else v
        deps = self.deps[p]
        i, _j, t = self.abstract[p - self.n_inst]
        if t == i + 1:  # the sum of its terms (see `terms`)
            return sum(values[a] for a in deps) % MOD
        return sum(values[a] * values[b] for a, b in zip(deps[::2], deps[1::2])) % MOD

    def ancestors(self, p: int) -> set[int]:
        """p and every parameter it depends on, directly or not."""
        seen, stack = {p}, [p]
        while stack:
            for x in self.deps[stack.pop()]:
                if x not in seen:
                    seen.add(x)
                    stack.append(x)
        return seen

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"levels": self.levels, "items": self.items, "inst": [list(e) for e in self.inst],
                "expr": [[outer, n, inner, *deps] for outer, n, inner, deps in self.exprs],
                "question": self.question}

    @classmethod
    def from_dict(cls, data: dict) -> "Graph":
        graph = cls(list(data["levels"]), [list(x) for x in data["items"]],
                    [tuple(e) for e in data["inst"]])
        graph.set_exprs([Expr.from_list(row) for row in data["expr"]])
        graph.question = data["question"]
        return graph
