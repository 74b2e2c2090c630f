"""iGSM generation: solvable problems, exact op targets, determinism, the template split,
byte-identical corpora across workers, and bad configs."""

import dataclasses
import random
import re

import pytest

from corpus_gen.core import registry
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family, schemas
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer
from corpus_gen.igsm.checker import check_solution
from corpus_gen.igsm.family import is_test_template
from corpus_gen.igsm.graph import Graph
from corpus_gen.igsm.problem import (
    draw_problem,
    solution_steps,
    symbols_for,
    template_hash,
)

FAMILY = get_family("igsm")
_OPS = re.compile(r" = [A-Za-z]+ [-+*] [A-Za-z]+ = ")  # a clause's symbolic binary operation
_CONST_OPS = re.compile(r" = \d+ [-+*] [A-Za-z]+ = ")


@pytest.fixture
def igsm_config(tmp_path):
    def make(**overrides):
        path = tmp_path / "igsm.yaml"
        path.write_text("family: igsm\n")
        items = {"problems": 200, "eval_problems": 20, "tokenizer.vocab_size": 1000,
                 "tokenizer.sample_records": 200}
        items.update(overrides)
        return load_config(path, [f"{k}={v}" for k, v in items.items()], schemas())

    return make


def _ops_in(solution: str) -> int:
    """The official op count of a solution: per step its binary operations, but at least 1."""
    return sum(max(1, len(_OPS.findall(step)) + len(_CONST_OPS.findall(step)))
               for step in solution.split(". Define "))


@pytest.mark.parametrize("difficulty", ["med", "hard"])
def test_every_problem_is_solvable_and_its_solution_checks(igsm_config, difficulty):
    config = igsm_config(difficulty=difficulty)
    max_op, max_edge = config.ops_max, config.edges
    for record in FAMILY.records(config, 0, 1500):
        meta = record.meta
        result = check_solution(meta["problem"], record.text)
        assert result.correct, (result, record.text)
        assert result.unnecessary == 0 and result.steps == len(meta["steps"])
        assert 1 <= meta["op"] <= max_op
        assert len(meta["problem"]["inst"]) <= max_edge
        graph = Graph.from_dict(meta["problem"])
        assert graph.values()[graph.question] == meta["answer"] == result.answer
        assert meta["steps"][-1] == graph.question
        assert sorted(meta["steps"]) == sorted(graph.ancestors(graph.question))  # only necessary
        solution = record.text.split(" Solution: ")[1]
        # one binary operation per clause; a step without one (constant, copy) counts 1
        assert _ops_in(solution) == meta["op"]
        assert record.text.endswith(f"Answer: {meta['answer']}.")
        assert record.text == " ".join(record.text.split())


@pytest.mark.parametrize("max_edge,ops", [(20, (20, 21, 22, 23)), (28, (28, 30, 32))])
def test_exact_op_targets_are_met(max_edge, ops):
    for op in ops:
        for n in range(15):
            problem = draw_problem(random.Random(f"{op}-{n}"), max_edge, op)
            assert problem.op == op and problem.graph.n_inst <= max_edge
            assert sum(problem.graph.cost[p] for p in problem.order) == op
            steps, _ = solution_steps(problem, symbols_for(problem, random.Random(n)))
            assert check_solution(problem.graph, ". ".join(steps) + ".").correct


def test_training_op_target_and_ood_sets(igsm_config):
    config = igsm_config(op=7, ood_ops="[16,18]", eval_problems=10)
    assert {r.meta["op"] for r in FAMILY.records(config, 0, 100)} == {7}
    sets = FAMILY.eval_sets(config)
    assert set(sets) == {"igsm_test", "igsm_train_templates", "igsm_op16", "igsm_op18"}
    for op in (16, 18):
        rows = list(sets[f"igsm_op{op}"]())
        assert len(rows) == 10 and {r["op"] for r in rows} == {op}
        for row in rows:
            assert row["prompt"].endswith("Solution:")
            assert check_solution(row["problem"], row["solution"]).correct
            assert row["solution"].endswith(f"Answer: {row['answer']}.")


def test_formats_put_the_question_where_asked(igsm_config):
    for fmt, reask in (("pq", False), ("qp", False), ("qp", True)):
        record = next(FAMILY.records(igsm_config(format=fmt, reask=reask), 0, 1))
        head = record.text.split(" Solution:")[0]
        question = re.search(r"How many [^?]+\?", head).group(0)
        assert head.startswith(question) == (fmt == "qp")
        assert head.endswith(question) == (fmt == "pq" or reask)
        assert head.count(question) == 1 + reask


def test_same_seed_same_text_and_slices_match_the_stream(igsm_config):
    config = igsm_config(retry_rate=0.3)
    whole = [(r.text, r.meta) for r in FAMILY.records(config, 0, 60)]
    assert whole == [(r.text, r.meta) for r in FAMILY.records(config, 0, 60)]
    assert [(r.text, r.meta) for r in FAMILY.records(config, 25, 40)] == whole[25:40]
    other = [r.text for r in FAMILY.records(igsm_config(seed=1), 0, 60)]
    assert other != [t for t, _ in whole]


def test_split_never_leaks_a_test_template(igsm_config):
    config = igsm_config(test_fraction=0.3, eval_problems=200)
    train = {r.meta["template"] for r in FAMILY.records(config, 0, 1500)}
    test_rows = list(FAMILY.eval_sets(config)["igsm_test"]())
    test = {r["template"] for r in test_rows}
    assert len(test_rows) == 200 and test and not train & test
    assert all(is_test_template(t, 0.3) for t in test)
    assert not any(is_test_template(t, 0.3) for t in train)
    seen = {r["template"] for r in FAMILY.eval_sets(config)["igsm_train_templates"]()}
    assert not any(is_test_template(t, 0.3) for t in seen)


def _files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".") and ".progress" not in p.parts
            and p.name != "datasheet.md"}


def test_corpus_is_byte_identical_for_one_and_two_workers(igsm_config, tmp_path):
    config = igsm_config(problems=300, records_per_shard=100, eval_problems=10,
                         retry_rate=0.3, retry_mask=True, ood_ops="[17]")
    one, two = tmp_path / "one", tmp_path / "two"
    manifest = generate_corpus(config, one, workers=1, progress=False, log=lambda *a: None)
    generate_corpus(config, two, workers=2, progress=False, log=lambda *a: None)
    files = _files(one)
    assert len([f for f in files if f.startswith("train/")]) == 3
    assert files == _files(two)
    assert manifest["tokenizer"]["user_symbols"] == ["[BACK]"]
    tokenizer = Tokenizer.load(one / "tokenizer.model")
    back = tokenizer.processor.piece_to_id("[BACK]")
    assert back in tokenizer.encode("x [BACK].")  # one reserved token
    masked = 0
    for sample in read_shard(one / manifest["shards"][0]["name"]):
        ids, mask = sample["ids"], sample["mask"]
        assert tokenizer.decode(ids) == sample["json"]["text"]
        dropped = tokenizer.decode(ids[mask == 0])
        masked += dropped.count("Define")
        assert "[BACK]" not in dropped and "Answer" not in dropped
    assert masked == sum(len(s["json"]["retries"])
                         for s in read_shard(one / manifest["shards"][0]["name"])) > 0


@pytest.mark.parametrize("workers,sample", [(1, 200), (1, 300), (2, 200)])
def test_one_worker_draws_each_tokenizer_sample_document_once(igsm_config, tmp_path, monkeypatch,
                                                             workers, sample):
    """With one worker the shards take the documents the tokenizer sample drew (taken in 64
    runs, so 300 of 300 cover 286 problems); worker processes draw them again."""
    positions = []

    def counted(config, start, stop):
        positions.extend(range(start, stop))
        return FAMILY.records(config, start, stop)

    monkeypatch.setitem(registry._FAMILIES, "igsm", dataclasses.replace(FAMILY, records=counted))
    config = igsm_config(problems=300, records_per_shard=100,
                         **{"tokenizer.sample_records": sample})
    manifest = generate_corpus(config, tmp_path / "c", workers=workers, progress=False,
                               log=lambda *a: None)
    assert manifest["records"] == 300
    sampled, by_shards = set(positions[:sample]), positions[sample:]
    if workers == 1:
        assert sorted(by_shards) == sorted(set(range(300)) - sampled)
        assert len(sampled) == {200: 200, 300: 286}[sample]
    else:  # the spawned workers' draws are not seen here
        assert by_shards == []


@pytest.mark.parametrize("key,value", [
    ("op", 0), ("op", -3), ("op", 41), ("max_op", 50), ("max_edge", 1), ("hierarchy", "Farm"),
    ("difficulty", "easy"), ("format", "pqp"), ("retry_rate", 1.5), ("retry_kind", "maybe"),
    ("test_fraction", 0), ("problems", 0), ("ood_ops", "[0]"), ("ood_ops", "[99]"),
])
def test_bad_configs_name_the_key(igsm_config, key, value):
    with pytest.raises(ConfigError) as err:
        igsm_config(**{key: value})
    assert err.value.key == key


def test_op_limit_follows_max_edge(igsm_config):
    assert igsm_config(max_edge=3, op=6).op == 6
    for key, value in (("op", 7), ("max_op", 7)):
        with pytest.raises(ConfigError) as err:
            igsm_config(max_edge=3, **{key: value})
        assert err.value.key == key and "at most 6 operations" in str(err.value)


@pytest.mark.parametrize("max_edge", [2, 3, 4, 6])
def test_every_op_up_to_the_limit_is_reachable(max_edge):
    for op in range(1, 2 * max_edge + 1):
        problem = draw_problem(random.Random(f"{max_edge}-{op}"), max_edge, op)
        assert problem.op == op == sum(problem.graph.cost[p] for p in problem.order)


def test_op_counts_every_step_at_least_once():
    """The official count: a constant or a copy is a step of one operation."""
    problem = draw_problem(random.Random(0), 20, 1)
    assert len(problem.order) == 1 and not problem.graph.deps[problem.order[0]]
    for n in range(200):
        problem = draw_problem(random.Random(n), 20, random.Random(n).randint(1, 23))
        assert all(problem.graph.cost[p] >= 1 for p in problem.order)
        assert len(problem.order) <= problem.op


def test_reask_needs_question_first(igsm_config):
    with pytest.raises(ConfigError, match="reask"):
        igsm_config(reask=True)
    assert igsm_config(reask=True, format="qp").reask


def test_hierarchy_is_respected(igsm_config):
    for record in FAMILY.records(igsm_config(hierarchy="Zoo"), 0, 50):
        assert set(record.meta["problem"]["levels"]) <= {"Zoo", "Enclosure", "Animal", "Bone"}


def test_the_training_law_reaches_max_op(igsm_config):
    config = igsm_config(problems=300, max_op=4)
    assert {r.meta["op"] for r in get_family("igsm").records(config, 0, 300)} == {1, 2, 3, 4}


def test_an_ood_target_equal_to_the_op_limit_is_kept(igsm_config):
    assert igsm_config(max_edge=11).ood_targets == (20, 21, 22)
    assert igsm_config(max_edge=10).ood_targets == (20,)


def test_max_op_may_equal_twice_max_edge(igsm_config):
    assert igsm_config(max_edge=3, max_op=6).ops_max == 6


def test_the_template_hash_ignores_the_constants():
    problem = draw_problem(random.Random(3), 20, 8)
    before = template_hash(problem)
    problem.graph.exprs = [e._replace(n=e.n % 22 + 1) for e in problem.graph.exprs]
    assert template_hash(problem) == before
