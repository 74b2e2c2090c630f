"""A family with a fixed vocabulary plugs in by its registration alone: its corpus has vocab.json
instead of a SentencePiece model, each token name stored as its index, loss masks as declared,
the same bytes however it is written, and it verifies, loads and trains like any corpus."""

import dataclasses
import hashlib
import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core import registry as families
from corpus_gen.core.config import CorpusConfig, corpus_config
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.generate import generate_corpus, parse_part
from corpus_gen.core.records import Record, Units
from corpus_gen.core.registry import Family, Layout
from corpus_gen.core.shards import read_shard
from corpus_gen.core.verify import verify_corpus
from corpus_gen.core.vocabulary import Vocabulary
from trainer.data import IGNORE_INDEX, DataOptions, PackedBatches

# the end of document first; "junk" is in the vocabulary but never written
NAMES = ("<eos>", "Q", "A", *map(str, range(10)), "+", "=", "junk")


@dataclasses.dataclass
class SumConfig(CorpusConfig):
    items: int = 50
    word: str = ""  # a word written into document 3 (to test one that is no name)


def _question(n: int) -> str:
    return f"Q {n % 10} + {n * 7 % 10} ="


def _records(config: SumConfig, start: int, stop: int):
    """Document n: "Q a + b = A s1 s2": the question is masked out of the loss."""
    for n in range(start, stop):
        question = _question(n)
        total = n % 10 + n * 7 % 10
        answer = " ".join(["A", *str(total)] + ([config.word] if n == 3 and config.word else []))
        yield Record(f"{question} {answer}", {"n": n, "sum": total}, ((0, len(question)),))


def _eval_sets(config: SumConfig):
    return {"sum_test": lambda: ({"id": n, "question": _question(n)}
                                 for n in range(config.items, config.items + 5))}


def _layout(config: SumConfig) -> Layout:
    return Layout(records=config.items)


def _vocabulary(config: SumConfig) -> tuple[str, ...]:
    return NAMES


SUMMING = Family("summing", 1, SumConfig, _layout, _records, _eval_sets,
                 vocabulary=_vocabulary)
if multiprocessing.parent_process() is not None:
    # a spawned gen worker imports this module to unpickle its job's config: the family is
    # registered there as the fixture registers it in the test's process
    families.register(SUMMING)


@pytest.fixture
def summing(monkeypatch):
    """The toy family, registered as a plug-in module would register it."""
    monkeypatch.setattr(families, "_FAMILIES", dict(families.families()))
    families.register(SUMMING)


def _config(*overrides: str) -> SumConfig:
    from omegaconf import OmegaConf

    given = OmegaConf.from_dotlist(["family=summing", "records_per_shard=20", *overrides])
    return corpus_config([(given, "test")], families.schemas())


def _gen(config, out: Path, workers: int = 1, part: str | None = None):
    return generate_corpus(config, out, workers=workers, progress=False, log=lambda *_: None,
                           part=None if part is None else parse_part(part))


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "datasheet.md"}


def test_each_name_is_stored_as_its_index_and_masked_spans_leave_the_loss(summing, tmp_path):
    out = tmp_path / "corpus"
    manifest = _gen(_config(), out)
    vocab = (out / "vocab.json").read_bytes()
    assert manifest["tokenizer"] == {
        "name": "vocab.json", "fingerprint": manifest["fingerprint"],
        "sha256": hashlib.sha256(vocab).hexdigest(), "vocab_size": 16, "dtype": "<u2",
        "eos_id": 0}
    assert not (out / "tokenizer.model").exists()
    assert [s["records"] for s in manifest["shards"]] == [20, 20, 10]
    samples = [s for shard in manifest["shards"] for s in read_shard(out / shard["name"])]
    assert len(samples) == 50
    for sample in samples:
        words = sample["json"]["text"].split(" ")
        assert sample["ids"].tolist() == [NAMES.index(w) for w in words]
        assert sample["mask"].tolist() == [0] * 5 + [1] * (len(words) - 5)  # "Q a + b ="
    assert samples[9]["ids"].tolist() == [1, 12, 13, 6, 14, 2, 4, 5]  # Q 9 + 3 = A 1 2
    assert manifest["tokens"] == sum(len(s["ids"]) for s in samples)
    assert (out / "eval" / "sum_test.jsonl").read_text().count("\n") == 5


def test_vocab_json_is_the_names_by_id_and_loads_back_as_the_tokenizer(summing, tmp_path):
    out = tmp_path / "corpus"
    manifest = _gen(_config(), out)
    assert json.loads((out / "vocab.json").read_text()) == {str(i): n for i, n in
                                                             enumerate(NAMES)}
    tokenizer = load_tokenizer(out, manifest)
    assert isinstance(tokenizer, Vocabulary) and tokenizer.names == NAMES
    assert (tokenizer.vocab_size, tokenizer.eos_id, tokenizer.dtype) == (16, 0, "<u2")
    assert tokenizer.model_bytes == (out / "vocab.json").read_bytes()
    assert tokenizer.encode("Q 4 + 5 =") == [1, 7, 13, 8, 14]
    assert tokenizer.decode([1, 7, 13, 8, 14, 0]) == "Q 4 + 5 = <eos>"
    assert (tokenizer.token_id("="), tokenizer.token_id("<eos>"), tokenizer.token_id("x")) == (
        14, 0, None)
    # documents spelled in text units (a family's `batches`) gather the same ids
    units = Units(["Q", "4 +", "5 =", "A"])
    ids, counts = tokenizer.encode_units(units, np.array([0, 1, 2, 3, 1]))
    assert ids.tolist() == [1, 7, 13, 8, 14, 2, 7, 13] and counts.tolist() == [1, 2, 2, 1, 2]
    sheet = (out / "datasheet.md").read_text()
    assert "| 16 (fixed: vocab.json)" in sheet


def test_workers_and_parts_write_the_same_bytes_as_one_worker(summing, tmp_path):
    config = _config()
    _gen(config, tmp_path / "one")
    _gen(config, tmp_path / "two", workers=2)
    parts = tmp_path / "parts"
    for part in ("prepare", "shards:2-3", "shards:0-2"):
        assert _gen(config, parts, part=part) is None
    _gen(config, parts)
    one = _files(tmp_path / "one")
    assert "vocab.json" in one and len([n for n in one if n.startswith("train/")]) == 3
    assert _files(tmp_path / "two") == one
    assert _files(parts) == one


def test_verify_passes_and_names_a_damaged_vocabulary(summing, tmp_path):
    out = tmp_path / "corpus"
    manifest = _gen(_config(), out)
    assert verify_corpus(out) == []
    path = out / "vocab.json"
    path.write_text(path.read_text().replace('"junk"', '"jank"'))
    assert verify_corpus(out) == [f"{path}: sha256 mismatch (corrupt or modified)"]
    with pytest.raises(CorpusError, match="vocab.json: missing or not the tokenizer"):
        load_tokenizer(out, manifest)
    # a rerun repairs it
    _gen(_config(), out)
    assert verify_corpus(out) == [] and Vocabulary.load(path).names == NAMES


@pytest.mark.parametrize("word, message", [
    ("seven", "a document holds 'seven', which is not a token name of the vocabulary"),
    ("<eos>", "a document holds the end-of-document token '<eos>'"),
])
def test_a_word_that_is_no_token_name_is_refused_by_name(summing, tmp_path, word, message):
    with pytest.raises(CorpusError, match=message):
        _gen(_config(f"word={word}"), tmp_path / "corpus")


@pytest.mark.parametrize("names, message", [
    (("Q", "A"), "no end-of-document token '<eos>'"),
    (("<eos>", "Q", "Q"), "token name 'Q' is listed twice"),
    (("<eos>", "Q A"), "token name 'Q A' is not a non-empty string without whitespace"),
    (("<eos>", ""), "token name '' is not"),
])
def test_a_vocabulary_that_cannot_spell_documents_is_refused(names, message):
    with pytest.raises(CorpusError, match=f"family toy: {message}"):
        Vocabulary(names, "family toy")


@pytest.mark.parametrize("override, key", [
    ("tokenizer.vocab_size=300", "tokenizer.vocab_size"),
    ("tokenizer.sample_records=10", "tokenizer.sample_records"),
    ("tokenizer.reuse=/some/corpus", "tokenizer.reuse"),
])
def test_sentencepiece_options_are_refused_for_a_fixed_vocabulary(summing, tmp_path, override,
                                                                  key):
    with pytest.raises(ConfigError, match="has a fixed vocabulary") as err:
        _gen(_config(override), tmp_path / "corpus")
    assert err.value.key == key
    assert not (tmp_path / "corpus").exists()


def test_the_trainer_packs_its_documents_with_the_vocabulary_eos(summing, tmp_path):
    out = tmp_path / "corpus"
    _gen(_config(), out)
    data = PackedBatches(out, DataOptions(ctx=16, micro_batch=2, split_documents=False,
                                          shuffle_shards=False))
    assert (data.vocab_size, data.eos_id) == (16, 0)
    batch = next(iter(data))
    first = [1, 3, 13, 3, 14, 2, 3]  # document 0: Q 0 + 0 = A 0
    assert batch["input_ids"][0, :8].tolist() == first + [0]
    # the question's tokens are no labels; the answer's and the EOS after it are
    assert batch["labels"][0, :7].tolist() == [IGNORE_INDEX] * 4 + [2, 3, 0]
