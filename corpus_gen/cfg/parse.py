"""Exact membership, parsing and the true next-token distribution of a layered grammar.

Inside probabilities, bottom up (CYK over levels). beta_l[s, i, d] is the probability that symbol
s of level l derives w[i : i + lo_l + d], where lo_l..hi_l bounds the yields of level l (every
leaf sits at the same depth, so a level's spans live in a band of lengths and the chart is
[symbols, n + 1, band], not [symbols, n + 1, n + 1]). A rule a_0 .. a_{L-1} is combined left to
right: vec_c[k] = P(a_0 .. a_{c-1} derive w[i:k]), one sparse vector-band product per child, so a
rule of any length costs the same per child. A string is a member iff beta_0[root, 0, n] > 0.

Prefix probabilities with one token of lookahead, bottom up as well. pre_l[s, i, e, t] is the
probability that s's yield starts with w[i : i + e] followed by terminal t: the child holding
position i + e is the first child not wholly inside the prefix, so
pre(s, i, e, t) = sum_rules weight * sum_c sum_k vec_c[k] * pre(a_c, k, i + e - k, t).
The next-token distribution after w[:p] is then pre_0[root, 0, p, t] for each t and
beta_0[root, 0, p] for the end of the string, over P(w[:p]), which is pre_0[root, 0, p-1, w_{p-1}]
(computed one position earlier: that the parts sum to one is a check, not a normalisation).

Scaling: every span's value is kept multiplied by K ** (its length) with K = grammar.token_scale,
which is exact since lengths add along a derivation, and keeps a 250-token string's probability
(~1e-80 for cfg3f) and its prefixes' in range; ratios come out unscaled.

The kernels are compiled with numba (cached on disk after the first call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from corpus_gen.cfg.grammar import Grammar
from corpus_gen.core.jit import njit


@dataclass
class Verdict:
    member: bool
    kind: str = "member"  # else why not, as a key to count by: empty | alphabet | length |
    # no_derivation
    reason: str = ""  # the same in words, naming the token or the length


@njit(cache=True)
def _terminal_chart(tokens, terminals, scale):  # pragma: no cover - compiled
    n = len(tokens)
    beta = np.zeros((terminals, n + 1, 1))
    for i in range(n):
        if 0 <= tokens[i] < terminals:  # a token outside the alphabet derives from nothing
            beta[tokens[i], i, 0] = scale
    return beta


@njit(cache=True)
def _grow(vec, low, high, child_beta, a, child_lo, n, out):  # pragma: no cover - compiled
    """out[m] = sum_k vec[k] * beta(a, k, m): the chain of a rule's children so far, grown by
    child a. vec is zero outside [low, high]; returns out's bounds likewise (high < 0: none)."""
    out[:] = 0.0
    new_low, new_high = n + 1, -1
    for k in range(low, high + 1):
        v = vec[k]
        if v == 0.0:
            continue
        for d in range(child_beta.shape[2]):
            m = k + child_lo + d
            if m > n:
                break
            b = child_beta[a, k, d]
            if b != 0.0:
                out[m] += v * b
                new_low = min(new_low, m)
                new_high = max(new_high, m)
    return new_low, new_high


@njit(cache=True)
def _inside_level(child_beta, child_lo, first, length, child, weight, parent,
                  symbols, lo, width, n, root):  # pragma: no cover - compiled
    """beta of one level from the level below it (see the module docstring)."""
    beta = np.zeros((symbols, n + 1, width))
    vec = np.zeros(n + 1)
    nxt = np.zeros(n + 1)
    starts = 1 if root else n
    for r in range(len(length)):
        s = parent[r]
        for i in range(starts):
            vec[:] = 0.0
            vec[i] = 1.0
            low = high = i  # vec is zero outside [low, high]
            for c in range(length[r]):
                a = child[r, c]
                low, high = _grow(vec, low, high, child_beta, a, child_lo, n, nxt)
                vec, nxt = nxt, vec
                if high < 0:
                    break
            if high < 0:
                continue
            for j in range(max(low, i + lo), min(high, i + lo + width - 1) + 1):
                beta[s, i, j - i - lo] += weight[r] * vec[j]
    return beta


@njit(cache=True)
def _terminal_prefix(terminals, n, scale):  # pragma: no cover - compiled
    pre = np.zeros((terminals, n + 1, 1, terminals))
    for x in range(terminals):
        for i in range(n + 1):
            pre[x, i, 0, x] = scale
    return pre


@njit(cache=True)
def _prefix_level(child_beta, child_lo, child_pre, length, child, weight, parent, symbols,
                  reach, n, root):  # pragma: no cover - compiled
    """pre of one level from the level below (see the module docstring); e < reach."""
    terminals = child_pre.shape[3]
    child_reach = child_pre.shape[2]
    pre = np.zeros((symbols, n + 1, reach, terminals))
    vec = np.zeros(n + 1)
    nxt = np.zeros(n + 1)
    starts = 1 if root else n + 1
    for r in range(len(length)):
        s = parent[r]
        w = weight[r]
        for i in range(starts):
            vec[:] = 0.0
            vec[i] = 1.0
            low = high = i
            for c in range(length[r]):
                a = child[r, c]
                # the lookahead token falls in child c, which starts at k
                for k in range(low, high + 1):
                    v = vec[k]
                    if v == 0.0:
                        continue
                    for e in range(child_reach):
                        p = k + e
                        if p > n or p - i >= reach:
                            break
                        for t in range(terminals):
                            pre[s, i, p - i, t] += w * v * child_pre[a, k, e, t]
                if c == length[r] - 1:
                    break
                low, high = _grow(vec, low, high, child_beta, a, child_lo, n, nxt)
                vec, nxt = nxt, vec
                if high < 0:
                    break
    return pre


def _bands(grammar: Grammar, n: int) -> list[tuple[int, int]]:
    """(lo, width) of each level's span lengths for a string of length n (width 0: no span of
    that level fits)."""
    result = []
    for low, high in grammar.yield_bounds:
        lo = int(low.min())
        result.append((lo, max(0, min(int(high.max()), n) - lo + 1)))
    return result


def inside(grammar: Grammar, tokens: np.ndarray) -> list[np.ndarray]:
    """The scaled inside charts of every level, root first, terminals last (module docstring).
    Level 0 is computed for start 0 only (the root spans the whole string)."""
    n = len(tokens)
    bands = _bands(grammar, n)
    charts = [_terminal_chart(np.asarray(tokens, dtype=np.int64), grammar.terminals,
                              grammar.token_scale)]
    for level in range(grammar.depth - 1, -1, -1):
        lo, width = bands[level]
        child_lo = bands[level + 1][0]
        t = grammar.tables[level]
        charts.append(_inside_level(charts[-1], child_lo, t.first, t.length, t.child, t.weight,
                                    t.parent, len(t.first) - 1, lo, max(width, 1), n,
                                    level == 0))
    return charts[::-1]


def membership(grammar: Grammar, tokens) -> Verdict:
    """Whether a string of terminal indices (0..T-1) is in the language, and why not."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if len(tokens) == 0:
        return Verdict(False, "empty", "empty string")
    outside = tokens[(tokens < 0) | (tokens >= grammar.terminals)]
    if len(outside):
        return Verdict(False, "alphabet", f"token {int(outside[0])} outside the alphabet "
                                          f"0..{grammar.terminals - 1}")
    low, high = (int(b[0]) for b in grammar.yield_bounds[0])
    if not low <= len(tokens) <= high:
        return Verdict(False, "length",
                       f"length {len(tokens)} outside the language's [{low}, {high}]")
    if _scaled_root(grammar, tokens, None) > 0:  # scaled: no underflow
        return Verdict(True)
    return Verdict(False, "no_derivation", "no derivation")


def _scaled_root(grammar: Grammar, tokens: np.ndarray, charts) -> float:
    """The root's chart entry for the whole string: P(tokens) * token_scale ** len(tokens)."""
    charts = charts if charts is not None else inside(grammar, tokens)
    n = len(tokens)
    lo, width = _bands(grammar, n)[0]
    return float(charts[0][0, 0, n - lo]) if lo <= n < lo + width else 0.0


def log_probability(grammar: Grammar, tokens, charts=None) -> float:
    """log P(the grammar generates exactly `tokens`), from the scaled chart: finite for a member
    of any length (the unscaled probability of a 1,000-terminal string underflows); -inf for a
    non-member."""
    tokens = np.asarray(tokens, dtype=np.int64)
    scaled = _scaled_root(grammar, tokens, charts)
    return math.log(scaled) - len(tokens) * math.log(grammar.token_scale) if scaled else -math.inf


def root_probability(grammar: Grammar, tokens, charts=None) -> float:
    """P(the grammar generates exactly `tokens`) (0.0 where it underflows: see log_probability)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    return _scaled_root(grammar, tokens, charts) * grammar.token_scale ** -len(tokens)


def parse(grammar: Grammar, tokens) -> list[int] | None:
    """One derivation of a member string as rule choices in level order (the sampler's record
    format, see sample.replay), or None for a non-member."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if not membership(grammar, tokens).member:
        return None
    charts = inside(grammar, tokens)
    bands = _bands(grammar, len(tokens))
    nodes = [(0, 0, len(tokens))]  # (symbol, start, end) of one level, left to right
    choices: list[int] = []
    for level in range(grammar.depth):
        below: list[tuple[int, int, int]] = []
        for symbol, start, end in nodes:
            choice, children = _split(grammar, charts, bands, level, symbol, start, end)
            choices.append(choice)
            below.extend(children)
        nodes = below
    return choices


def _span(charts, bands, level: int, symbol: int, start: int, end: int) -> float:
    lo, width = bands[level]
    d = end - start - lo
    return float(charts[level][symbol, start, d]) if 0 <= d < width else 0.0


def _split(grammar: Grammar, charts, bands, level: int, symbol: int, start: int, end: int):
    """The first rule of `symbol` (and child spans) that derives w[start:end]."""
    for choice, rule in enumerate(grammar.levels[level][symbol]):
        found = _spans(charts, bands, level + 1, rule, start, end)
        if found is not None:
            return choice, found
    raise AssertionError(f"level {level} symbol {symbol} [{start}, {end}) has no derivation "
                         "though its inside probability is positive")


def _spans(charts, bands, level: int, rule: tuple[int, ...], start: int, end: int):
    """Child spans (symbol, start, end) of `rule` tiling [start, end), or None."""
    if not rule:
        return [] if start == end else None
    head, rest = rule[0], rule[1:]
    lo, width = bands[level]
    for split in range(start + lo, min(end, start + lo + width - 1) + 1):
        if _span(charts, bands, level, head, start, split) > 0:
            tail = _spans(charts, bands, level, rest, split, end)
            if tail is not None:
                return [(head, start, split), *tail]
    return None


def next_token_distribution(grammar: Grammar, tokens) -> np.ndarray:
    """[len + 1, T + 1]: row p is the true distribution of the token after tokens[:p] over the
    terminals and, last, the end of the string. A row after an impossible prefix is all zeros."""
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    bands = _bands(grammar, n)
    charts = inside(grammar, tokens)
    scale = grammar.token_scale
    pre = _terminal_prefix(grammar.terminals, n, scale)
    for level in range(grammar.depth - 1, -1, -1):
        t = grammar.tables[level]
        reach = min(int(grammar.yield_bounds[level][1].max()), n + 1)
        pre = _prefix_level(charts[level + 1], bands[level + 1][0], pre, t.length, t.child,
                            t.weight, t.parent, len(t.first) - 1, reach, n, level == 0)
    lookahead = pre[0, 0, :, :]  # [reach, T]: scaled P(w[:p] t), scale K ** (p + 1)
    result = np.zeros((n + 1, grammar.terminals + 1))
    lo, width = bands[0]
    prefix = 1.0  # scaled P(w[:p]) at scale K ** p
    for p in range(n + 1):
        if prefix > 0:
            if p < len(lookahead):
                result[p, :-1] = lookahead[p] / (prefix * scale)
            if lo <= p < lo + width:
                result[p, -1] = charts[0][0, 0, p - lo] / prefix
        viable = p < n and p < len(lookahead) and 0 <= tokens[p] < grammar.terminals
        prefix = lookahead[p, tokens[p]] if viable else 0.0
    return result
