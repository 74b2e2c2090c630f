"""The mano family: prefix expressions over Z_p whose values, shapes, synonyms, loss masks and
test sets are checked against plain Python truth on small cases."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.seeding import randint
from corpus_gen.core.shards import read_shard
from corpus_gen.mano import expressions
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    eval_rows,
    family_config,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent
WORDS = {"+": "+", "plus": "+", "-": "-", "minus": "-", "*": "*", "times": "*", "/": "/",
         "over": "/"}


def _config(*overrides: str):
    return family_config("mano", *overrides)




def _parse(words: list[str], modulus: int) -> tuple[object, list[str]]:
    """A prefix expression tree (nested tuples, synonyms collapsed) and the words after it."""
    head, rest = words[0], words[1:]
    if head not in WORDS:
        assert 0 <= int(head) < modulus
        return int(head), rest
    left, rest = _parse(rest, modulus)
    right, rest = _parse(rest, modulus)
    return (WORDS[head], left, right), rest


def _value(tree: object, modulus: int) -> int:
    """The tree's value mod p; ZeroDivisionError on division by 0 anywhere."""
    if isinstance(tree, int):
        return tree
    op, left, right = tree
    a, b = _value(left, modulus), _value(right, modulus)
    if op == "/":
        if b == 0:
            raise ZeroDivisionError
        return a * pow(b, -1, modulus) % modulus
    return {"+": a + b, "-": a - b, "*": a * b}[op] % modulus


def _operators(tree: object) -> int:
    return 0 if isinstance(tree, int) else 1 + _operators(tree[1]) + _operators(tree[2])


def _prefix(tree: object) -> str:
    if isinstance(tree, int):
        return str(tree)
    return " ".join([tree[0], _prefix(tree[1]), _prefix(tree[2])])


def _document(text: str, modulus: int) -> tuple[int, object, int]:
    """(l from the length token, the expression tree, the answer) of a document's text."""
    words = text.split(" ")
    assert words[0] == "<bos>" and words[1].startswith("len")
    tree, rest = _parse(words[2:], modulus)
    assert rest[0] == "=" and len(rest) == 2
    return int(words[1][3:]), tree, int(rest[1])


def test_the_vocabulary_names_each_token_once_in_a_fixed_order():
    config = _config("max_ops=3", "ops='*/+'", "modulus=5", "eval_samples=10")
    assert get_family("mano").vocabulary(config) == (
        "<eos>", "<bos>", "len1", "len2", "len3", "+", "plus", "*", "times", "/", "over",
        "0", "1", "2", "3", "4", "=")


def _shapes(ops: int) -> dict[str, float]:
    """Every expression shape of `ops` operators ("o" an operator, "." a leaf, prefix order)
    with its probability under the official recursion: l1 ~ U{0..ops-1} at every operator."""
    if ops == 0:
        return {".": 1.0}
    return {"o" + a + b: p * q / ops for l1 in range(ops)
            for a, p in _shapes(l1).items() for b, q in _shapes(ops - 1 - l1).items()}


def _chi_square_p(counts: Counter, expected: dict[str, float]) -> float:
    assert set(counts) <= set(expected)
    total = sum(counts.values())
    statistic = sum((counts[k] - total * p) ** 2 / (total * p) for k, p in expected.items())
    return float(chi2.sf(statistic, len(expected) - 1))


@pytest.mark.parametrize("ops", [3, 5])
def test_shapes_follow_the_official_recursion_exactly(ops):
    # 5 operators: all 42 shapes, each with its recursion probability (1/120 .. 1/20)
    n = 60000
    drawn = expressions.draw(7, np.arange(n), np.full(n, ops), "+-*", 23, 6)
    shapes = Counter("".join("o" if c >= 23 else "." for c in row if c >= 0)
                     for row in drawn.codes.tolist())
    assert len(shapes) == len(_shapes(ops))
    assert _chi_square_p(shapes, _shapes(ops)) > 1e-4


def test_operators_synonyms_and_leaves_are_uniform_at_every_position():
    # without "/" nothing is drawn again (with it, fewer "/" survive: no division by 0)
    n, uniform_pairs = 40000, {(5 + k, s): 1 / 6 for k in range(3) for s in (0, 1)}
    drawn = expressions.draw(11, np.arange(n), np.full(n, 4), "+-*", 5, 4)
    codes, operator = drawn.codes, drawn.codes >= 5
    assert operator[:, 0].all() and operator.sum(1).tolist() == [4] * n
    root = Counter(zip(codes[:, 0].tolist(), drawn.synonym[:, 0].tolist()))
    later = operator & (np.arange(9) > 0)
    inner = Counter(zip(codes[later].tolist(), drawn.synonym[later].tolist()))
    assert _chi_square_p(root, uniform_pairs) > 1e-4
    assert _chi_square_p(inner, uniform_pairs) > 1e-4
    for leaves in (codes[:, -1], codes[(codes < 5) & (np.arange(9) < 8)]):  # last, others
        assert _chi_square_p(Counter(leaves.tolist()), {v: 1 / 5 for v in range(5)}) > 1e-4


@pytest.mark.parametrize("ops, modulus", [("+-*", 7), ("+-*/", 7), ("+-*/", 131), ("+-", 103)])
def test_training_values_match_a_plain_recursive_evaluator(ops, modulus):
    # p = 7: one table lookup per operator; p = 131: the table would be too big, arithmetic;
    # p = 103: 103 * fl(1/103) < 1, so a sum of exactly p must still reduce to 0
    config = _config("max_ops=6", f"ops={ops}", f"modulus={modulus}", "eval_samples=5")
    records = training_records(config, 0, 3000)
    for record in records:
        ops_token, tree, answer = _document(record.text, modulus)
        assert answer == _value(tree, modulus) == record.meta["value"]
        assert ops_token == _operators(tree) == record.meta["ops"]


def test_the_number_of_operators_is_uniform_and_the_left_operand_split_as_the_official():
    records = training_records(_config("max_ops=4", "eval_samples=10"), 0, 20000)
    trees = [_document(r.text, 23)[1] for r in records]
    counts = Counter(_operators(t) for t in trees)
    assert sorted(counts) == [1, 2, 3, 4]
    assert all(abs(c / len(trees) - 1 / 4) < 0.015 for c in counts.values())
    # at the root of a 4-operator expression, the left operand has l1 ~ U{0..3} operators
    left = Counter(_operators(t[1]) for t in trees if _operators(t) == 4)
    assert sorted(left) == [0, 1, 2, 3]
    assert all(abs(c / counts[4] - 1 / 4) < 0.03 for c in left.values())
    # every operator, and every leaf value, about equally often
    words = Counter(w for r in records for w in r.text.split(" ")[2:-2])
    leaves = [words[str(v)] for v in range(23)]
    assert max(leaves) / min(leaves) < 1.15
    per_op = [words[a] + words[b] for a, b in (("+", "plus"), ("-", "minus"), ("*", "times"))]
    assert max(per_op) / min(per_op) < 1.08


@pytest.mark.parametrize("max_ops", [1, 10, 64])
def test_the_compiled_operator_counts_are_the_seeded_draw(max_ops):
    # l ~ U{1..L} per document: the kernel's hash must be seeding.randint's, bit for bit
    index = np.arange(10_000) * 7919 + 3
    assert (expressions.operator_counts(2 ** 63 + 12345, index, max_ops)
            == randint(2 ** 63 + 12345, index, max_ops) + 1).all()


def test_both_synonyms_of_each_operator_are_used_about_equally():
    records = training_records(_config("max_ops=5", "ops=+-*/", "eval_samples=10"), 0, 4000)
    words = Counter(w for r in records for w in r.text.split(" "))
    for symbol, name in (("+", "plus"), ("-", "minus"), ("*", "times"), ("/", "over")):
        assert abs(words[symbol] / (words[symbol] + words[name]) - 0.5) < 0.03


def test_no_expression_divides_by_zero_anywhere():
    # p = 3 and division only: a third of the divisors would be 0 without the redraws
    config = _config("max_ops=5", "ops=/", "modulus=3", "eval_samples=2")
    for record in training_records(config, 0, 3000):
        _, tree, answer = _document(record.text, 3)
        assert _value(tree, 3) == answer  # raises ZeroDivisionError on a division by 0
    for row in eval_rows(config):
        assert _value(_parse(row["expression"].split(" "), 3)[0], 3) == row["value"]


def test_the_loss_counts_only_the_answer_marker_and_the_answer(tmp_path):
    config = _config("max_ops=4", "samples=300", "records_per_shard=128", "eval_samples=20")
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    names = json.loads((tmp_path / "c" / "vocab.json").read_text())
    samples = [s for shard in manifest["shards"] for s in read_shard(tmp_path / "c" /
                                                                       shard["name"])]
    assert len(samples) == 300 and manifest["tokenizer"]["eos_id"] == 0
    for sample in samples:
        words = [names[str(i)] for i in sample["ids"].tolist()]
        assert " ".join(words) == sample["json"]["text"]
        assert len(words) == 2 * sample["json"]["ops"] + 5
        assert sample["mask"].tolist() == [0] * (len(words) - 2) + [1, 1]
        assert words[-2] == "=" and int(words[-1]) == sample["json"]["value"]


def test_test_rows_follow_the_contract():
    config = _config("max_ops=3", "ops=+-*/", "eval_samples=40")
    rows = eval_rows(config)
    names = get_family("mano").vocabulary(config)
    assert [r["id"] for r in rows] == list(range(120))
    assert Counter(r["ops"] for r in rows) == {1: 40, 2: 40, 3: 40}
    assert [r["ops"] for r in rows] == sorted(r["ops"] for r in rows)
    for row in rows:
        assert set(row) == {"id", "prompt", "answer", "text", "ops", "expression", "value"}
        words = [names[i] for i in row["prompt"] + row["answer"]]
        assert " ".join(words) == row["text"]
        assert words[0] == "<bos>" and words[1] == f"len{row['ops']}" and words[-2] == "="
        assert row["answer"] == [names.index(str(row["value"]))]
        # readable prefix notation: parses back to itself, the prompt's tree and the value
        tree, rest = _parse(row["expression"].split(" "), 23)
        assert rest == [] and _prefix(tree) == row["expression"]
        assert set(row["expression"].split(" ")) <= set(map(str, range(23))) | set("+-*/")
        assert tree == _parse(words[2:-2], 23)[0]
        assert _operators(tree) == row["ops"] and _value(tree, 23) == row["value"]


@pytest.mark.parametrize("max_ops, eval_samples", [(1, 12), (2, 12)])
def test_no_test_expression_is_trained_on(max_ops, eval_samples):
    # p = 5 and "+" only: 25 one-operator expressions, up to 12 of them test instances
    config = _config(f"max_ops={max_ops}", "ops=+", "modulus=5",
                     f"eval_samples={eval_samples}")
    held_out = {_parse(r["expression"].split(" "), 5)[0] for r in eval_rows(config)}
    trained = Counter(_document(r.text, 5)[1] for r in training_records(config, 0, 4000))
    assert len(held_out) >= 8 and not held_out & set(trained)
    if max_ops == 1:  # everything else is drawn
        assert len(trained) == 25 - len(held_out)


def test_documents_are_the_same_whatever_the_range_drawn():
    config = _config("max_ops=5", "ops=+-*/", "modulus=5", "eval_samples=10")
    whole = [r.text for r in training_records(config, 0, 9000)]
    assert [r.text for r in training_records(config, 8190, 8200)] == whole[8190:8200]
    assert [r.text for r in training_records(config, 3, 4)] == whole[3:4]
    other = [r.text for r in training_records(_config("max_ops=5", "ops=+-*/", "modulus=5",
                                              "eval_samples=10", "seed=1"), 0, 50)]
    assert other != whole[:50]


def test_shards_are_byte_identical_whatever_the_workers_and_the_same_documents_whatever_size(
        tmp_path):
    assert_independent_of_workers_and_shard_size("mano", ["max_ops=4", "eval_samples=20"],
                                                 tmp_path)


@pytest.mark.parametrize("override, key", [
    ("max_ops=0", "max_ops"),
    ("max_ops=65", "max_ops"),
    ("ops=+%", "ops"),
    ("ops=++", "ops"),
    ("ops=''", "ops"),
    ("modulus=21", "modulus"),
    ("modulus=1", "modulus"),
    ("modulus=65537", "modulus"),
    ("samples=0", "samples"),
    ("eval_samples=-1", "eval_samples"),
    ("eval_samples=794", "eval_samples"),  # more than half of the 1,587 one-operator ones
])
def test_bad_values_are_refused_naming_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config(override)
    assert err.value.key == key


@pytest.mark.parametrize("overrides", [("modulus=65521", "eval_samples=0"), ("max_ops=64",),
                                       ("eval_samples=793",)])  # 793: half of the 1,587
def test_values_at_their_bounds_are_accepted(overrides):
    _config(*overrides)


def test_physlm_gen_makes_a_small_corpus_and_refuses_a_bad_key_in_one_line(tmp_path, capsys):
    config = str(ROOT / "configs/corpus/mano.yaml")
    out = tmp_path / "c"
    assert main(["gen", config, "samples=200", "eval_samples=30", "--out", str(out)]) == 0
    rows = (out / "eval" / "mano_test.jsonl").read_text().splitlines()
    assert len(rows) == 10 * 30 and json.loads(rows[-1])["ops"] == 10
    capsys.readouterr()
    assert main(["gen", config, "max_ops=0", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err == ("physlm gen: error: command line: max_ops=0: >= 1\n")
