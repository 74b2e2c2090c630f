"""The CFG sampler (counter-based, vectorised), its parse-tree labels, and the cfg corpus family."""

import io
import json
import math
import os
import tarfile
from collections import Counter

import numpy as np
import pytest

from corpus_gen.cfg.family import BOS
from corpus_gen.cfg.grammar import Grammar, load_grammar, random_grammar
from corpus_gen.cfg.sample import replay, sample
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import corpus_fingerprint, generate_corpus
from corpus_gen.core.manifest import manifest_entries
from corpus_gen.core.registry import schemas
from corpus_gen.core.tokenizer import Tokenizer
from corpus_gen.core.verify import verify_corpus

SHIPPED = ["cfg3b", "cfg3e1", "cfg3e2", "cfg3f", "cfg3g", "cfg3h", "cfg3i", "cfg3j", "cfg3k"]
# depth 3, unit rules, rules of 1 to 3 children, 2 to 3 rules per symbol
SMALL = Grammar("small", 2, (
    (((0, 1), (1, 0, 0), (1,)),),
    (((0, 1), (1,)), ((1, 1), (0,), (0, 0, 1))),
    (((0,), (0, 1)), ((1, 0), (1,))),
))


def _expand(grammar: Grammar, rules: list[int]):
    """A plain reference for one string: expand the rule choices (level order) node by node.
    Returns the terminals, per level the (symbol, rule choice) of each node left to right, and
    per level and terminal position its ancestor's symbol and node index."""
    nodes, cursor, levels = [0], 0, []
    ancestry = [[]]  # per current node: its (symbol, node index) at each level above it
    for level in grammar.levels:
        picks = rules[cursor:cursor + len(nodes)]
        assert len(picks) == len(nodes)
        cursor += len(nodes)
        levels.append(list(zip(nodes, picks)))
        children, child_ancestry = [], []
        for k, (symbol, pick) in enumerate(zip(nodes, picks)):
            for child in level[symbol][pick]:
                children.append(child)
                child_ancestry.append(ancestry[k] + [(symbol, k)])
        nodes, ancestry = children, child_ancestry
    assert cursor == len(rules)
    ancestor = np.array([[a[k][0] for a in ancestry] for k in range(grammar.depth)])
    span = np.array([[a[k][1] for a in ancestry] for k in range(grammar.depth)])
    return np.array(nodes), levels, ancestor, span


def test_string_i_is_the_same_whatever_batch_it_is_drawn_in():
    grammar = load_grammar("cfg3f")
    whole = sample(grammar, 1234, np.arange(100), labels=True)
    picked = sample(grammar, 1234, [37, 5, 99], labels=True)
    assert len(whole) == 100 and len(picked) == 3
    for j, i in enumerate([37, 5, 99]):
        assert picked.string(j).tolist() == whole.string(i).tolist()
        assert picked.rule_list(j) == whole.rule_list(i)
        here = slice(picked.offsets[j], picked.offsets[j + 1])
        there = slice(whole.offsets[i], whole.offsets[i + 1])
        for name in ("ancestor", "span", "boundary"):
            assert (getattr(picked.labels, name)[:, here]
                    == getattr(whole.labels, name)[:, there]).all()
    # strings differ from each other and across keys
    assert len({whole.string(i).tobytes() for i in range(100)}) == 100
    other = sample(grammar, 1235, np.array([37, 5, 99]))
    assert all(other.string(j).tolist() != picked.string(j).tolist() for j in range(3))
    # drawing a string twice in one batch gives it twice
    twice = sample(grammar, 1234, np.array([5, 5]))
    assert twice.string(0).tolist() == twice.string(1).tolist() == whole.string(5).tolist()


def test_cfg3f_strings_have_the_published_lengths():
    """Official: median ~246, range 117-459 (over their sample)."""
    drawn = sample(load_grammar("cfg3f"), 7, np.arange(2000))
    lengths = np.diff(drawn.offsets)
    assert 230 <= np.median(lengths) <= 260
    assert 100 <= lengths.min() <= 140 and 420 <= lengths.max() <= 520
    assert set(np.unique(drawn.terminals).tolist()) == {0, 1, 2}


def test_rule_choices_are_uniform_per_symbol():
    grammar = load_grammar("cfg3f")
    drawn = sample(grammar, 3, np.arange(1500))
    counts: dict[tuple[int, int], Counter] = {}
    for i in range(len(drawn)):
        for level, nodes in enumerate(_expand(grammar, drawn.rule_list(i))[1]):
            for symbol, pick in nodes:
                counts.setdefault((level, symbol), Counter())[pick] += 1
    assert len(counts) == 1 + 3 * 5  # every symbol of cfg3f is used
    chi2, dof = 0.0, 0
    for (level, symbol), seen in counts.items():
        k = len(grammar.levels[level][symbol])
        total = sum(seen.values())
        assert set(seen) == set(range(k))
        expected = total / k
        assert total >= 1000
        for pick in range(k):  # each frequency within 5 binomial std of 1/k
            assert abs(seen[pick] - expected) <= 5 * math.sqrt(total * (1 / k) * (1 - 1 / k))
        chi2 += sum((seen[pick] - expected) ** 2 / expected for pick in range(k))
        dof += k - 1
    assert chi2 <= dof + 5 * math.sqrt(2 * dof)  # chi-square with dof degrees of freedom


@pytest.mark.parametrize("name", ["cfg3b", "cfg3e1", "cfg3k", "small"])
def test_replay_and_the_labels_agree_with_a_plain_expansion(name):
    grammar = SMALL if name == "small" else load_grammar(name)
    drawn = sample(grammar, 99, np.arange(40), labels=True)
    rules = [drawn.rule_list(i) for i in range(len(drawn))]
    again = replay(grammar, rules)
    for field in ("terminals", "offsets", "rules", "rule_offsets"):
        assert (getattr(again, field) == getattr(drawn, field)).all()
    for field in ("ancestor", "span", "boundary"):
        assert (getattr(again.labels, field) == getattr(drawn.labels, field)).all()
    labels = drawn.labels
    assert labels.ancestor.shape == (grammar.depth, len(drawn.terminals))
    for i in range(len(drawn)):
        terminals, levels, ancestor, span = _expand(grammar, rules[i])
        here = slice(drawn.offsets[i], drawn.offsets[i + 1])
        assert drawn.string(i).tolist() == terminals.tolist()
        assert (labels.ancestor[:, here] == ancestor).all()
        assert (labels.span[:, here] == span).all()
        boundary = labels.boundary[:, here]
        assert boundary[:, -1].all()  # a string's last position ends every span
        # a node's span ends where the next node of its level begins
        assert (boundary[:, :-1] == (span[:, 1:] != span[:, :-1])).all()
        # spans nest: a level-l boundary is a boundary of every level below it
        assert (boundary[:-1] <= boundary[1:]).all()
        assert (labels.ancestor[0, here] == 0).all() and (labels.span[0, here] == 0).all()
        # the last level above the terminals: each span is as long as its node's rule
        last = levels[-1]
        ends = np.flatnonzero(boundary[-1])
        spans = np.diff(np.concatenate([[-1], ends]))
        assert spans.tolist() == [len(grammar.levels[-1][s][pick]) for s, pick in last]
        # and every level's spans count its nodes
        assert boundary.sum(axis=1).tolist() == [len(nodes) for nodes in levels]


def test_replay_refuses_choices_that_do_not_fit():
    grammar = load_grammar("cfg3b")
    rules = sample(grammar, 0, np.arange(2)).rule_list(0)
    with pytest.raises(ValueError, match="do not fit the grammar at level 0"):
        replay(grammar, [[5, *rules[1:]]])  # cfg3b's root has 2 rules
    with pytest.raises(ValueError, match="left over"):
        replay(grammar, [rules + [0]])
    with pytest.raises(ValueError, match="run out"):
        replay(grammar, [rules[:-3], rules])
    with pytest.raises(ValueError, match="run out"):
        replay(grammar, [rules, rules[:-3]])  # the last string's list too short
    with pytest.raises(ValueError, match="do not fit the grammar at level 1"):
        replay(grammar, [[rules[0], -1, *rules[2:]]])


def test_a_random_grammar_samples_only_its_own_symbols():
    grammar = random_grammar("r", (1, 4, 5, 6), (1, 3), (1, 2), 4)
    drawn = sample(grammar, 8, np.arange(300), labels=True)
    assert set(np.unique(drawn.terminals).tolist()) <= set(range(6))
    low, high = (int(b[0]) for b in grammar.yield_bounds[0])
    assert low <= np.diff(drawn.offsets).min() and np.diff(drawn.offsets).max() <= high
    for level in range(grammar.depth):
        assert drawn.labels.ancestor[level].max() < grammar.sizes[level]


# ---- the family ----------------------------------------------------------------------------

CORPUS = ["samples=70", "eval_samples=30", "records_per_shard=25", "tokenizer.vocab_size=300",
          "tokenizer.sample_records=20"]


def _cfg_config(directory, grammar="cfg3b", extra=()):
    path = directory / "cfg.yaml"
    path.write_text(f"family: cfg\ngrammar: {grammar}\n")
    return load_config(path, CORPUS + list(extra), schemas())


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cfg_corpus")
    config = _cfg_config(directory)
    manifest = generate_corpus(config, directory / "one", workers=1, progress=False, log=_quiet)
    return config, directory / "one", manifest


def _documents(out, manifest):
    """(json, ids) of every training document, in stream order."""
    documents = []
    for shard in manifest["shards"]:
        with tarfile.open(out / shard["name"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        for key in sorted({name.split(".")[0] for name in members}):
            documents.append((json.loads(members[f"{key}.json"]),
                              np.load(io.BytesIO(members[f"{key}.ids.npy"]))))
    return documents


def _files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".progress" not in p.parts and p.name != "datasheet.md"
            and not p.name.startswith(".")}


def test_the_corpus_holds_grammar_json_listed_and_verified(corpus, tmp_path):
    config, out, manifest = corpus
    grammar = config.load_grammar()
    assert (out / "grammar.json").read_text() == grammar.to_json()
    assert load_grammar(str(out / "grammar.json")) == grammar
    assert "grammar.json" in [entry["name"] for entry in manifest_entries(manifest)]
    assert manifest["summary"] == {"samples": 70, "eval_samples": 30, "depth": 6, "terminals": 3}
    assert verify_corpus(out) == []
    copy = tmp_path / "copy"
    for name, data in _files(out).items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(data)
    assert verify_corpus(copy) == []
    (copy / "grammar.json").write_text(load_grammar("cfg3f").to_json())
    assert verify_corpus(copy) == [f"{copy / 'grammar.json'}: sha256 mismatch (corrupt or "
                                   "modified)"]
    (copy / "grammar.json").unlink()
    assert verify_corpus(copy) == [f"{copy / 'grammar.json'}: missing"]


def test_documents_are_bos_then_one_token_per_terminal(corpus):
    config, out, manifest = corpus
    grammar = config.load_grammar()
    tokenizer = Tokenizer.load(out / "tokenizer.model")
    bos, *words = (tokenizer.encode(word) for word in [BOS, "1", "2", "3"])
    assert all(len(ids) == 1 for ids in [bos, *words])
    word_ids = np.array([ids[0] for ids in words])
    documents = _documents(out, manifest)
    assert len(documents) == manifest["records"] == 70
    assert sum(len(ids) for _, ids in documents) == manifest["tokens"]
    for doc, ids in documents:
        terminals = replay(grammar, [doc["rules"]], labels=False).string(0)
        assert doc["text"] == " ".join([BOS, *(str(t + 1) for t in terminals)])
        assert len(ids) == len(terminals) + 1
        assert ids[0] == bos[0]
        assert ids[1:].tolist() == word_ids[terminals].tolist()
        assert tokenizer.decode(ids.tolist()) == doc["text"]


def test_the_corpus_is_byte_identical_with_one_and_two_workers(corpus, tmp_path):
    config, out, _ = corpus
    generate_corpus(config, tmp_path / "two", workers=2, progress=False, log=_quiet)
    one, two = _files(out), _files(tmp_path / "two")
    assert len([name for name in one if name.startswith("train/")]) == 3
    assert one == two


def test_eval_strings_are_held_out_from_the_first_training_strings(corpus):
    config, out, manifest = corpus
    grammar = config.load_grammar()
    rows = [json.loads(line) for line in (out / "eval/cfg_test.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == list(range(30))
    train = {tuple(replay(grammar, [doc["rules"]], labels=False).string(0).tolist())
             for doc, _ in _documents(out, manifest)}
    held_out = set()
    for row in rows:
        terminals = replay(grammar, [row["rules"]], labels=False).string(0).tolist()
        assert row["terminals"] == terminals
        assert row["text"] == " ".join([BOS, *(str(t + 1) for t in terminals)])
        held_out.add(tuple(terminals))
    assert len(held_out) == 30 and len(train) == 70
    assert not held_out & train


def test_a_random_grammar_makes_a_corpus_with_its_grammar_json(tmp_path):
    config = _cfg_config(tmp_path, "random", ["seed=1", "random.sizes=[1,2,3,2]",
                                               "random.seed=4"])
    manifest = generate_corpus(config, tmp_path / "r", progress=False, log=_quiet)
    grammar = config.load_grammar()
    assert load_grammar(str(tmp_path / "r" / "grammar.json")) == grammar
    assert manifest["summary"]["depth"] == 3 and manifest["summary"]["terminals"] == 2
    documents = _documents(tmp_path / "r", manifest)
    for doc, ids in documents:
        terminals = replay(grammar, [doc["rules"]], labels=False).string(0)
        assert len(ids) == len(terminals) + 1


def test_rerunning_gen_keeps_a_finished_corpus_and_repairs_grammar_json(tmp_path):
    config = _cfg_config(tmp_path)
    out = tmp_path / "c"
    generate_corpus(config, out, progress=False, log=_quiet)
    before = _files(out)
    generate_corpus(config, out, progress=False, log=_quiet)
    assert _files(out) == before
    (out / "grammar.json").write_text("{}\n")
    assert verify_corpus(out) != []
    generate_corpus(config, out, progress=False, log=_quiet)
    assert verify_corpus(out) == [] and _files(out) == before


def test_editing_a_grammar_file_makes_another_corpus(tmp_path):
    """The config names the file; its content enters the fingerprint, so gen never keeps shards
    of the old grammar beside the new grammar.json."""
    path = tmp_path / "g.json"
    path.write_text(load_grammar("cfg3b").to_json())
    config = _cfg_config(tmp_path, str(path))
    before = corpus_fingerprint(config)
    generate_corpus(config, tmp_path / "c", progress=False, log=_quiet)
    path.write_text(load_grammar("cfg3i").to_json())
    os.utime(path, ns=(1, 1))  # a new stamp even on a coarse clock
    assert corpus_fingerprint(config) != before
    with pytest.raises(CorpusError, match="another config"):
        generate_corpus(config, tmp_path / "c", progress=False, log=_quiet)
