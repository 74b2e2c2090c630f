"""The igsm family: documents "<problem> <question> Solution: <steps>. Answer: <n>." with the
problem's graph, op count, answer, solution order and template hash in `meta`.

Problem n of a stream is a pure function of (config, seed, stream, n): its `random.Random` is
seeded from the counter-based hash of n. Training problems and `igsm_test` are split by solution
template hash, so no test template is ever trained on; `igsm_op<k>` sets hold problems of exactly
k operations (out of distribution above max_op).
"""

import random
from collections.abc import Callable, Iterator

import numpy as np

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.records import Record
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key, hash_u64
from corpus_gen.igsm.checker import BACK
from corpus_gen.igsm.config import HIERARCHIES, IgsmConfig
from corpus_gen.igsm.problem import (
    Problem,
    draw_problem,
    problem_text,
    solution_steps,
    symbols_for,
    template_hash,
)

_SPLIT_SCALE = 1_000_000
_MAX_SPLIT_REJECTS = 20_000
_REJECTS_PER_TARGET = 200
_EVAL_CHUNK = 4096


def layout(config: IgsmConfig) -> Layout:
    return Layout(
        records=config.problems,
        summary={"problems": config.problems, "max_op": config.ops_max,
                 "max_edge": config.edges, "op": config.op or 0,
                 "eval_problems_per_set": config.eval_problems},
        user_symbols=(BACK,),
    )


def is_test_template(template: str, test_fraction: float) -> bool:
    return int(template, 16) % _SPLIT_SCALE < test_fraction * _SPLIT_SCALE


def _hierarchy(config: IgsmConfig) -> int | None:
    return None if config.hierarchy == "any" else HIERARCHIES.index(config.hierarchy) - 1


def _target(config: IgsmConfig, rng: random.Random) -> int:
    """Training op count: exactly `op`, or the official "light" law min(U, U') on [1, max_op]."""
    if config.op:
        return config.op
    return min(rng.randint(1, config.ops_max), rng.randint(1, config.ops_max))


def _draw(config: IgsmConfig, rng: random.Random, op: int | None, split: str | None
          ) -> tuple[Problem, str]:
    """A problem whose template belongs to `split` (None: any template), of exactly `op`
    operations, or (op None) of a target drawn by `_target`. The fewest-op templates are so few
    (op 1 has a single one) that a split may hold none at some target: after
    `_REJECTS_PER_TARGET` draws without one, the target is drawn again."""
    for attempt in range(_MAX_SPLIT_REJECTS):
        if attempt % _REJECTS_PER_TARGET == 0:
            target = op or _target(config, rng)
        problem = draw_problem(rng, config.edges, target, _hierarchy(config))
        template = template_hash(problem)
        if split is None or is_test_template(template, config.test_fraction) == (split == "test"):
            return problem, template
    raise CorpusError(f"igsm: no {split} template with op={op or 'any drawn'} in "
                      f"{_MAX_SPLIT_REJECTS} draws; change op or test_fraction="
                      f"{config.test_fraction}")


def _head(config: IgsmConfig, problem: Problem, rng: random.Random) -> str:
    body, question = problem_text(problem, rng), problem.graph.question_text()
    if config.format == "pq":
        return f"{body} {question}"
    return f"{question} {body} {question}" if config.reask else f"{question} {body}"


def _wrong_param(config: IgsmConfig, problem: Problem, position: int, defined: set[int],
                 rng: random.Random) -> int | None:
    """The parameter of an erroneous step before solution step `position`: one that cannot be
    computed yet (real), or one of the solution's later steps (fake); None if there is none."""
    if config.retry_kind == "fake":
        future = problem.order[position + 1:]
        return rng.choice(future) if future else None
    graph = problem.graph
    blocked = [p for p in range(len(graph)) if p not in defined
               and any(x not in defined for x in graph.deps[p])]
    return rng.choice(blocked) if blocked else None


def document(config: IgsmConfig, problem: Problem, template: str, rng: random.Random,
             retry: bool) -> Record:
    graph = problem.graph
    prompt = _head(config, problem, rng) + " Solution:"
    steps, defines = solution_steps(problem, symbols_for(problem, rng))
    sentences: list[str] = []
    masked: list[tuple[int, int]] = []
    retries: list[list[int]] = []
    offset = len(prompt) + 1
    defined: set[int] = set()
    for position, (p, step, symbol) in enumerate(zip(problem.order, steps, defines)):
        if retry and config.retry_rate and rng.random() < config.retry_rate:
            wrong = _wrong_param(config, problem, position, defined, rng)
            if wrong is not None:
                attempt = f"Define {graph.name(wrong)} as {symbol}"
                if config.retry_mask:
                    masked.append((offset, offset + len(attempt)))
                retries.append([len(sentences), wrong])
                sentences.append(f"{attempt} {BACK}")
                offset += len(sentences[-1]) + 2
        sentences.append(step)
        offset += len(step) + 2
        defined.add(p)
    text = f"{prompt} {'. '.join(sentences)}. Answer: {problem.answer}."
    meta = {"op": problem.op, "answer": problem.answer, "template": template,
            "problem": graph.to_dict(), "steps": problem.order, "retries": retries}
    return Record(text, meta, tuple(masked))


def _seeds(config: IgsmConfig, stream: str, start: int, stop: int) -> list[int]:
    return hash_u64(derive_key(config.seed, "igsm", stream), np.arange(start, stop)).tolist()


def records(config: IgsmConfig, start: int, stop: int) -> Iterator[Record]:
    """Training documents at stream positions [start, stop): train templates only."""
    for seed in _seeds(config, "train", start, stop):
        rng = random.Random(seed)
        problem, template = _draw(config, rng, None, "train")
        record = document(config, problem, template, rng, retry=True)
        record.meta["split"] = "train"
        yield record


def eval_sets(config: IgsmConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    sets: dict[str, Callable[[], Iterator[dict]]] = {
        "igsm_test": lambda: _rows(config, "test", "test", None),
        "igsm_train_templates": lambda: _rows(config, "train_templates", "train", None),
    }
    for op in config.ood_targets:
        sets[f"igsm_op{op}"] = lambda op=op: _rows(config, f"op{op}", None, op)
    return sets


def _rows(config: IgsmConfig, stream: str, split: str | None, op: int | None
          ) -> Iterator[dict]:
    """Evaluation rows: prompt (ends with "Solution:"), answer, op, the reference solution and
    the problem graph for the checker."""
    for chunk in range(0, config.eval_problems, _EVAL_CHUNK):
        stop = min(chunk + _EVAL_CHUNK, config.eval_problems)
        for index, seed in zip(range(chunk, stop), _seeds(config, stream, chunk, stop)):
            rng = random.Random(seed)
            problem, template = _draw(config, rng, op, split)
            record = document(config, problem, template, rng, retry=False)
            prompt, solution = record.text.split(" Solution: ", 1)
            yield {"id": index, "prompt": prompt + " Solution:", "answer": problem.answer,
                   "op": problem.op, "solution": solution, "template": template,
                   "split": split or "ood", "problem": record.meta["problem"]}
