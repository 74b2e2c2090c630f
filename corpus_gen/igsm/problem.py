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
from bisect import bisect
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import accumulate, compress

from corpus_gen.core.errors import CorpusError
from corpus_gen.igsm.draws import below, sample, shuffled, two
from corpus_gen.igsm.graph import Expr, Graph, abstract_layout, apply

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
    values: list[int]  # per parameter the solution computes (the question's ancestors; others 0)
    order: list[int]  # the solution: parameters in a topological order, question last
    op: int
    rng_state: random.Random  # continues the problem's stream for rendering and retry draws

    @property
    def answer(self) -> int:
        return self.values[self.graph.question]


# ---- structure -------------------------------------------------------------------------------
@cache
def _width_law(target: int, max_edge: int) -> tuple[list[float], float]:
    """Cumulative weights of `_WIDTHS` (wider levels for larger targets) and their total, the
    floats `Random.choices` would compute from the weights at every call."""
    rel = (target - 1) / max(1, max_edge - 1)
    cum = list(accumulate(math.exp(-(rel - pos) ** 2) for pos in (0.2, 0.5, 0.8)))
    return cum, cum[-1] + 0.0


@cache
def _widths_layout(widths: tuple[int, ...]) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Fewest and most structure edges between levels of these widths, and every possible
    edge (i, j, k) in order: item j of level i to item k of level i + 1."""
    pairs = list(zip(widths, widths[1:]))
    cells = [(i, j, k) for i, (a, b) in enumerate(pairs) for j in range(a) for k in range(b)]
    return sum(max(a, b) for a, b in pairs), sum(a * b for a, b in pairs), cells


def _structure(rng: random.Random, cats: Categories, max_edge: int, target: int,
               hierarchy: int | None) -> Graph:
    bits, uniform = rng.getrandbits, rng.random
    cum, total = _width_law(target, max_edge)
    while True:
        # each width is `rng.choices(_WIDTHS, weights)`: one uniform() through the cumulative law
        d = _WIDTHS[bisect(cum, uniform() * total, 0, 2)]
        t0 = _WIDTHS[bisect(cum, uniform() * total, 0, 2)]
        t1 = _WIDTHS[bisect(cum, uniform() * total, 0, 2)]
        low, span = min(t0, t1), abs(t0 - t1) + 1
        widths = tuple([low + below(bits, span) for _ in range(d)])
        min_e, max_e, cells = _widths_layout(widths)
        max_e = min(max_edge, max_e)
        if min_e <= max_e and 2 * max_e >= target:
            break
    h = cats.hierarchies[below(bits, len(cats.hierarchies)) if hierarchy is None else hierarchy]
    start = below(bits, len(h) - d + 1)
    levels = list(h[start:start + d])
    items: list[list[str]] = []
    used: set[str] = set(levels)
    for level, w in zip(levels, widths):
        subs = cats.pools[level]
        while True:
            chosen = sample(bits, subs[below(bits, len(subs))], w)
            if used.isdisjoint(chosen):
                break
        used.update(chosen)
        items.append(chosen)
    lo = min(max_e, max(min_e, (target + 1) // 2))
    n_edges = lo + below(bits, max_e - lo + 1)
    linked = [False] * len(cells)  # per possible edge (`cells`), whether the structure has it
    first = 0  # the first cell of levels i, i + 1
    for i in range(d - 1):
        a, b = widths[i], widths[i + 1]
        big, small = shuffled(bits, max(a, b)), shuffled(bits, min(a, b))
        # every item of both levels gets an edge: the wider level's n-th item goes to the
        # narrower's n-th, or (past its end) to a random one of them
        for n, x in enumerate(big):
            y = small[n] if n < len(small) else small[below(bits, len(small))]
            linked[first + (x * b + y if a >= b else y * b + x)] = True
        first += a * b
    spare = [c for c, on in enumerate(linked) if not on]
    for c in sample(bits, spare, n_edges - (len(cells) - len(spare))):
        linked[c] = True
    return Graph(levels, items, list(compress(cells, linked)))


# ---- dependencies ----------------------------------------------------------------------------
_FIELD = 8  # bits per parameter in a cost-weighted set: a step costs at most 2 * 4 - 1 = 7


@dataclass(frozen=True)
class _Shape:
    """What the dependency draws on one structure share: the order in which abstract parameters
    computable after the same step join the topological order (deepest level first), and their
    costs as cost-weighted sets (see `_question_candidates`)."""

    pending: tuple[int, ...]
    units: list[int]


@cache
def _pending(widths: tuple[int, ...]) -> tuple[int, ...]:
    abstract = abstract_layout(widths)[0]
    return tuple(sorted(range(len(abstract)), key=lambda x: -abstract[x][0]))


def _shape(graph: Graph) -> _Shape:
    n = graph.n_inst
    costs = graph.cost[n:]
    if costs and not 1 <= min(costs) <= max(costs) < _FIELD:
        raise ValueError(f"igsm: step costs {costs} outside [1, {_FIELD - 1}]")
    # the sets {p} weighted by their costs: cost(p) one bits in p's field
    return _Shape(_pending(tuple(map(len, graph.items))),
                  [((1 << c) - 1) << (_FIELD * p) for p, c in enumerate(costs, n)])


def _ready_steps(graph: Graph, position: list[int]) -> list[int]:
    """Per abstract parameter: the step of the instance parameters' order after which every
    instance parameter its value sums over is defined (step 0 for none)."""
    n, deps = graph.n_inst, graph.deps
    ready = [0] * len(graph.abstract)
    for x in range(len(ready) - 1, -1, -1):  # deeper abstract parameters come later
        step = 0
        for y in deps[n + x]:
            s = position[y] if y < n else ready[y - n]
            if s > step:
                step = s
        ready[x] = step
    return ready


def _dependencies(rng: random.Random, graph: Graph, shape: _Shape, density: float
                  ) -> list[int]:
    """Give every instance parameter an expression (and its deps and cost); return a
    topological order of all params: the instance parameters in a random order, each abstract
    parameter right after the last instance parameter it needs."""
    n = graph.n_inst
    bits, uniform = rng.getrandbits, rng.random
    order = shuffled(bits, n)
    position = [0] * n
    for step, p in enumerate(order):
        position[p] = step
    ready = _ready_steps(graph, position)
    joins: list[list[int]] = [[] for _ in range(n)]
    for x in shape.pending:
        joins[ready[x]].append(n + x)
    p_const = 0.45 - 0.4 * density
    p_two = 0.25 + 0.6 * density
    p_plain = 0.45 - 0.35 * density
    exprs: list[Expr | None] = [None] * n
    deps_of, cost = graph.deps, graph.cost
    topo: list[int] = []  # also the parameters a new expression may use: every one so far
    for p, joining in zip(order, joins):
        r = uniform()
        if not topo or r < p_const:
            k = bits(5)  # below(bits, 23), inlined: it is the commonest draw
            while k >= 23:
                k = bits(5)
            exprs[p] = Expr("=", k, "", ())
            deps_of[p], cost[p] = (), 1
        else:
            if len(topo) >= 2 and uniform() < p_two:
                deps = two(bits, topo)
                inner = "+" if uniform() < 0.5 else "-"
            else:
                deps = (topo[below(bits, len(topo))],)
                inner = ""
            r = uniform()
            if r < p_plain:
                outer, k = "", 0
            elif r < p_plain + (1 - p_plain) / 2:
                outer, k = "+", below(bits, 23)
            else:
                outer, k = "*", 1 + below(bits, 22)
            exprs[p] = Expr(outer, k, inner, deps)
            # max(1, Expr.ops): 2 only for a pair combined with a constant
            deps_of[p], cost[p] = deps, 2 if outer and inner else 1
        topo.append(p)
        topo.extend(joining)
    graph.exprs = exprs  # type: ignore[assignment]
    return topo


def _question_candidates(graph: Graph, topo: list[int], shape: _Shape, target: int
                         ) -> tuple[list[int], list[int]]:
    """Cost-weighted ancestor sets of every parameter (itself included), and the parameters
    whose shortest solution needs exactly `target` operations, in topological order. A set
    holds parameter p as cost(p) one bits in bits [_FIELD * p, _FIELD * (p + 1)), so its
    popcount is its total cost, and it holds p if bit _FIELD * p is set."""
    # an instance parameter costs 1 or 2 (set by `_dependencies`)
    units = [((1 << c) - 1) << (_FIELD * p) for p, c in enumerate(graph.cost[:graph.n_inst])]
    units += shape.units
    deps = graph.deps
    anc = [0] * len(deps)
    hits = []
    for p in topo:
        mask = units[p]
        for x in deps[p]:
            mask |= anc[x]
        anc[p] = mask
        if mask.bit_count() == target:
            hits.append(p)
    return anc, hits


def _solution_order(rng: random.Random, graph: Graph, nodes: list[int]) -> list[int]:
    """A uniformly random step of Kahn's algorithm at a time: a random topological order."""
    bits = rng.getrandbits
    indeg = {p: len(graph.deps[p]) for p in nodes}
    kids: dict[int, list[int]] = {p: [] for p in nodes}
    for p in nodes:
        for x in graph.deps[p]:
            kids[x].append(p)
    ready = [p for p in nodes if not indeg[p]]
    order = []
    while ready:
        x = ready.pop(below(bits, len(ready)))
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
    graph = shape = None
    for attempt in range(_MAX_ATTEMPTS):
        if attempt % _DRAWS_PER_STRUCTURE == 0:
            graph = _structure(rng, cats, max_edge, target, hierarchy)
            shape = _shape(graph)
        density = min(1.0, rng.random() * 0.6 + target / (1.6 * max_edge))
        topo = _dependencies(rng, graph, shape, density)
        anc, hits = _question_candidates(graph, topo, shape, target)
        if hits:
            q = hits[below(rng.getrandbits, len(hits))]
            graph.question = q
            mask = anc[q]
            nodes = [p for p in topo if mask >> (_FIELD * p) & 1]
            order = _solution_order(rng, graph, nodes)
            values = [0] * len(graph.deps)
            for p in nodes:  # the question's ancestors: all the solution reads
                values[p] = graph.compute(p, values)
            return Problem(graph, values, order, target, rng)
    raise CorpusError(f"igsm: no problem with op={target} found in {_MAX_ATTEMPTS} draws "
                      f"(max_edge={max_edge}); lower op or raise max_edge")


# ---- rendering -------------------------------------------------------------------------------
def problem_text(problem: Problem, rng: random.Random) -> str:
    """The problem's sentences (every instance parameter, shuffled), ending with a period."""
    graph = problem.graph
    return ". ".join(map(graph.sentence, shuffled(rng.getrandbits, graph.n_inst))) + "."


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
    bits = rng.getrandbits
    if need <= len(SYMBOLS):
        return sample(bits, SYMBOLS, need)
    return sample(bits, SYMBOLS, len(SYMBOLS)) + sample(bits, EXTRA_SYMBOLS, need - len(SYMBOLS))


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
        parts: list[str] = [f"Define {graph.names[p]} as {s}"]
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
    n, exprs, abstract = graph.n_inst, graph.exprs, graph.abstract
    position = {p: str(k) for k, p in enumerate(problem.order)}
    sketch = []
    for p in problem.order:
        if p < n:
            e = exprs[p]
            kind = e.outer + e.inner
        else:
            i, _j, t = abstract[p - n]
            kind = "A" if t == i + 1 else "AA"
        sketch.append(kind + ",".join(map(position.__getitem__, graph.deps[p])))
    return hashlib.blake2b("|".join(sketch).encode(), digest_size=8).hexdigest()
