"""The khop family: every target against a brute-force walk of the hops, no letter twice in a
row, the laws of k and of the letters by chi-square, the layout of a document (hop token first,
its blank target outside the loss), the test rows, determinism and bad keys."""

from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.registry import get_family
from corpus_gen.khop import family
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    assert_law,
    eval_rows,
    family_config,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent
def _config(*overrides: str):
    return family_config("khop", *overrides)


def _batch(config, count: int, start: int = 0):
    """The training documents [start, start + count) as the shard writer gets them (count at
    most 512: one UnitBatch)."""
    (batch,) = get_family("khop").document_batches(config, start, start + count)
    return batch


def _many(config, count: int):
    """The first `count` training documents, drawn as one batch."""
    return family.documents(config, "train", np.arange(count))


def _rows(batch, config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(units, targets, loss), each (B, 1 + T)."""
    shape = (len(batch), config.seq_len + 1)
    return (batch.ids.reshape(shape), batch.targets.reshape(shape), batch.loss.reshape(shape))


def brute_force_target(letters: list[int], position: int, hops: int) -> int | None:
    """Walk back k times from `position`: to the previous occurrence of the letter there, then
    one step on; None where an occurrence is missing."""
    at = position
    for _ in range(hops):
        before = [j for j in range(at) if letters[j] == letters[at]]
        if not before:
            return None
        at = before[-1] + 1
    return letters[at]


def test_the_vocabulary_is_eos_letters_undefined_blank_then_hop_tokens():
    assert family.vocabulary(_config("alphabet=3", "max_hops=2")) == (
        "<eos>", "a", "b", "c", "~", "_", "k0", "k1", "k2")


@pytest.mark.parametrize("overrides", [(), ("alphabet=2", "max_hops=5", "seq_len=12"),
                                       ("alphabet=7", "max_hops=9", "seq_len=40")])
def test_every_target_is_the_brute_force_walk_of_its_hops(overrides):
    config = _config(*overrides)
    batch = _batch(config, 300)
    units, targets, loss = _rows(batch, config)
    a = config.alphabet
    names = family.vocabulary(config)
    seen_k = set()
    for doc, (unit_row, target_row) in enumerate(zip(units.tolist(), targets.tolist())):
        k = unit_row[0] - (a + 2)
        seen_k.add(k)
        assert names[unit_row[0] + 1] == f"k{k}" and batch.metas[doc] == f'{{"k":{k}}}'
        letters = unit_row[1:]
        expected = [brute_force_target(letters, i, k) for i in range(len(letters))]
        assert target_row[1:] == [a if t is None else t for t in expected], doc
        assert target_row[0] == a + 1  # "_"
    assert seen_k == set(range(config.max_hops + 1))
    assert (loss[:, 0] == 0).all() and (loss[:, 1:] == 1).all()


def test_no_letter_follows_itself_and_the_others_are_uniform():
    config = _config("alphabet=5", "seq_len=40", "max_hops=2")
    letters = _rows(_many(config, 2000), config)[0][:, 1:]
    assert (letters < 5).all() and (letters[:, 1:] != letters[:, :-1]).all()
    assert_law(np.bincount(letters[:, 0], minlength=5), np.full(5, 0.2))
    for before in range(5):
        law = np.where(np.arange(5) == before, 0.0, 0.25)
        assert_law(np.bincount(letters[:, 1:][letters[:, :-1] == before], minlength=5), law)


@pytest.mark.parametrize("weights", [None, [0.0, 1.0, 3.0, 0.5, 0.5]])
def test_the_hop_count_follows_its_law(weights):
    overrides = ["max_hops=4", "seq_len=8"]
    if weights:
        overrides.append(f"hop_weights=[{','.join(map(str, weights))}]")
    config = _config(*overrides)
    k = _rows(_many(config, 20000), config)[0][:, 0] - (config.alphabet + 2)
    law = np.full(5, 0.2) if weights is None else np.array(weights) / sum(weights)
    assert_law(np.bincount(k, minlength=5), law)


def test_documents_are_a_function_of_their_position_whatever_the_batch():
    config = _config("seq_len=20", "max_hops=3")
    whole = _batch(config, 9)
    part = _batch(config, 3, start=4)
    a, b = whole.offsets[4], whole.offsets[7]
    assert np.array_equal(part.ids, whole.ids[a:b])
    assert np.array_equal(part.targets, whole.targets[a:b])
    assert part.metas == whole.metas[4:7]
    records = training_records(config, 0, 9)
    assert [r.text for r in records] == whole.texts()
    assert all(r.masked == ((0, len(r.text.split()[0])),) for r in records)  # the hop token
    assert training_records(config, 2, 5) == records[2:5]
    assert _batch(_config("seq_len=20", "max_hops=3", "seed=1"), 9).texts() != whole.texts()


def test_the_test_rows_hold_every_k_alike_as_vocabulary_ids():
    config = _config("seq_len=16", "max_hops=3", "eval_samples=5")
    rows = eval_rows(config)
    names = family.vocabulary(config)
    assert [r["id"] for r in rows] == list(range(20))
    assert [r["k"] for r in rows] == [0, 1, 2, 3] * 5
    train = _batch(config, 20).texts()
    for row in rows:
        assert row["text"] == " ".join(names[t] for t in row["tokens"])
        assert names[row["tokens"][0]] == f"k{row['k']}" and names[row["targets"][0]] == "_"
        letters = [t - 1 for t in row["tokens"][1:]]
        expected = [brute_force_target(letters, i, row["k"]) for i in range(16)]
        assert [names[t] for t in row["targets"][1:]] == [
            "~" if e is None else "abcd"[e] for e in expected]
        assert row["text"] not in train  # their own stream


def test_max_hops_may_be_seq_len_minus_2_where_only_the_last_letter_has_a_target():
    config = _config("alphabet=2", "seq_len=12", "max_hops=10")
    batch = family.documents(config, "test", np.arange(3), np.array([10, 10, 10]))
    units, targets, _ = _rows(batch, config)
    assert (targets[:, 1:12] == 2).all()  # "~": fewer than 10 earlier occurrences to walk
    assert (targets[:, 12] == units[:, 2]).all()  # ten hops back from letter 11: letter 1


@pytest.mark.parametrize("override, key", [
    ("alphabet=1", "alphabet"), ("alphabet=27", "alphabet"), ("max_hops=-1", "max_hops"),
    ("max_hops=97", "max_hops"), ("seq_len=1", "seq_len"), ("hop_weights=[1,2]", "hop_weights"),
    ("hop_weights=[0,0,0]", "hop_weights"), ("samples=0", "samples"),
    ("eval_samples=-1", "eval_samples"),
])
def test_bad_values_are_refused_naming_their_key(override, key):
    overrides = ["max_hops=2", override] if key == "hop_weights" else [override]
    with pytest.raises(ConfigError) as err:
        _config(*overrides)
    assert err.value.key == key


def test_physlm_gen_writes_the_corpus_and_refuses_too_many_hops_in_one_line(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["gen", str(ROOT / "configs/corpus/khop.yaml"), "samples=30", "eval_samples=2",
                 "--out", str(out), "--no-progress"]) == 0
    assert len((out / "eval" / "khop_test.jsonl").read_text().splitlines()) == 2 * 17
    capsys.readouterr()
    assert main(["gen", str(ROOT / "configs/corpus/khop.yaml"), "max_hops=97",
                 "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        "physlm gen: error: command line: max_hops=97: at most seq_len - 2 = 96: a k-hop "
        "target needs k + 1 letters before it\n")


def test_a_corpus_is_the_same_for_one_or_two_workers(tmp_path):
    assert_independent_of_workers_and_shard_size("khop", ["seq_len=30", "max_hops=4"], tmp_path)
