"""Drawing one iGSM problem: structure graph, dependency graph, question, shortest solution.

`draw_problem(rng, ...)` is a pure function of the `random.Random` it is given (seeded per
problem from the counter-based seeding), so a problem depends only on (config, seed, index).
The question is a parameter whose shortest solution needs exactly the target number of
operations; the solution computes only its ancestors, in a random topological order, one binary
operation per clause, in the official sentence format:
"Define Endothelium's Plasma Cells as F; so F = 7. Define Anteater's Endothelium as k;
X = F + d = 7 + 7 = 14; so k = 17 * X = 17 * 14 = 8."
"""

import hashlib
import json
import math
import random
import string
from dataclasses import dataclass
from functools import cache
from importlib import resources

from corpus_gen.core.errors import CorpusError
from corpus_gen.igsm.graph import Expr, Graph, apply

SYMBOLS = tuple(string.ascii_letters)
EXTRA_SYMBOLS = tuple(a + b for a in string.ascii_lowercase for b in string.ascii_lowercase)
_WIDTHS = (2, 3, 4)
_MAX_ATTEMPTS = 20000  # dependency draws before a target is declared unreachable
_DRAWS_PER_STRUCTURE = 4


@dataclass(frozen=True)
class Categories:
    hierarchies: tuple[tuple[str, ...], ...]  # four hierarchies of four level names
    pools: dict[str, tuple[tuple[str, ...], ...]]  # level name -> its subcategories' items


@cache
def load_categories() -> Categories:
    text = resources.files("corpus_gen.igsm").joinpath("data/categories.json").read_text("utf-8")
    data = json.loads(text)
    return Categories(tuple(tuple(h) for h in data["hierarchies"]),
                      {level: tuple(tuple(items) for items in subs.values())
                       for level, subs in data["categories"].items()})


@dataclass
class Problem:
    graph: Graph
    values: list[int]
    order: list[int]  # the solution: parameters in a topological order, question last
    op: int
    rng_state: random.Random  # continues the problem's stream for rendering and retry draws

    @property
    def answer(self) -> int:
        return self.values[self.graph.question]


# ---- structure -------------------------------------------------------------------------------
def _structure(rng: random.Random, cats: Categories, max_edge: int, target: int,
               hierarchy: int | None) -> Graph:
    rel = (target - 1) / max(1, max_edge - 1)
    weights = [math.exp(-(rel - pos) ** 2) for pos in (0.2, 0.5, 0.8)]
    while True:
        d = rng.choices(_WIDTHS, weights)[0]
        t0, t1 = rng.choices(_WIDTHS, weights, k=2)
        widths = [rng.randint(min(t0, t1), max(t0, t1)) for _ in range(d)]
        min_e = sum(max(a, b) for a, b in zip(widths, widths[1:]))
        max_e = min(max_edge, sum(a * b for a, b in zip(widths, widths[1:])))
        if min_e <= max_e and 2 * max_e >= target:
            break
    h = cats.hierarchies[rng.randrange(len(cats.hierarchies)) if hierarchy is None else hierarchy]
    start = rng.randrange(len(h) - d + 1)
    levels = list(h[start:start + d])
    items: list[list[str]] = []
    used: set[str] = set(levels)
    for level, w in zip(levels, widths):
        while True:
            sub = rng.choice(cats.pools[level])
            chosen = rng.sample(sub, w)
            if used.isdisjoint(chosen):
                break
        used.update(chosen)
        items.append(chosen)
    lo = min(max_e, max(min_e, (target + 1) // 2))
    n_edges = rng.randint(lo, max_e)
    edges, spare = [], []
    for i in range(d - 1):
        a, b = widths[i], widths[i + 1]
        big, small = rng.sample(range(max(a, b)), max(a, b)), rng.sample(range(min(a, b)),
                                                                           min(a, b))
        pairs = {(x, small[n] if n < len(small) else rng.choice(small))
                 for n, x in enumerate(big)}
        if a < b:
            pairs = {(y, x) for x, y in pairs}
        edges.extend((i, j, k) for j, k in pairs)
        spare.extend((i, j, k) for j in range(a) for k in range(b) if (j, k) not in pairs)
    edges.extend(rng.sample(spare, n_edges - len(edges)))
    edges.sort()
    return Graph(levels, items, edges)


# ---- dependencies ----------------------------------------------------------------------------
def _needs(graph: Graph) -> list[int]:
    """Per abstract parameter: bitmask of the instance parameters its value sums over."""
    n = graph.n_inst
    needs = [0] * len(graph.abstract)
    for x in range(len(graph.abstract) - 1, -1, -1):  # deeper abstract parameters come later
        mask = 0
        for a, b in graph.terms[x]:
            mask |= 1 << a
            if b >= 0:
                mask |= needs[b - n]
        needs[x] = mask
    return needs


def _dependencies(rng: random.Random, graph: Graph, needs: list[int], density: float
                  ) -> list[int]:
    """Give every instance parameter an expression; return a topological order of all params."""
    n = graph.n_inst
    order = rng.sample(range(n), n)
    pending = sorted(range(len(needs)), key=lambda x: -graph.abstract[x][0])  # deepest first
    p_const = 0.45 - 0.4 * density
    p_two = 0.25 + 0.6 * density
    p_plain = 0.45 - 0.35 * density
    exprs: list[Expr | None] = [None] * n
    cands: list[int] = []
    topo: list[int] = []
    defined = 0
    for p in order:
        r = rng.random()
        if not cands or r < p_const:
            exprs[p] = Expr("=", rng.randrange(23), "", ())
        else:
            k = 2 if len(cands) >= 2 and rng.random() < p_two else 1
            deps = tuple(rng.sample(cands, k))
            inner = ("+" if rng.random() < 0.5 else "-") if k == 2 else ""
            r = rng.random()
            if r < p_plain:
                exprs[p] = Expr("", 0, inner, deps)
            elif r < p_plain + (1 - p_plain) / 2:
                exprs[p] = Expr("+", rng.randrange(23), inner, deps)
            else:
                exprs[p] = Expr("*", rng.randint(1, 22), inner, deps)
        topo.append(p)
        cands.append(p)
        defined |= 1 << p
        still = []
        for x in pending:
            if needs[x] & ~defined:
                still.append(x)
            else:
                topo.append(n + x)
                cands.append(n + x)
        pending = still
    graph.set_exprs(exprs)  # type: ignore[arg-type]
    return topo


def _op_counts(graph: Graph, topo: list[int]) -> tuple[list[int], list[int]]:
    """Ancestor bitmasks and shortest-solution op counts of every parameter."""
    size = len(graph.deps)
    anc = [0] * size
    by_cost: dict[int, int] = {}
    for p, c in enumerate(graph.cost):
        if c:
            by_cost[c] = by_cost.get(c, 0) | (1 << p)
    classes = list(by_cost.items())
    ops = [0] * size
    for p in topo:
        mask = 1 << p
        for x in graph.deps[p]:
            mask |= anc[x]
        anc[p] = mask
        ops[p] = sum(c * (mask & m).bit_count() for c, m in classes)
    return anc, ops


def _solution_order(rng: random.Random, graph: Graph, nodes: list[int]) -> list[int]:
    """A uniformly random step of Kahn's algorithm at a time: a random topological order."""
    indeg = {p: len(graph.deps[p]) for p in nodes}
    kids: dict[int, list[int]] = {p: [] for p in nodes}
    for p in nodes:
        for x in graph.deps[p]:
            kids[x].append(p)
    ready = [p for p in nodes if not indeg[p]]
    order = []
    while ready:
        x = ready.pop(rng.randrange(len(ready)))
        order.append(x)
        for c in kids[x]:
            indeg[c] -= 1
            if not indeg[c]:
                ready.append(c)
    return order


def draw_problem(rng: random.Random, max_edge: int, target: int,
                 hierarchy: int | None = None) -> Problem:
    """A problem whose question needs exactly `target` operations."""
    cats = load_categories()
    graph = needs = None
    for attempt in range(_MAX_ATTEMPTS):
        if attempt % _DRAWS_PER_STRUCTURE == 0:
            graph = _structure(rng, cats, max_edge, target, hierarchy)
            needs = _needs(graph)
        density = min(1.0, rng.random() * 0.6 + target / (1.6 * max_edge))
        topo = _dependencies(rng, graph, needs, density)
        anc, ops = _op_counts(graph, topo)
        hits = [p for p in topo if ops[p] == target]
        if hits:
            q = rng.choice(hits)
            graph.question = q
            mask = anc[q]
            nodes = [p for p in topo if mask >> p & 1]
            order = _solution_order(rng, graph, nodes)
            values = [0] * len(graph.deps)
            for p in topo:
                values[p] = graph.compute(p, values)
            return Problem(graph, values, order, target, rng)
    raise CorpusError(f"igsm: no problem with op={target} found in {_MAX_ATTEMPTS} draws "
                      f"(max_edge={max_edge}); lower op or raise max_edge")


# ---- rendering -------------------------------------------------------------------------------
def problem_text(problem: Problem, rng: random.Random) -> str:
    """The problem's sentences (every instance parameter, shuffled), ending with a period."""
    graph = problem.graph
    order = rng.sample(range(graph.n_inst), graph.n_inst)
    return ". ".join(graph.sentence(p) for p in order) + "."


def _intermediates(graph: Graph, p: int) -> int:
    if p < graph.n_inst:
        e = graph.exprs[p]
        return int(len(e.deps) == 2 and e.outer in ("+", "*"))
    i, _j, t = graph.abstract[p - graph.n_inst]
    c = len(graph.terms[p - graph.n_inst])
    return max(0, c - 2) if t == i + 1 else (2 * c - 2 if c > 1 else 0)


def symbols_for(problem: Problem, rng: random.Random) -> list[str]:
    graph = problem.graph
    need = len(problem.order) + sum(_intermediates(graph, p) for p in problem.order)
    if need <= len(SYMBOLS):
        return rng.sample(SYMBOLS, need)
    return rng.sample(SYMBOLS, len(SYMBOLS)) + rng.sample(EXTRA_SYMBOLS, need - len(SYMBOLS))


def _clause(lhs: str, op: str, a: str, b: str, va: int, vb: int) -> tuple[str, int]:
    res = apply(op, va, vb)
    return f"{lhs} = {a} {op} {b} = {va} {op} {vb} = {res}", res


def _instance_step(e: Expr, s: str, sym: dict[int, str], values: list[int], free,
                   parts: list[str]) -> str:
    """Clauses of an instance parameter's step; returns the final "so ..." clause."""
    if not e.deps:
        return f"so {s} = {e.n}"
    a = e.deps[0]
    ref, val = sym[a], values[a]
    if len(e.deps) == 2:
        b = e.deps[1]
        if e.outer not in ("+", "*"):
            return _clause(f"so {s}", e.inner, ref, sym[b], val, values[b])[0]
        x = next(free)
        clause, val = _clause(x, e.inner, ref, sym[b], val, values[b])
        parts.append(clause)
        ref = x
    if e.outer in ("+", "*"):
        return _clause(f"so {s}", e.outer, str(e.n), ref, e.n, val)[0]
    return f"so {s} = {ref} = {val}"


def _abstract_step(terms: list[tuple[int, int]], s: str, sym: dict[int, str],
                   values: list[int], free, parts: list[str]) -> str:
    """Clauses of an abstract parameter's step: a sum of instance parameters, or of products
    instance * abstract below, added left to right (P1, P2, P1 + P2, P3, ...)."""
    nested = terms[0][1] >= 0
    if len(terms) == 1:
        a, b = terms[0]
        if nested:
            return _clause(f"so {s}", "*", sym[a], sym[b], values[a], values[b])[0]
        return f"so {s} = {sym[a]} = {values[a]}"

    def term(a: int, b: int) -> tuple[str, int]:
        if not nested:
            return sym[a], values[a]
        x = next(free)
        clause, val = _clause(x, "*", sym[a], sym[b], values[a], values[b])
        parts.append(clause)
        return x, val

    acc = term(*terms[0])
    for t in terms[1:-1]:
        right = term(*t)
        y = next(free)
        clause, v = _clause(y, "+", acc[0], right[0], acc[1], right[1])
        parts.append(clause)
        acc = (y, v)
    right = term(*terms[-1])
    return _clause(f"so {s}", "+", acc[0], right[0], acc[1], right[1])[0]


def solution_steps(problem: Problem, symbols: list[str]) -> tuple[list[str], list[str]]:
    """One sentence per solution parameter (no final period) and the symbol each defines."""
    graph, values = problem.graph, problem.values
    free = iter(symbols)
    sym: dict[int, str] = {}
    steps = []
    for p in problem.order:
        s = sym[p] = next(free)
        parts: list[str] = [f"Define {graph.name(p)} as {s}"]
        if p < graph.n_inst:
            last = _instance_step(graph.exprs[p], s, sym, values, free, parts)
        else:
            last = _abstract_step(graph.terms[p - graph.n_inst], s, sym, values, free, parts)
        parts.append(last)
        steps.append("; ".join(parts))
    return steps, [sym[p] for p in problem.order]


def template_hash(problem: Problem) -> str:
    """Hash of the solution's shape: step kinds and which earlier steps each one uses; names,
    numbers and symbols left out. Problems sharing it are one template (the split's unit)."""
    graph = problem.graph
    position = {p: n for n, p in enumerate(problem.order)}
    sketch = []
    for p in problem.order:
        if p < graph.n_inst:
            e = graph.exprs[p]
            kind = e.outer + e.inner
        else:
            i, _j, t = graph.abstract[p - graph.n_inst]
            kind = "A" if t == i + 1 else "AA"
        sketch.append(kind + ",".join(str(position[x]) for x in graph.deps[p]))
    return hashlib.blake2b("|".join(sketch).encode(), digest_size=8).hexdigest()
