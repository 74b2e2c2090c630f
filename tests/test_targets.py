"""Per-position targets (`UnitBatch.targets`, for tasks whose label at a position is not the next
token: k-hop induction) go from a family's batches to the shards' `targets.npy` and into the
trainer's labels: position p's label is its own target where its loss flag counts, an EOS
predicts nothing, for packed and whole-document windows and multi-document samples alike."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core import registry as families
from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import UnitBatch, Units, batch_records
from corpus_gen.core.registry import Family, Layout
from corpus_gen.core.shards import read_shard
from corpus_gen.core.vocabulary import Vocabulary
from corpus_gen.core.write import _documents
from trainer.data import IGNORE_INDEX, DataOptions, PackedBatches

LETTERS = ("a", "b", "c", "d", "e")
UNITS = Units(LETTERS)


@dataclasses.dataclass
class MirrorConfig(CorpusConfig):
    family: str = "mirror"
    samples: int = 60


def _document(position: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document `position`: 3-12 letters (unit ids), each position's target the letter at the
    mirrored position (not the next one), every position counted but the first."""
    rng = np.random.default_rng(position)
    ids = rng.integers(0, len(LETTERS), rng.integers(3, 13))
    loss = np.ones(len(ids), np.uint8)
    loss[0] = 0
    return ids, ids[::-1].copy(), loss


def _batches(config: MirrorConfig, start: int, stop: int):
    docs = [_document(p) for p in range(start, stop)]
    offsets = np.concatenate([[0], np.cumsum([len(ids) for ids, _, _ in docs])])
    yield UnitBatch(UNITS, np.concatenate([d[0] for d in docs]), offsets,
                    [f'{{"n":{p}}}' for p in range(start, stop)],
                    np.concatenate([d[2] for d in docs]), np.concatenate([d[1] for d in docs]))


def _records(config: MirrorConfig, start: int, stop: int):
    for batch in _batches(config, start, stop):
        yield from batch_records(batch)


MIRROR = Family("mirror", 1, MirrorConfig, lambda c: Layout(records=c.samples), _records,
                lambda c: {}, batches=_batches, vocabulary=lambda c: (*LETTERS, "<eos>"))


@pytest.fixture
def mirror(monkeypatch):
    monkeypatch.setattr(families, "_FAMILIES", dict(families.families()))
    families.register(MIRROR)


def _corpus(tmp_path: Path, per_sample: int, compiled: bool = False) -> Path:
    if compiled:
        families.register(dataclasses.replace(MIRROR, compiled=True))
    out = tmp_path / f"mirror-{per_sample}-{compiled}"
    config = MirrorConfig(records_per_shard=25, docs_per_sample=per_sample)
    generate_corpus(config, out, 1, progress=False, log=lambda *_: None)
    return out


@pytest.mark.parametrize("per_sample", [1, 4])
def test_shards_hold_each_documents_targets_beside_its_ids(mirror, tmp_path, per_sample):
    out = _corpus(tmp_path, per_sample)
    documents = [doc for shard in sorted(out.glob("train/*.tar")) for doc in read_shard(shard)]
    assert len(documents) == 60
    for doc in documents:
        ids, targets, loss = _document(int(doc["__key__"]))
        assert doc["ids"].tolist() == ids.tolist()  # letter i is token i
        assert doc["targets"].tolist() == targets.tolist()
        assert doc["mask"].tolist() == loss.tolist()


def test_compiled_and_python_writers_write_the_same_targets(mirror, tmp_path):
    python, compiled = _corpus(tmp_path, 4), _corpus(tmp_path, 4, compiled=True)
    assert [p.read_bytes() for p in sorted(python.glob("train/*.tar"))] == [
        p.read_bytes() for p in sorted(compiled.glob("train/*.tar"))]


def _expected(documents: int) -> tuple[list[int], list[int]]:
    """The epoch's stream (each document, then EOS) and each position's label."""
    tokens, labels = [], []
    for p in range(documents):
        ids, targets, loss = _document(p)
        tokens += [*ids.tolist(), len(LETTERS)]
        labels += [int(t) if c else IGNORE_INDEX for t, c in zip(targets, loss)] + [IGNORE_INDEX]
    return tokens, labels


def _read(out: Path, split: bool) -> list[dict]:
    data = PackedBatches(out, DataOptions(ctx=16, micro_batch=2, shuffle_shards=False,
                                          split_documents=split))
    return [batch for batch, _ in zip(data, range(data.batches_in_epoch(0)))]


@pytest.mark.parametrize("per_sample", [1, 4])
def test_packed_windows_label_each_position_with_its_own_target(mirror, tmp_path, per_sample):
    """Windows of ctx tokens cut from the stream, read in order: their labels, end to end, are
    the stream's targets (EOS: nothing), not its next tokens."""
    batches = _read(_corpus(tmp_path, per_sample), split=True)
    tokens = [t for b in batches for row in b["input_ids"].tolist() for t in row]
    labels = [t for b in batches for row in b["labels"].tolist() for t in row]
    stream, expected = _expected(60)
    assert len(tokens) > 0.8 * len(stream)
    assert tokens == stream[:len(tokens)] and labels == expected[:len(labels)]


@pytest.mark.parametrize("per_sample", [1, 4])
def test_whole_document_windows_label_each_position_with_its_own_target(mirror, tmp_path,
                                                                         per_sample):
    """Whole documents packed into windows, padded with EOS: each document's labels are its
    targets, its EOS and the padding count nothing."""
    stream, expected = _expected(60)
    read_tokens, read_labels = [], []
    for batch in _read(_corpus(tmp_path, per_sample), split=False):
        for tokens, labels in zip(batch["input_ids"].tolist(), batch["labels"].tolist()):
            # a window's documents and their EOS, then EOS padding; in a full window the last
            # EOS is the window's (ctx + 1)-th token, no input, and predicts nothing anyway
            end = max(i for i, t in enumerate(tokens) if t != len(LETTERS)) + 2
            full = end > len(tokens)
            read_tokens += tokens[:end] + [len(LETTERS)] * full
            read_labels += labels[:end] + [IGNORE_INDEX] * full
            assert set(labels[end:]) <= {IGNORE_INDEX}
    assert len(read_tokens) > 0.8 * len(stream)
    assert read_tokens == stream[:len(read_tokens)] and read_labels == expected[:len(read_labels)]


def test_targets_need_one_token_per_unit():
    vocabulary = Vocabulary(("<eos>", "a", "b"), "test")
    batch = UnitBatch(Units(["a b", "b"]), np.array([0, 1]), np.array([0, 2]), ['{"n":0}'],
                      None, np.array([1, 1]))
    with pytest.raises(CorpusError, match="one token"):
        _documents(vocabulary, batch, compiled=False)
