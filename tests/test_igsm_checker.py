"""The iGSM solution checker: accepts any valid order, rejects each kind of error with the
right reason and step, and never raises on malformed text."""

import random
import re

import pytest

from corpus_gen.igsm.checker import REASONS, check_solution, split_solution
from corpus_gen.igsm.graph import Expr, Graph
from corpus_gen.igsm.problem import (
    Problem,
    _solution_order,
    draw_problem,
    solution_steps,
    symbols_for,
)


def _problem(op: int = 8, seed: int = 0) -> Problem:
    return draw_problem(random.Random(seed), 20, op)


def _steps(problem: Problem, seed: int = 0) -> list[str]:
    return solution_steps(problem, symbols_for(problem, random.Random(seed)))[0]


def _text(steps: list[str], answer: int | None = None) -> str:
    tail = "" if answer is None else f" Answer: {answer}."
    return ". ".join(steps) + "." + tail


@pytest.fixture(scope="module")
def problems():
    return [_problem(op, seed) for op in (3, 6, 10, 14) for seed in range(10)]


def test_accepts_own_solution_and_any_valid_reordering(problems):
    reordered = 0
    for problem in problems:
        graph = problem.graph
        assert check_solution(graph, _text(_steps(problem), problem.answer)).correct
        nodes = list(problem.order)
        for seed in range(5):
            order = _solution_order(random.Random(seed), graph, nodes)
            if order != problem.order:
                reordered += 1
            other = Problem(graph, problem.values, order, problem.op, random.Random(0))
            result = check_solution(graph.to_dict(), _text(_steps(other, seed)))
            assert result.correct and result.answer == problem.answer, result
    assert reordered > 50


def _first(steps, pattern):
    return next(n for n, s in enumerate(steps) if re.search(pattern, s))


def test_rejects_a_wrong_value(problems):
    for problem in problems:
        steps = _steps(problem)
        n = _first(steps, r"; so [A-Za-z]+ = \d+$")  # a constant step
        value = int(steps[n].rsplit(" ", 1)[1])
        steps[n] = steps[n].rsplit(" ", 1)[0] + f" {(value + 1) % 23}"
        result = check_solution(problem.graph, _text(steps))
        assert (result.correct, result.reason, result.step) == (False, "wrong_value", n)


def test_rejects_bad_arithmetic(problems):
    for problem in problems:
        steps = _steps(problem)
        n = _first(steps, r" [-+*] ")
        head, value = steps[n].rsplit(" = ", 1)
        steps[n] = f"{head} = {(int(value) + 5) % 23}"
        result = check_solution(problem.graph, _text(steps))
        assert (result.reason, result.step) == ("arithmetic", n)


def test_rejects_a_wrong_order(problems):
    for problem in problems:
        graph, order = problem.graph, problem.order
        steps = _steps(problem)
        n = next(n for n, p in enumerate(order) if graph.deps[p])  # uses an earlier step
        dep = max(order.index(x) for x in graph.deps[order[n]])
        steps.insert(dep, steps.pop(n))  # now before the step it needs
        result = check_solution(graph, _text(steps))
        assert (result.reason, result.step) == ("not_ready", dep), result


def test_rejects_an_undefined_name_and_symbol(problems):
    problem = problems[5]
    steps = _steps(problem)
    bad = list(steps)
    bad[1] = re.sub(r"^Define .+ as ", "Define Atlantis's Unicorn as ", bad[1])
    result = check_solution(problem.graph, _text(bad))
    assert (result.reason, result.step) == ("unknown_name", 1)
    n = _first(steps, r"= [A-Za-z]+ [-+*] [A-Za-z]+ =|= \d+ [-+*] [A-Za-z]+ =")
    bad = list(steps)
    bad[n] = re.sub(r"(= (?:\d+|[A-Za-z]+) [-+*] )([A-Za-z]+)( =)", r"\1Zq\3", bad[n], count=1)
    result = check_solution(problem.graph, _text(bad))
    assert (result.reason, result.step) == ("undefined_symbol", n), (result, bad[n])


def test_rejects_wrong_answer_redefinition_and_missing_question(problems):
    problem = problems[7]
    steps = _steps(problem)
    result = check_solution(problem.graph, _text(steps, (problem.answer + 1) % 23))
    assert result.reason == "wrong_answer" and result.step is None
    assert check_solution(problem.graph, _text(steps[:-1])).reason == "no_answer"
    result = check_solution(problem.graph, _text(steps[:1] + steps))
    assert (result.reason, result.step) == ("redefined", 1)


def test_retracted_steps_are_skipped(problems):
    problem = problems[3]
    steps = _steps(problem)
    steps.insert(1, "Define Nowhere's Nothing as q [BACK]")
    result = check_solution(problem.graph, _text(steps))
    assert result.correct and result.retracted == 1


@pytest.mark.parametrize("text", ["", "Answer: 3.", "nonsense", "Define", "Define X as",
                                  "Define a's b as c; so c = ", "Define a as b; so b = 1 + + 2",
                                  "\x00\n.;=", "Solution: Define . . Answer: x"])
def test_malformed_text_is_wrong_never_a_crash(problems, text):
    result = check_solution(problems[0].graph, text)
    assert not result.correct and result.reason in REASONS


def test_mutated_solutions_never_crash(problems):
    rng = random.Random(0)
    alphabet = "abcXYZ0123456789 +-*=;.'[]BACKDefinesoas"
    kinds = set()
    for problem in problems:
        text = _text(_steps(problem), problem.answer)
        for _ in range(60):
            chars = list(text)
            for _ in range(rng.randint(1, 4)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            cut = "".join(chars)[: rng.randint(0, len(chars))] if rng.random() < 0.3 else chars
            result = check_solution(problem.graph.to_dict(), "".join(cut))
            assert result.correct or result.reason in REASONS
            kinds.add(result.reason)
    assert {"malformed", "arithmetic"} <= kinds
    assert check_solution(problems[0].graph, None).reason == "malformed"  # type: ignore[arg-type]


def test_split_solution_reads_documents():
    steps, answer, retracted = split_solution(
        "Q? Solution: Define A's B as x; so x = 3. Define A's C as y [BACK]. Answer: 3.")
    assert steps == ["Define A's B as x; so x = 3"] and answer == 3 and retracted == 1


def _three_children(third: Expr) -> Graph:
    """a1 with three children, b1 = 5, b2 = 5 and b3 = `third`; the question is b3."""
    graph = Graph(["A", "B"], [["a1"], ["b1", "b2", "b3"]], [(0, 0, 0), (0, 0, 1), (0, 0, 2)])
    graph.set_exprs([Expr("=", 5, "", ()), Expr("=", 5, "", ()), third])
    graph.question = 2
    return graph


B1, B2 = "Define a1's b1 as x; so x = 5", "Define a1's b2 as z; so z = 5"
B3_FROM_B1 = Expr("+", 3, "", (0,))  # b3 = 3 + b1 = 8


def test_a_step_on_the_wrong_parameter_of_the_same_value_is_wrong_dependencies():
    graph = _three_children(B3_FROM_B1)
    assert check_solution(graph, f"{B1}. Define a1's b3 as y; so y = 3 + x = 3 + 5 = 8.").correct
    result = check_solution(graph, f"{B1}. {B2}. Define a1's b3 as y; so y = 3 + z = 3 + 5 = 8.")
    assert (result.correct, result.reason, result.step) == (False, "wrong_dependencies", 2)


def test_wrong_values_substituted_with_the_right_result_are_a_wrong_substitution():
    graph = _three_children(Expr("", 0, "+", (0, 1)))  # b3 = b1 + b2 = 10
    right = f"{B1}. {B2}. Define a1's b3 as y; so y = x + z = 5 + 5 = 10."
    assert check_solution(graph, right).correct
    result = check_solution(graph, right.replace("5 + 5", "4 + 6"))
    assert (result.correct, result.reason, result.step) == (False, "wrong_substitution", 2)


def test_a_step_the_question_does_not_need_is_counted_unnecessary():
    result = check_solution(_three_children(B3_FROM_B1),
                            f"{B1}. {B2}. Define a1's b3 as y; so y = 3 + x = 3 + 5 = 8.")
    assert result.correct and (result.steps, result.unnecessary) == (3, 1)


def test_the_final_answer_is_compared_mod_23():
    text = f"{B1}. Define a1's b3 as y; so y = 3 + x = 3 + 5 = 8. Answer: 31."
    result = check_solution(_three_children(B3_FROM_B1), text)
    assert result.correct and (result.answer, result.expected) == (31, 8)
