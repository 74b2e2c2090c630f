"""The brevo family: DAGs, ancestor sets, answer orders, loss masks and test sets checked against
plain Python truth (a depth-first search, a topological check, the official process re-run in
plain Python) on small cases."""

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.brevo import dag
from corpus_gen.brevo import family as brevo
from corpus_gen.core import word_tasks
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import read_shard
from corpus_gen.core.words import is_word_end
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    eval_rows,
    family_config,
    readable_words,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent


def _config(*overrides: str):
    return family_config("brevo", *overrides)





def _parse(text: str) -> tuple[list[tuple[str, str]], str, list[str]]:
    """The edges (parent, child) in context order, the query and the answer's words."""
    names = text.split(" ")
    assert names[0] == "<bos>"
    ask, arrow = names.index("?"), names.index("=>")
    context = readable_words(names[1:ask])
    [query] = readable_words(names[ask + 1:arrow])
    return list(zip(context[::2], context[1::2])), query, readable_words(names[arrow + 1:])


def _parents(edges: list[tuple[str, str]]) -> dict[str, list[str]]:
    parents: dict[str, list[str]] = {}
    for parent, child in edges:
        parents.setdefault(child, []).append(parent)
        parents.setdefault(parent, [])
    return parents


def _ancestors(parents: dict[str, list[str]], query: str) -> set[str]:
    """The query and every node above it: a plain depth-first search."""
    seen, stack = set(), [query]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(parents[node])
    return seen


def _depth(parents: dict[str, list[str]], node: str) -> int:
    return max((_depth(parents, p) + 1 for p in parents[node]), default=0)


def _check_graph(edges: list[tuple[str, str]], n: int) -> dict[str, list[str]]:
    parents = _parents(edges)
    assert len(parents) <= n and len(set(edges)) == len(edges)
    children = Counter(p for p, _ in edges)
    assert max(map(len, parents.values())) <= 4 and max(children.values()) <= 4
    # a root no node took as a parent is in no edge: the context does not name it
    roots = [node for node, ps in parents.items() if not ps] + [None] * (n - len(parents))
    assert 1 <= len(roots) <= (n - 1) // 4 + 1
    for node in parents:  # acyclic: the depth recursion ends
        _depth(parents, node)
    return parents


def _check_answer(parents: dict[str, list[str]], query: str, answer: list[str]) -> None:
    assert len(set(answer)) == len(answer) and set(answer) == _ancestors(parents, query)
    assert answer[-1] == query and parents[query]  # a node with a parent
    placed: set[str] = set()
    for node in answer:  # topological: every parent before its child
        assert set(parents[node]) <= placed
        placed.add(node)


def test_the_vocabulary_names_each_token_once_in_a_fixed_order():
    config = _config("max_n=4", "mini_vocab=2", "max_len=2")
    assert get_family("brevo").vocabulary(config) == (
        "<eos>", "<bos>", "?", "=>", "w1", "w2", "w1.", "w2.")


@pytest.mark.parametrize("words", [["mini_vocab=12", "max_len=1"],
                                   ["mini_vocab=3", "min_len=2", "max_len=4"]])
def test_each_answer_is_the_ancestor_set_in_a_topological_order(words):
    config = _config("max_n=12", *words, "eval_samples=2")
    for record in training_records(config, 0, 1500):
        edges, query, answer = _parse(record.text)
        parents = _check_graph(edges, record.meta["n"])
        _check_answer(parents, query, answer)
        assert record.meta["depth"] == _depth(parents, query)
        # the order is by depth (ties in random order)
        depths = [_depth(parents, node) for node in answer]
        assert depths == sorted(depths)


def test_graphs_follow_the_official_process():
    # the official process re-run in plain Python, against the vectorised one: n = 20
    def official(rng: random.Random) -> tuple[int, int, tuple[int, ...]]:
        out, parents_of = [0] * 20, []
        roots = rng.randint(1, 19 // 4 + 1)
        for node in range(20):
            free = [p for p in range(node) if out[p] < 4]
            if node < roots or not free:
                parents_of.append([])
                continue
            chosen = rng.sample(free, rng.randint(1, min(4, len(free))))
            for p in chosen:
                out[p] += 1
            parents_of.append(chosen)
        return roots, sum(map(len, parents_of)), tuple(len(p) for p in parents_of)

    rng = random.Random(0)
    reference = [official(rng) for _ in range(6000)]
    keys = word_tasks.doc_keys(5, np.arange(6000), np.zeros(6000, dtype=np.int64))
    drawn = dag.draw(keys, np.full(6000, 20))
    takes = (drawn.parents >= 0).sum(2)
    ours = [(int((t == 0).sum()), int(t.sum()), tuple(t.tolist())) for t in takes]
    for stat in (0, 1):  # roots, edges: means within 2%
        mean = np.mean([r[stat] for r in reference])
        assert abs(np.mean([o[stat] for o in ours]) / mean - 1) < 0.02
    for node in (5, 10, 19):  # parents per node: the same distribution within 0.025
        want = Counter(r[2][node] for r in reference)
        got = Counter(o[2][node] for o in ours)
        assert all(abs(got[c] - want[c]) / 6000 < 0.025 for c in range(5))
    # each node's parents are earlier nodes, distinct, at most 4; out-degree at most 4
    parents = drawn.parents
    assert (parents < np.arange(20)[None, :, None]).all()
    out = np.zeros((6000, 20), dtype=int)
    for graph, node, slot in zip(*np.nonzero(parents >= 0)):
        out[graph, parents[graph, node, slot]] += 1
    assert out.max() == 4
    depth = np.zeros((6000, 20), dtype=int)
    for node in range(20):
        above = np.where(parents[:, node] >= 0,
                         depth[np.arange(6000)[:, None], np.maximum(parents[:, node], 0)] + 1, 0)
        depth[:, node] = above.max(1)
    assert (depth == drawn.depth).all()


def test_the_query_is_uniform_among_the_nodes_with_a_parent_or_the_last_quarter():
    keys = word_tasks.doc_keys(9, np.arange(8000), np.zeros(8000, dtype=np.int64))
    drawn = dag.draw(keys, np.full(8000, 12))
    anywhere = drawn.queries(keys, last=False)
    last = drawn.queries(keys, last=True)
    has_parent = drawn.parents[:, :, 0] >= 0
    rows = np.arange(8000)
    assert has_parent[rows, anywhere].all() and has_parent[rows, last].all()
    assert (last >= 9).all() and set(last.tolist()) == {9, 10, 11}
    counts = Counter(anywhere.tolist())
    # r roots, r uniform in 1..3: nodes 3..11 always have parents, each asked 1 / (12 - r)
    expected = np.mean([1 / 11, 1 / 10, 1 / 9])
    assert all(abs(counts[node] / 8000 - expected) < 0.01 for node in range(3, 12))
    assert set(counts) <= set(range(1, 12))


def test_sizes_follow_the_official_distribution():
    config = _config("max_n=10", "mini_vocab=10", "eval_samples=1")
    records = training_records(config, 0, 20000)
    sizes = Counter(r.meta["n"] for r in records)
    weights = {n: 1 / (n + np.sqrt(10)) for n in range(3, 11)}
    total = sum(weights.values())
    assert set(sizes) == set(weights)
    assert all(abs(sizes[n] / 20000 - w / total) < 0.01 for n, w in weights.items())


def test_the_loss_counts_only_the_answer_marker_and_the_answer(tmp_path):
    config = _config("max_n=9", "mini_vocab=3", "min_len=1", "max_len=3", "samples=200",
                     "records_per_shard=64", "eval_samples=3")
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    names = json.loads((tmp_path / "c" / "vocab.json").read_text())
    samples = [s for shard in manifest["shards"] for s in read_shard(tmp_path / "c" /
                                                                       shard["name"])]
    assert len(samples) == 200 and manifest["tokenizer"]["eos_id"] == 0
    for sample in samples:
        words = [names[str(i)] for i in sample["ids"].tolist()]
        assert " ".join(words) == sample["json"]["text"]
        arrow = words.index("=>")
        assert sample["mask"].tolist() == [0] * arrow + [1] * (len(words) - arrow)
        assert is_word_end(words[-1])


def test_test_rows_follow_the_contract():
    config = _config("max_n=11", "mini_vocab=3", "min_len=2", "max_len=3", "eval_samples=30")
    rows = eval_rows(config)
    names = get_family("brevo").vocabulary(config)
    assert [r["id"] for r in rows] == list(range(30))
    for row in rows:
        assert set(row) == {"id", "prompt", "answer", "text", "n", "query", "depth", "edges"}
        prompt = [names[i] for i in row["prompt"]]
        answer = [names[i] for i in row["answer"]]
        assert " ".join(prompt + answer) == row["text"] and row["n"] == 11
        assert prompt[0] == "<bos>" and prompt[-1] == "=>" and "<eos>" not in answer
        edges, query, words = _parse(row["text"])
        assert [list(e) for e in edges] == row["edges"] and query == row["query"]
        parents = _check_graph(edges, 11)
        _check_answer(parents, query, words)
        assert row["depth"] == _depth(parents, query)
    assert len({r["depth"] for r in rows}) > 2


def test_no_test_instance_is_trained_on():
    # 4 one-letter words of 4: few graphs of 4 nodes, n = 4 in half the training documents
    config = _config("max_n=4", "mini_vocab=4", "max_len=1", "eval_samples=40")

    def instance(text: str) -> tuple:
        edges, query, _ = _parse(text)
        return frozenset(edges), query

    held_out = {instance(r["text"]) for r in eval_rows(config)}
    trained = Counter(instance(r.text) for r in training_records(config, 0, 3000))
    assert len(held_out) > 20 and not held_out & set(trained)
    # an instance is the edges with the query: a held-out graph asked another query is trained on
    graphs = {edges for edges, _ in held_out}
    assert sum(c for (edges, _), c in trained.items() if edges in graphs) > 50
    assert sum(c for (edges, _), c in trained.items() if len(edges) >= 3) > 1000
    # without the redraws, some of these documents would have been test instances
    index = np.arange(3000)
    keys = word_tasks.doc_keys(brevo.derive_key(0, "brevo", "train"), index, np.zeros_like(index))
    n = brevo._sizes(config, keys)
    first = brevo.graphs(config, keys[n == 4], n[n == 4]).hashes()
    assert np.isin(first, brevo._test_hashes(config)).sum() > 40
    # and the redrawn documents are the same whatever the range drawn
    texts = [r.text for r in training_records(config, 0, 300)]
    assert [r.text for r in training_records(config, 101, 117)] == texts[101:117]


def test_the_last_query_option_asks_among_the_last_quarter():
    config = _config("max_n=12", "mini_vocab=12", "query=last", "eval_samples=1")
    keys = word_tasks.doc_keys(3, np.arange(500), np.zeros(500, dtype=np.int64))
    n = brevo._sizes(config, keys)
    drawn = brevo.graphs(config, keys, n)
    assert (drawn.query >= 3 * n // 4).all()
    assert (drawn.dags.parents[np.arange(500), drawn.query, 0] >= 0).all()


def test_documents_are_the_same_whatever_the_range_drawn():
    config = _config("max_n=30", "mini_vocab=3", "min_len=2", "max_len=4", "eval_samples=2")
    whole = [r.text for r in training_records(config, 0, 4500)]
    assert [r.text for r in training_records(config, 4093, 4100)] == whole[4093:4100]
    assert [r.text for r in training_records(config, 3, 4)] == whole[3:4]
    other = [r.text for r in training_records(_config("max_n=30", "mini_vocab=3", "min_len=2",
                                              "max_len=4", "eval_samples=2", "seed=1"), 0, 50)]
    assert other != whole[:50]


def test_shards_hold_the_same_documents_whatever_the_shard_size_or_workers(tmp_path):
    assert_independent_of_workers_and_shard_size(
        "brevo", ["max_n=20", "mini_vocab=4", "min_len=1", "max_len=2", "eval_samples=3"],
        tmp_path)


@pytest.mark.parametrize("override, key", [
    ("max_n=2", "max_n"),
    ("max_n=100001", "max_n"),
    ("mini_vocab=1", "mini_vocab"),
    ("min_len=0", "min_len"),
    ("max_len=0", "max_len"),
    ("mini_vocab=8", "max_n"),  # 8 one-letter words < N = 9
    ("query=first", "query"),
    ("samples=0", "samples"),
    ("eval_samples=-1", "eval_samples"),
])
def test_bad_values_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config("max_n=9", "mini_vocab=9", "max_len=1", override)
    assert err.value.key == key


@pytest.mark.parametrize("max_n", [3, 100_000])
def test_max_n_at_its_bounds_is_accepted(max_n):
    assert _config(f"max_n={max_n}", "mini_vocab=400", "max_len=2").max_n == max_n


def test_gen_refuses_a_bad_value_with_exit_2(tmp_path, capsys):
    code = main(["gen", str(ROOT / "configs/corpus/brevo2.yaml"), "max_n=2",
                 "--out", str(tmp_path / "c"), "--no-progress"])
    assert code == 2 and "max_n=2" in capsys.readouterr().err


@pytest.mark.parametrize("name, overrides, n, tokens", [
    ("brevo2", [], 50, 4 + 8),
    ("brevo1", ["max_n=70"], 70, 4 + 140),  # mini_vocab follows max_n
])
def test_gen_writes_a_small_corpus_from_the_shipped_config(tmp_path, name, overrides, n,
                                                          tokens):
    out = tmp_path / name
    assert main(["gen", str(ROOT / f"configs/corpus/{name}.yaml"), *overrides, "samples=300",
                 "eval_samples=4", "--out", str(out), "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(s["records"] for s in manifest["shards"]) == 300
    assert manifest["tokenizer"]["vocab_size"] == tokens
    rows = [json.loads(line) for line in (out / "eval/brevo_test.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["n"] for r in rows} == {n}


def test_the_smallest_graphs_are_drawn():
    # N = 3: every graph has 3 nodes, one root, node 1 under it, node 2 under one or both
    config = _config("max_n=3", "mini_vocab=3", "max_len=1", "eval_samples=0")
    shapes = Counter()
    for record in training_records(config, 0, 300):
        edges, query, answer = _parse(record.text)
        parents = _check_graph(edges, 3)
        _check_answer(parents, query, answer)
        shapes[len(edges)] += 1
    assert set(shapes) == {2, 3}
