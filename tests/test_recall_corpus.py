"""The recall family: one subject and one relation among noise tokens, the separator, then the
answer of a seeded fact table with disjoint per-relation blocks; checked against plain Python
truth, frequency checks with fixed seeds, and the relation-only loss by brute force."""

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import read_shard
from corpus_gen.recall.facts import fact_table, relation_only_loss, zipf_law
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    chi_square_p,
    eval_rows,
    family_config,
    training_records,
)

ROOT = Path(__file__).resolve().parent.parent
P_FLOOR = 1e-5  # a chi-square p-value below this fails (fixed seeds: the test is deterministic)


def _config(*overrides: str):
    return family_config("recall", *overrides)


def _documents(config, count: int) -> np.ndarray:
    """(count, T + 1) token ids of the first training documents."""
    batches = get_family("recall").document_batches(config, 0, count)
    return np.concatenate([b.ids + 1 for b in batches]).reshape(count, config.seq_len + 1)


def _parse(words: list[str], config) -> dict:
    """A document read back by name: its one subject and relation, where they stand, the
    separator and the answer."""
    kinds = Counter(w[0] if w[0] in "srna" else w for w in words)
    t = config.seq_len
    assert kinds == {"s": 1, "r": 1, "n": t - 3, "<sep>": 1, "a": 1}
    assert words[t - 1] == "<sep>" and words[t][0] == "a" and len(words) == t + 1
    (subject_at,) = [i for i, w in enumerate(words) if w[0] == "s"]
    (relation_at,) = [i for i, w in enumerate(words) if w[0] == "r"]
    return {"subject": int(words[subject_at][1:]), "relation": int(words[relation_at][1:]),
            "answer": int(words[t][1:]), "subject_at": subject_at, "relation_at": relation_at}


def test_the_vocabulary_names_each_token_once_in_a_fixed_order():
    config = _config("subjects=3", "relations=2", "answers_per_relation=4", "noise_tokens=2")
    assert get_family("recall").vocabulary(config) == (
        "<eos>", "s0", "s1", "s2", "r0", "r1", "n0", "n1", "<sep>",
        *(f"a{i}" for i in range(8)))


def test_every_document_holds_one_subject_and_one_relation_and_their_fact(tmp_path):
    config = _config("subjects=5", "relations=3", "answers_per_relation=4", "noise_tokens=6",
                     "seq_len=8", "samples=400", "records_per_shard=128", "docs_per_sample=8")
    out = tmp_path / "c"
    manifest = generate_corpus(config, out, progress=False, log=lambda *_: None)
    names = json.loads((out / "vocab.json").read_text())
    facts = json.loads((out / "facts.json").read_text())
    samples = [s for shard in manifest["shards"] for s in read_shard(out / shard["name"])]
    assert len(samples) == 400 and manifest["tokenizer"]["eos_id"] == 0
    for sample in samples:
        words = [names[str(i)] for i in sample["ids"].tolist()]
        assert " ".join(words) == sample["json"]["text"]
        truth = _parse(words, config)
        assert {k: sample["json"][k] for k in truth} == truth
        assert truth["answer"] == facts["answers"][truth["subject"]][truth["relation"]]
        assert sample["mask"].tolist() == [0] * config.seq_len + [1]  # the answer only


@pytest.mark.parametrize("distinct", [False, True])
def test_the_answer_blocks_are_disjoint_and_distinct_answers_are_one_to_one(distinct):
    table = fact_table(7, 8, 5, 8, distinct)
    assert table.shape == (8, 5)
    for r in range(5):
        assert ((table[:, r] >= r * 8) & (table[:, r] < (r + 1) * 8)).all()
        assert (len(set(table[:, r].tolist())) == 8) == distinct  # S = D: a permutation
    assert (fact_table(7, 8, 5, 8, distinct) == table).all()
    assert (fact_table(8, 8, 5, 8, distinct) != table).any()


def test_drawn_answers_are_uniform_over_the_relations_block():
    table = fact_table(0, 40_000, 3, 8, False)
    for r in range(3):
        counts = np.bincount(table[:, r] - r * 8, minlength=8)
        assert chi_square_p(counts, np.full(8, 40_000 / 8)) > P_FLOOR


def test_each_relations_answers_are_drawn_apart_from_the_others():
    table = fact_table(0, 40_000, 3, 8, False)
    for r, s in ((0, 1), (1, 2)):  # the same place in their blocks: 1/8 of the subjects
        agree = int((table[:, r] - 8 * r == table[:, s] - 8 * s).sum())
        assert abs(agree - 5000) < 5 * math.sqrt(40_000 / 8 * 7 / 8)
    one_to_one = fact_table(0, 8, 3, 8, True)
    assert (one_to_one[:, 0] != one_to_one[:, 1] - 8).any()


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.5])
def test_subjects_and_relations_follow_their_zipf_laws(exponent):
    config = _config("subjects=6", "relations=3", "noise_tokens=3", "seq_len=6",
                     f"subject_zipf={exponent}", f"relation_zipf={exponent / 2}",
                     "samples=60000")
    docs = _documents(config, 60_000)
    # token ids: subjects 1..6, relations 7..9, then noise; the prompt's first 5 places
    subject = np.where((docs[:, :5] >= 1) & (docs[:, :5] <= 6), docs[:, :5] - 1, -1).max(1)
    relation = np.where((docs[:, :5] >= 7) & (docs[:, :5] <= 9), docs[:, :5] - 7, -1).max(1)
    weights = np.arange(1, 7.0) ** -exponent
    assert chi_square_p(np.bincount(subject, minlength=6),
                         60_000 * weights / weights.sum()) > P_FLOOR
    weights = np.arange(1, 4.0) ** -(exponent / 2)
    assert chi_square_p(np.bincount(relation, minlength=3),
                         60_000 * weights / weights.sum()) > P_FLOOR


def test_places_are_a_uniform_ordered_pair_and_noise_is_uniform():
    config = _config("subjects=2", "relations=2", "noise_tokens=5", "seq_len=6",
                     "samples=60000")
    docs = _documents(config, 60_000)
    prompt = docs[:, :5]
    subject_at = np.argmax((prompt >= 1) & (prompt <= 2), 1)
    relation_at = np.argmax((prompt >= 3) & (prompt <= 4), 1)
    pairs = np.bincount(subject_at * 5 + relation_at, minlength=25).reshape(5, 5)
    expected = np.full((5, 5), 60_000 / 20)
    np.fill_diagonal(expected, 0)
    assert chi_square_p(pairs.ravel(), expected.ravel()) > P_FLOOR
    noise = prompt[prompt >= 5] - 5
    assert len(noise) == 60_000 * 3
    assert chi_square_p(np.bincount(noise, minlength=5), np.full(5, len(noise) / 5)) > P_FLOOR
    assert (docs[:, 5] == 10).all()  # <sep>


def _brute_relation_only_loss(table: np.ndarray, p: list[float], q: list[float]) -> float:
    loss = 0.0
    for r, q_r in enumerate(q):
        mass: dict[int, float] = {}
        for s, p_s in enumerate(p):
            mass[int(table[s, r])] = mass.get(int(table[s, r]), 0.0) + p_s
        loss -= q_r * sum(m * math.log(m) for m in mass.values())
    return loss


def test_the_relation_only_loss_is_the_conditional_entropy_and_ln_d_when_spread_evenly():
    table = fact_table(3, 12, 4, 5, False)
    p, q = zipf_law(12, 1.2), zipf_law(4, 0.7)
    assert relation_only_loss(table, p, q) == pytest.approx(
        _brute_relation_only_loss(table, p.tolist(), q.tolist()), abs=1e-12)
    assert relation_only_loss(table, p, q) < math.log(5)
    even = fact_table(3, 8, 4, 8, True)  # S = D, uniform subjects: every answer once
    assert relation_only_loss(even, zipf_law(8, 0), zipf_law(4, 0.7)) == pytest.approx(
        math.log(8), abs=1e-12)


def test_the_corpus_records_the_fact_table_and_the_hallucination_losses(tmp_path):
    config = _config("samples=10")
    generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    facts = json.loads((tmp_path / "c" / "facts.json").read_text())
    assert facts["answers"] == fact_table(0, 16, 4, 8, False).tolist()
    assert facts["ln_D"] == round(math.log(8), 6)
    summary = json.loads((tmp_path / "c" / "manifest.json").read_text())["summary"]
    assert summary["ln_D"] == facts["ln_D"]
    assert summary["relation_only_loss"] == facts["relation_only_loss"] == round(
        _brute_relation_only_loss(np.array(facts["answers"]), [1 / 16] * 16, [1 / 4] * 4), 6)


def test_the_test_set_asks_every_fact_once():
    config = _config("subjects=5", "relations=3", "answers_per_relation=4", "seq_len=7",
                     "seed=2")
    rows = eval_rows(config)
    names = get_family("recall").vocabulary(config)
    table = fact_table(2, 5, 3, 4, False)
    assert [r["id"] for r in rows] == list(range(15))
    assert [(r["subject"], r["relation"]) for r in rows] == [(s, r) for s in range(5)
                                                             for r in range(3)]
    for row in rows:
        assert set(row) == {"id", "prompt", "answer", "text", "subject", "relation",
                            "subject_at", "relation_at"}
        words = [names[i] for i in row["prompt"] + row["answer"]]
        assert " ".join(words) == row["text"] and len(row["prompt"]) == 7
        truth = _parse(words, config)
        assert {k: row[k] for k in truth if k != "answer"} == {
            k: v for k, v in truth.items() if k != "answer"}
        assert truth["answer"] == table[row["subject"], row["relation"]]


def test_the_test_rows_noise_is_not_the_training_documents():
    # the test stream is its own: row i's 4 noise words (of 20) are not training document i's
    config = _config("subjects=5", "relations=3", "seq_len=7")

    def noise(text: str) -> list[str]:
        return [word for word in text.split() if word.startswith("n")]

    rows, documents = eval_rows(config), training_records(config, 0, 15)
    assert all(noise(row["text"]) != noise(document.text)
               for row, document in zip(rows, documents))


def test_the_test_set_spans_several_blocks_of_rows():
    rows = eval_rows(_config("subjects=100", "relations=90", "answers_per_relation=4"))
    assert [r["id"] for r in rows] == list(range(9000))  # more than one block of 8,192
    assert (rows[-1]["subject"], rows[-1]["relation"]) == (99, 89)


def test_documents_are_the_same_whatever_the_range_drawn():
    config = _config("samples=20000")
    whole = [r.text for r in training_records(config, 0, 9000)]
    assert [r.text for r in training_records(config, 8190, 8200)] == whole[8190:8200]
    assert [r.text for r in training_records(config, 3, 4)] == whole[3:4]
    other = [r.text for r in training_records(_config("seed=1"), 0, 50)]
    assert other != whole[:50]


def test_shards_are_byte_identical_whatever_the_workers_and_the_same_documents_whatever_size(
        tmp_path):
    assert_independent_of_workers_and_shard_size("recall", ["subject_zipf=1.0"], tmp_path)


@pytest.mark.parametrize("override, key", [
    ("subjects=0", "subjects"),
    ("relations=0", "relations"),
    ("answers_per_relation=0", "answers_per_relation"),
    ("noise_tokens=0", "noise_tokens"),
    ("samples=0", "samples"),
    ("seq_len=3", "seq_len"),
    ("subject_zipf=-1", "subject_zipf"),
    ("relation_zipf=17", "relation_zipf"),
    ("distinct_answers=true", "subjects"),  # S 16 > D 8: S * R above the answer space D * R
])
def test_bad_values_are_refused_naming_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config(override)
    assert err.value.key == key


def test_physlm_gen_makes_a_small_corpus_and_refuses_a_bad_key_in_one_line(tmp_path, capsys):
    config = str(ROOT / "configs/corpus/recall.yaml")
    out = tmp_path / "c"
    assert main(["gen", config, "samples=200", "--out", str(out)]) == 0
    rows = (out / "eval" / "recall_test.jsonl").read_text().splitlines()
    assert len(rows) == 16 * 4 and json.loads(rows[-1])["id"] == 63
    capsys.readouterr()
    assert main(["gen", config, "distinct_answers=true", "subjects=9",
                 "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err == ("physlm gen: error: command line: subjects=9: with distinct_answers, "
                   "S * R = 36 must be <= the answer space D * R = 32\n")
