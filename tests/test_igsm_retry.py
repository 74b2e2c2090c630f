"""Retry data (Part 2.2): erroneous steps followed by [BACK], masked when asked, and every
other step still correct."""

import random
import re
from types import SimpleNamespace

import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.registry import get_family, schemas
from corpus_gen.igsm.checker import check_solution
from corpus_gen.igsm.family import _wrong_param
from corpus_gen.igsm.graph import Graph
from corpus_gen.igsm.problem import draw_problem

FAMILY = get_family("igsm")


def _config(tmp_path, **overrides):
    path = tmp_path / "igsm.yaml"
    path.write_text("family: igsm\n")
    items = {"problems": 400, "eval_problems": 5}
    items.update(overrides)
    return load_config(path, [f"{k}={v}" for k, v in items.items()], schemas())


def _sentences(text: str) -> list[str]:
    body = text.split(" Solution: ", 1)[1].rsplit(" Answer: ", 1)[0]
    return body[:-1].split(". ")


@pytest.mark.parametrize("kind", ["real", "fake"])
@pytest.mark.parametrize("mask", [False, True])
def test_retry_steps_are_marked_masked_and_the_rest_is_correct(tmp_path, kind, mask):
    config = _config(tmp_path, retry_rate=0.4, retry_kind=kind, retry_mask=mask)
    total = 0
    for record in FAMILY.records(config, 0, 400):
        text, meta = record.text, record.meta
        result = check_solution(meta["problem"], text)
        assert result.correct, result  # every non-retry step correct, in order
        sentences = _sentences(text)
        back = [n for n, s in enumerate(sentences) if s.endswith(" [BACK]")]
        assert back == [n for n, _ in meta["retries"]] and result.retracted == len(back)
        assert text.count("[BACK]") == len(back)
        graph = Graph.from_dict(meta["problem"])
        kept = [s for s in sentences if not s.endswith(" [BACK]")]
        assert len(kept) == len(meta["steps"])
        for n, wrong in meta["retries"]:
            assert sentences[n] == f"Define {graph.name(wrong)} as " \
                                   f"{sentences[n + 1].split(' as ', 1)[1].split(';')[0]} [BACK]"
            done = set(meta["steps"][:n - sum(1 for m, _ in meta["retries"] if m < n)])
            if kind == "real":  # cannot be computed yet
                assert wrong not in done and any(x not in done for x in graph.deps[wrong])
            else:  # a future step of the solution
                assert wrong in meta["steps"] and wrong not in done
        if mask:
            spans = [text[a:b] for a, b in record.masked]
            assert spans == [s[: -len(" [BACK]")] for s in sentences if s.endswith("[BACK]")]
            for a, b in record.masked:  # on word boundaries
                assert text[a - 1] == " " and text[b] == " " and text[b:b + 7] == " [BACK]"
        else:
            assert record.masked == ()
        total += len(back)
    assert total > 400


def test_no_retry_means_no_back(tmp_path):
    config = _config(tmp_path)
    assert FAMILY.layout(config).user_symbols == ("[BACK]",)
    for record in FAMILY.records(config, 0, 100):
        assert "[BACK]" not in record.text and not record.meta["retries"]
        assert not re.search(r"\s{2}", record.text)


def test_a_fake_mistake_is_a_later_step_never_the_current_one():
    problem = draw_problem(random.Random(0), 20, 8)
    order, fake = problem.order, SimpleNamespace(retry_kind="fake")
    assert _wrong_param(fake, problem, len(order) - 1, set(order[:-1]), random.Random(0)) is None
    for position in range(len(order) - 1):
        for seed in range(20):
            wrong = _wrong_param(fake, problem, position, set(order[:position]),
                                 random.Random(seed))
            assert wrong in order[position + 1:]
