"""The depo family and the words it is spelled in: cycles, successors, loss masks and test sets
checked against plain Python truth on small cases."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core import word_tasks
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import read_shard
from corpus_gen.core.words import Lexicon, hash_each, is_word_end, shuffled
from corpus_gen.depo import family as depo
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
    return family_config("depo", *overrides)





def _parse(text: str) -> tuple[dict[str, str], list[tuple[int, str, str]]]:
    """The successor of each word the context lists, and the queries (k, q, a)."""
    names = text.split(" ")
    assert names[0] == "<bos>"
    first_query = next((i for i, n in enumerate(names) if n.startswith("hop")), len(names))
    context = readable_words(names[1:first_query])
    pairs = list(zip(context[::2], context[1::2]))
    successor = dict(pairs)
    assert len(successor) == len(pairs) == len(context) // 2  # each word listed once first
    queries = []
    rest = names[first_query:]
    while rest:
        k = int(rest[0][3:])
        arrow = rest.index("=>")
        end = next(i for i in range(arrow + 1, len(rest)) if is_word_end(rest[i]))
        queries.append((k, " ".join(rest[1:arrow]), " ".join(rest[arrow + 1:end + 1])))
        rest = rest[end + 1:]
    return successor, queries


def _walk(successor: dict[str, str], word: str, k: int) -> str:
    for _ in range(k):
        word = successor[word]
    return word


def _cycle_key(successor: dict[str, str]) -> frozenset:
    return frozenset(successor.items())


def test_the_vocabulary_names_each_token_once_in_a_fixed_order():
    config = _config("max_n=5", "max_k=3", "mini_vocab=2")
    assert get_family("depo").vocabulary(config) == (
        "<eos>", "<bos>", "hop1", "hop2", "hop3", "=>", "w1", "w2", "w1.", "w2.")


def test_each_answer_is_the_kth_successor_walking_the_hidden_cycle():
    config = _config("max_n=12", "max_k=5", "mini_vocab=3", "min_len=1", "max_len=3",
                     "queries=4", "eval_samples=2")
    for record in training_records(config, 0, 1500):
        successor, queries = _parse(record.text)
        n = record.meta["n"]
        assert len(successor) == n and set(successor.values()) == set(successor)
        # one cycle through all n words, not several
        assert len({_walk(successor, next(iter(successor)), i) for i in range(n)}) == n
        assert all(1 <= len(w.split(" ")) <= 3 for w in successor)
        assert len(queries) == min(n, 4) and len({q for _, q, _ in queries}) == len(queries)
        assert [k for k, _, _ in queries] == record.meta["hops"]
        for k, query, answer in queries:
            assert 1 <= k <= 5 and answer == _walk(successor, query, k)


def test_sizes_follow_the_official_distribution_and_hops_are_uniform():
    config = _config("max_n=12", "max_k=4", "mini_vocab=4", "queries=1", "eval_samples=1")
    records = training_records(config, 0, 30000)
    sizes = Counter(r.meta["n"] for r in records)
    weights = {n: 1 / (n + np.sqrt(12)) for n in range(3, 13)}
    total = sum(weights.values())
    assert set(sizes) == set(weights)
    for n, weight in weights.items():
        assert abs(sizes[n] / len(records) - weight / total) < 0.008
    hops = Counter(k for r in records for k in r.meta["hops"])
    assert all(abs(c / len(records) - 1 / 4) < 0.01 for c in hops.values())


def test_a_cycle_puts_its_words_in_every_order_and_lists_pairs_in_every_order():
    # 3 one-letter words of 3: two cycles (orientations), listed starting at any of 3 pairs
    config = _config("max_n=3", "max_k=1", "mini_vocab=3", "max_len=1", "queries=1",
                     "eval_samples=0")
    records = training_records(config, 0, 3000)
    cycles = Counter(_cycle_key(_parse(r.text)[0]) for r in records)
    firsts = Counter(r.text.split(" ")[1] for r in records)
    assert len(cycles) == 2 and min(cycles.values()) > 1300
    assert len(firsts) == 3 and min(firsts.values()) > 900


def test_the_loss_counts_only_the_answer_marker_and_the_answer(tmp_path):
    config = _config("max_n=9", "max_k=3", "mini_vocab=3", "max_len=3", "queries=3",
                     "samples=200", "records_per_shard=64", "eval_samples=3")
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    names = json.loads((tmp_path / "c" / "vocab.json").read_text())
    samples = [s for shard in manifest["shards"] for s in read_shard(tmp_path / "c" /
                                                                       shard["name"])]
    assert len(samples) == 200 and manifest["tokenizer"]["eos_id"] == 0
    for sample in samples:
        words = [names[str(i)] for i in sample["ids"].tolist()]
        assert " ".join(words) == sample["json"]["text"]
        expected, counting = [], False
        for word in words:  # from each "=>" through the end of the answer word
            counting = counting or word == "=>"
            expected.append(int(counting))
            counting = counting and not is_word_end(word)
        assert sample["mask"].tolist() == expected
        assert sum(expected) > 0


def test_test_rows_follow_the_contract():
    config = _config("max_n=10", "max_k=6", "mini_vocab=3", "max_len=2", "eval_samples=7")
    rows = eval_rows(config)
    names = get_family("depo").vocabulary(config)
    assert config.tested_hops() == [1, 2, 4, 6]
    assert [r["id"] for r in rows] == list(range(28))
    assert [r["k"] for r in rows] == [1] * 7 + [2] * 7 + [4] * 7 + [6] * 7
    for row in rows:
        assert set(row) == {"id", "prompt", "answer", "text", "n", "k", "query", "edges"}
        prompt = [names[i] for i in row["prompt"]]
        answer = [names[i] for i in row["answer"]]
        assert " ".join(prompt + answer) == row["text"] and row["n"] == 10
        assert prompt[0] == "<bos>" and prompt[-1] == "=>"
        assert [n for n in prompt if n.startswith("hop")] == [f"hop{row['k']}"]
        successor, queries = _parse(row["text"])
        assert list(successor.items()) == list(map(tuple, row["edges"]))  # context order
        assert len(row["edges"]) == 10
        assert queries == [(row["k"], row["query"], " ".join(answer))]
        assert " ".join(answer) == _walk(successor, row["query"], row["k"])
        assert readable_words(answer) == [" ".join(answer)]  # the answer is one word, no EOS


def test_no_test_cycle_is_trained_on():
    # 4 one-letter words of 4: 6 cycles; n = 4 in about 45% of the training documents
    config = _config("max_n=4", "max_k=3", "mini_vocab=4", "max_len=1", "queries=2",
                     "eval_samples=1")
    held_out = {_cycle_key(_parse(r["text"])[0]) for r in eval_rows(config)}
    trained = Counter(_cycle_key(_parse(r.text)[0]) for r in training_records(config, 0, 3000))
    full = {c: k for c, k in trained.items() if len(c) == 4}
    assert 2 <= len(held_out) <= 3 and not held_out & set(trained)
    assert len(full) == 6 - len(held_out) and sum(full.values()) > 1000
    # without the redraws, some of these documents would have been test cycles
    index = np.arange(3000)
    keys = word_tasks.doc_keys(depo.derive_key(0, "depo", "train"), index, np.zeros_like(index))
    n = depo._sizes(config, keys)
    first = depo.cycles(config, keys[n == 4], n[n == 4]).hashes()
    assert np.isin(first, depo._test_hashes(config)).sum() > 100


def test_a_test_set_covering_every_training_cycle_is_refused():
    config = _config("max_n=3", "max_k=1", "mini_vocab=3", "max_len=1", "eval_samples=20")
    with pytest.raises(Exception, match="test set covers nearly every graph"):
        training_records(config, 0, 10)


def test_documents_are_the_same_whatever_the_range_drawn():
    config = _config("max_n=20", "max_k=4", "mini_vocab=3", "min_len=2", "max_len=4",
                     "eval_samples=2")
    whole = [r.text for r in training_records(config, 0, 1200)]
    assert [r.text for r in training_records(config, 1020, 1030)] == whole[1020:1030]
    assert [r.text for r in training_records(config, 3, 4)] == whole[3:4]
    other = [r.text for r in training_records(_config("max_n=20", "max_k=4", "mini_vocab=3",
                                              "min_len=2", "max_len=4", "eval_samples=2",
                                              "seed=1"), 0, 50)]
    assert other != whole[:50]


def test_shards_hold_the_same_documents_whatever_the_shard_size_or_workers(tmp_path):
    assert_independent_of_workers_and_shard_size(
        "depo", ["max_n=30", "max_k=4", "mini_vocab=5", "max_len=2", "eval_samples=3"], tmp_path)


@pytest.mark.parametrize("override, key", [
    ("max_n=2", "max_n"),
    ("max_n=100001", "max_n"),
    ("max_k=0", "max_k"),
    ("max_k=9", "max_k"),  # K < N
    ("mini_vocab=1", "mini_vocab"),
    ("min_len=0", "min_len"),
    ("max_len=0", "max_len"),
    ("mini_vocab=2", "max_n"),  # 2 + 4 words of 1-2 letters < N = 9
    ("max_len=14", "max_len"),  # 5**14 + ... > 2**32 words
    ("queries=0", "queries"),
    ("samples=0", "samples"),
    ("eval_samples=-1", "eval_samples"),
])
def test_bad_values_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config("max_n=9", "max_k=4", "mini_vocab=5", "max_len=2", override)
    assert err.value.key == key


@pytest.mark.parametrize("max_n", [3, 100_000])
def test_max_n_at_its_bounds_is_accepted(max_n):
    # 400 + 400**2 words of 1-2 letters: enough for the largest cycle
    assert _config(f"max_n={max_n}", "max_k=2", "mini_vocab=400", "max_len=2").max_n == max_n


def test_gen_refuses_a_bad_value_with_exit_2(tmp_path, capsys):
    code = main(["gen", str(ROOT / "configs/corpus/depo1.yaml"), "max_k=375",
                 "--out", str(tmp_path / "c"), "--no-progress"])
    assert code == 2 and "max_k=375" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("name", ["depo1", "depo2"])
def test_gen_writes_a_small_corpus_from_the_shipped_config(tmp_path, name):
    out = tmp_path / name
    assert main(["gen", str(ROOT / f"configs/corpus/{name}.yaml"), "samples=300",
                 "eval_samples=4", "--out", str(out), "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(s["records"] for s in manifest["shards"]) == 300
    rows = [json.loads(line) for line in (out / "eval/depo_test.jsonl").read_text().splitlines()]
    hops = _config(f"max_k={16 if name == 'depo2' else 8}").tested_hops()
    assert len(rows) == 4 * len(hops) and {r["n"] for r in rows} == {125 if name == "depo2"
                                                                      else 375}


def test_words_are_distinct_drawn_with_uniform_lengths_and_spelled_back():
    lexicon = Lexicon(3, 1, 3)  # 3 + 9 + 27 words
    keys = word_tasks.doc_keys(7, np.arange(400), np.zeros(400, dtype=np.int64))
    counts = np.full(400, 30)
    codes = lexicon.draw(keys, counts, 1)
    words = lexicon.readable(codes)
    for doc in np.split(np.array(words, dtype=object), 400):
        assert len(set(doc)) == 30  # distinct within a document
    # every word is one word: inner letters, then one end letter
    assert all(readable_words(w.split(" ")) == [w] for w in words)
    assert len(set(lexicon.readable(np.arange(lexicon.size)))) == 39
    # the first draws: length uniform (a collision-free large space: 6**4 words of 4 letters)
    wide = Lexicon(6, 2, 4)
    lengths = Counter(len(w.split(" ")) for w in wide.readable(wide.draw(keys, np.ones(400,
                                                                                        int), 2)))
    assert all(abs(c / 400 - 1 / 3) < 0.08 for c in lengths.values())


def test_a_large_lexicon_is_spelled_without_a_table():
    lexicon = Lexicon(50, 3, 4)  # 6.4 million words
    codes = np.array([0, 1, 49, 50, 125000 - 1, 125000, lexicon.size - 1])
    assert lexicon.readable(codes) == [
        "w1 w1 w1.", "w1 w1 w2.", "w1 w1 w50.", "w1 w2 w1.", "w50 w50 w50.", "w1 w1 w1 w1.",
        "w50 w50 w50 w50."]


def test_shuffles_and_draws_of_a_document_do_not_depend_on_the_others_drawn_with_it():
    keys = hash_each(np.arange(6, dtype=np.uint64), np.zeros(6, dtype=np.uint64))
    sizes = np.array([3, 0, 5, 2, 7, 1])
    whole = shuffled(keys, sizes, 3)
    starts = np.r_[0, np.cumsum(sizes)]
    for doc in range(6):
        part = whole[starts[doc]:starts[doc + 1]] - starts[doc]
        assert sorted(part.tolist()) == list(range(sizes[doc]))
        alone = shuffled(keys[doc:doc + 1], sizes[doc:doc + 1], 3)
        assert alone.tolist() == part.tolist()
    lexicon = Lexicon(2, 1, 4)
    codes = lexicon.draw(keys, sizes + 1, 5)
    assert lexicon.draw(keys[2:3], sizes[2:3] + 1, 5).tolist() == codes[5:11].tolist()


def test_documents_spelled_in_letters_read_as_those_spelled_in_words(monkeypatch):
    # a lexicon too large to give every word a unit is spelled letter by letter: same text, loss
    config = _config("max_n=12", "max_k=3", "mini_vocab=3", "max_len=3", "eval_samples=2")
    words, rows = list(depo.batches(config, 0, 600)), eval_rows(config)
    monkeypatch.setattr(word_tasks, "WORD_UNITS", 0)
    letters = list(depo.batches(config, 0, 600))
    assert len(words[0].ids) < len(letters[0].ids)
    assert eval_rows(config) == rows  # test rows' texts joined from words or from letters
    for by_word, by_letter in zip(words, letters):
        assert by_word.texts() == by_letter.texts() and by_word.metas == by_letter.metas
        for batch in (by_word, by_letter):  # the loss per letter
            batch.loss = np.repeat(batch.loss, [len(u.split(" ")) for u in
                                                batch.units.strings[batch.ids]])
        assert by_word.loss.tolist() == by_letter.loss.tolist()


def test_words_are_the_first_distinct_ones_of_the_official_process():
    # the official: draw a length, then letters, until n distinct; short words run out first
    def official(rng, n: int) -> int:
        words = set()
        while len(words) < n:
            length = rng.randint(1, 2)
            words.add(tuple(rng.randint(1, 3) for _ in range(length)))
        return sum(len(w) == 1 for w in words)

    rng = __import__("random").Random(0)
    want = np.mean([official(rng, 8) for _ in range(4000)])
    lexicon = Lexicon(3, 1, 2)  # 3 words of one letter, 9 of two
    keys = word_tasks.doc_keys(11, np.arange(4000), np.zeros(4000, dtype=np.int64))
    codes = lexicon.draw(keys, np.full(4000, 8), 1)
    assert abs(np.mean((codes < 3).reshape(4000, 8).sum(1)) - want) < 0.03
    # the first n distinct of one stream of draws: asking for more keeps those found before
    more = lexicon.draw(keys, np.full(4000, 10), 1).reshape(4000, 10)
    assert all(set(a) <= set(b) for a, b in zip(codes.reshape(4000, 8).tolist(),
                                                more.tolist()))
