"""Parse and check an iGSM solution step by step, against the problem's graph.

    from corpus_gen.igsm.checker import check_solution
    result = check_solution(row["problem"], generated_text)
    result.correct, result.reason, result.step, result.detail

Every step "Define <parameter> as <symbol>; [<symbol> = <a> <op> <b> = <x> <op> <y> = <r>; ...]
so <symbol> = ..." must name a parameter of the problem, not one defined before, whose
dependencies are all already defined; it may use only symbols already defined, exactly the
parameter's dependencies, one binary operation per clause, each number it substitutes must be
the symbol's value, every result must be right mod 23, and the parameter's value must be right.
Any order that satisfies this is accepted (parameters beyond the necessary ones are counted in
`unnecessary`, not rejected). A step ending in "[BACK]" is retracted and skipped. The final answer
is the number after "Answer:" or, without it, the value the solution gave the question's
parameter. Malformed text is scored wrong with a reason; the checker never raises on text.
"""

import re
from dataclasses import dataclass

from corpus_gen.igsm.graph import MOD, Graph, apply

BACK = "[BACK]"
REASONS = (
    "malformed",  # a step or clause that does not parse
    "unknown_name",  # "Define X as s" where X is no parameter of the problem
    "redefined",  # the parameter, or the symbol, was defined before
    "not_ready",  # the parameter depends on one not yet defined (wrong order)
    "undefined_symbol",  # an expression uses a symbol never defined before
    "wrong_dependencies",  # the step uses parameters other than the ones it depends on
    "wrong_substitution",  # a number substituted for a symbol is not the symbol's value
    "arithmetic",  # a clause's result is wrong (mod 23)
    "wrong_value",  # the parameter's value is wrong (e.g. a wrong constant)
    "no_answer",  # the question's parameter is never defined and no "Answer:" is given
    "wrong_answer",  # the final answer is wrong
)

_STEP = re.compile(r"Define (.+) as ([A-Za-z]+); (.+)")
_ATOM = re.compile(r"[A-Za-z]+|\d+")
_INT = re.compile(r"\d+")
_ANSWER = re.compile(r"Answer:\s*(-?\d+)")


@dataclass(frozen=True)
class CheckResult:
    correct: bool  # every step valid and the final answer right
    reason: str | None = None  # one of REASONS when not correct
    step: int | None = None  # index of the failing step (retracted steps not counted)
    detail: str = ""  # human-readable: what exactly failed
    answer: int | None = None  # the final answer the text gives (None if none)
    expected: int | None = None  # the right answer
    steps: int = 0  # steps checked (retracted ones not counted)
    unnecessary: int = 0  # valid steps defining parameters the question does not need
    retracted: int = 0  # steps followed by [BACK]


class _Fail(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def split_solution(text: str) -> tuple[list[str], int | None, int]:
    """(steps, the "Answer:" number or None, retracted steps) of a solution or a document."""
    if "Solution:" in text:
        text = text.split("Solution:", 1)[1]
    answer = None
    if "Answer:" in text:
        text, tail = text.split("Answer:", 1)
        match = _ANSWER.match("Answer:" + tail)
        answer = int(match.group(1)) if match else None
    body = text.strip()
    if body.endswith("."):
        body = body[:-1]
    parts = [s.strip() for s in re.split(r"\.\s+(?=Define\b)", body)] if body else []
    steps = [s for s in parts if not s.endswith(BACK)]
    return steps, answer, len(parts) - len(steps)


def _evaluate(part: str, known: dict[str, int], lhs: str) -> tuple[list[str], str, int]:
    """Atoms, operator and value of "a", "a + b" (atoms: symbols or integers)."""
    tokens = part.split(" ")
    if len(tokens) == 1:
        atoms, op = tokens, ""
    elif len(tokens) == 3 and tokens[1] in ("+", "-", "*"):
        atoms, op = [tokens[0], tokens[2]], tokens[1]
    else:
        raise _Fail("malformed", f"{lhs}: {part!r} is not one operand or one binary operation")
    values = []
    for atom in atoms:
        if not _ATOM.fullmatch(atom):
            raise _Fail("malformed", f"{lhs}: {atom!r} is neither a symbol nor a number")
        if _INT.fullmatch(atom):
            values.append(int(atom))
        elif atom in known:
            values.append(known[atom])
        else:
            raise _Fail("undefined_symbol", f"{lhs}: uses {atom!r}, not defined before")
    value = values[0] % MOD if not op else apply(op, values[0], values[1])
    return atoms, op, value


def _clause(clause: str, known: dict[str, int]) -> tuple[str, int, list[str]]:
    """Check "<lhs> = part = ... = <result>"; return (lhs, result, symbols used)."""
    parts = clause.split(" = ")
    lhs = parts[0]
    if len(parts) < 2 or not re.fullmatch(r"[A-Za-z]+", lhs):
        raise _Fail("malformed", f"{clause!r} is not '<symbol> = ... = <number>'")
    if not _INT.fullmatch(parts[-1]):
        raise _Fail("malformed", f"{lhs}: result {parts[-1]!r} is not a number")
    result = int(parts[-1])
    used: list[str] = []
    previous = None
    for part in parts[1:-1]:
        atoms, op, value = _evaluate(part, known, lhs)
        if previous is not None and previous[1] == op and len(previous[0]) == len(atoms):
            for before, now in zip(previous[0], atoms):  # "a + b = 3 + 4": 3, 4 are a's, b's
                if not _INT.fullmatch(before) and _INT.fullmatch(now) and \
                        known[before] != int(now) % MOD:
                    raise _Fail("wrong_substitution",
                                f"{lhs}: {before} is {known[before]}, not {now}")
        if value != result % MOD:
            raise _Fail("arithmetic", f"{lhs}: {part} is {value}, not {result}")
        used.extend(a for a in atoms if not _INT.fullmatch(a))
        previous = (atoms, op)
    return lhs, result % MOD, used


def check_solution(problem: dict | Graph, text: str) -> CheckResult:
    """Check every step of `text` (a solution, or a document holding "Solution: ...") against
    `problem` (a record's meta["problem"] dict, or a Graph). Never raises on malformed text."""
    graph = problem if isinstance(problem, Graph) else Graph.from_dict(problem)
    values = graph.values()
    expected = values[graph.question]
    names = {graph.name(p): p for p in range(len(graph))}
    necessary = graph.ancestors(graph.question)
    if not isinstance(text, str):
        return CheckResult(False, "malformed", None, "solution is not text", None, expected)
    steps, answer, retracted = split_solution(text)
    known: dict[str, int] = {}  # symbol -> value
    param_of: dict[str, int] = {}  # symbol -> parameter it defines
    defined: dict[int, str] = {}  # parameter -> symbol
    unnecessary = 0

    def fail(index: int | None, reason: str, detail: str) -> CheckResult:
        return CheckResult(False, reason, index, detail, answer, expected, len(steps),
                           unnecessary, retracted)

    for index, step in enumerate(steps):
        try:
            match = _STEP.fullmatch(step)
            if not match:
                raise _Fail("malformed", f"{step[:80]!r} is not 'Define <parameter> as <symbol>; "
                                         "... so <symbol> = ...'")
            name, symbol, body = match.groups()
            if name not in names:
                raise _Fail("unknown_name", f"{name!r} is no parameter of this problem")
            p = names[name]
            if p in defined:
                raise _Fail("redefined", f"{name} was already defined as {defined[p]}")
            if symbol in known:
                raise _Fail("redefined", f"symbol {symbol} is already in use")
            missing = [graph.name(x) for x in graph.deps[p] if x not in defined]
            if missing:
                raise _Fail("not_ready", f"{name} needs {missing[0]}, not yet defined")
            local = dict(known)
            used: set[str] = set()
            clauses = body.split("; ")
            for n, clause in enumerate(clauses):
                final = n == len(clauses) - 1
                if final != clause.startswith("so "):
                    raise _Fail("malformed", f"{name}: only the last clause starts with 'so '")
                lhs, result, symbols = _clause(clause[3:] if final else clause, local)
                if final and lhs != symbol:
                    raise _Fail("malformed", f"{name}: ends with 'so {lhs}', not 'so {symbol}'")
                if lhs in local or (not final and lhs == symbol):
                    raise _Fail("redefined", f"{name}: symbol {lhs} is already in use")
                local[lhs] = result
                used.update(s for s in symbols if s in param_of)
            refs = {param_of[s] for s in used}
            if refs != set(graph.deps[p]):
                raise _Fail("wrong_dependencies",
                            f"{name} uses {sorted(graph.name(x) for x in refs)}, but depends on "
                            f"{sorted(graph.name(x) for x in graph.deps[p])}")
            if local[symbol] != values[p]:
                raise _Fail("wrong_value", f"{name} is {values[p]}, not {local[symbol]}")
        except _Fail as exc:
            return fail(index, exc.reason, exc.detail)
        known[symbol] = values[p]
        param_of[symbol] = p
        defined[p] = symbol
        unnecessary += p not in necessary
    if graph.question not in defined:
        return fail(None, "no_answer", f"{graph.name(graph.question)} is never defined")
    if answer is None:
        answer = known[defined[graph.question]]
    if answer % MOD != expected:
        return fail(None, "wrong_answer", f"answer {answer}, expected {expected}")
    return CheckResult(True, None, None, "", answer, expected, len(steps), unnecessary, retracted)
