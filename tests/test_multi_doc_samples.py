"""Several documents per tar sample (`docs_per_sample`): the member layout, and every reader's
per-document view equal to that of the same corpus written a document per sample."""

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core.config import config_dict, fingerprint, load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus, parse_part
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.registry import schemas
from corpus_gen.core.shards import ShardWriter, npy_bytes, read_shard
from launch.cli import main
from trainer.data import DataOptions, PackedBatches

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "corpus"
# mano: unit batches with a loss mask; igsm: record documents (some kept from the tokenizer
# sample), masked retries beside unmasked documents; bios: unit batches, every token counts
CORPORA = {
    "mano": ("mano.yaml", ["samples=100", "records_per_shard=30", "eval_samples=3"]),
    "igsm": ("igsm_hard_qp.yaml", ["problems=40", "eval_problems=4", "records_per_shard=15",
                                   "retry_rate=0.5", "retry_kind=fake", "retry_mask=true",
                                   "tokenizer.vocab_size=400", "tokenizer.sample_records=20"]),
    "bios": ("bios_s_single.yaml", ["people=60", "records_per_shard=25",
                                    "tokenizer.vocab_size=400", "tokenizer.sample_records=30"]),
}


def _generate(out: Path, name: str, per_sample: int, *more: str, workers: int = 1,
              part: str | None = None) -> Path:
    file, overrides = CORPORA[name]
    config = load_config(CONFIGS / file, [*overrides, f"docs_per_sample={per_sample}", *more],
                         schemas())
    generate_corpus(config, out, workers, progress=False, log=lambda *_: None,
                    part=parse_part(part) if part else None)
    return out


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each corpus written a document per sample and 7 per sample."""
    root = tmp_path_factory.mktemp("pairs")
    return {name: (_generate(root / f"{name}-1", name, 1), _generate(root / f"{name}-7", name, 7))
            for name in CORPORA}


def _members(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def _shards(corpus: Path) -> list[str]:
    return [entry["name"] for entry in read_manifest(corpus)["shards"]]


def test_a_sample_holds_consecutive_documents_of_its_shard_and_the_last_the_remainder(pairs):
    single, multi = pairs["mano"]
    # 100 documents in shards of 30: samples of 7, the last of each shard the remainder
    firsts = {name: sorted({n.split(".")[0] for n, _ in _members(multi / name)})
              for name in _shards(multi)}
    assert firsts == {f"train/shard-{i:06d}.tar": [f"{s:010d}" for s in range(30 * i, stop, 7)]
                      for i, stop in enumerate([30, 60, 90, 100])}
    members = _members(multi / "train/shard-000003.tar")
    assert [name for name, _ in members] == [
        f"{key}.{ext}" for key in ("0000000090", "0000000097")
        for ext in ("ids.npy", "json", "lengths.npy", "mask.npy")]
    ones = dict(_members(single / "train/shard-000003.tar"))
    sample = dict(members)
    docs = [f"{p:010d}" for p in range(97, 100)]
    # json: the documents' objects, byte for byte as a sample of one holds them, in a JSON array
    assert sample["0000000097.json"] == b"[" + b",".join(ones[f"{d}.json"] for d in docs) + b"]"
    for ext in ("ids", "mask"):
        np.testing.assert_array_equal(
            np.load(io.BytesIO(sample[f"0000000097.{ext}.npy"])),
            np.concatenate([np.load(io.BytesIO(ones[f"{d}.{ext}.npy"])) for d in docs]))
    lengths = np.load(io.BytesIO(sample["0000000097.lengths.npy"]))
    assert lengths.dtype == np.uint32
    assert lengths.tolist() == [len(np.load(io.BytesIO(ones[f"{d}.ids.npy"]))) for d in docs]


@pytest.mark.parametrize("name", CORPORA)
def test_read_shard_yields_the_documents_a_sample_per_document_holds(pairs, name):
    single, multi = pairs[name]
    assert _shards(single) == _shards(multi)
    ones = [d for shard in _shards(single) for d in read_shard(single / shard)]
    docs = [d for shard in _shards(multi) for d in read_shard(multi / shard)]
    assert [d["__key__"] for d in docs] == [f"{p:010d}" for p in range(len(ones))]
    for one, doc in zip(ones, docs, strict=True):
        assert doc["json"] == one["json"] and doc["__key__"] == one["__key__"]
        for key in ("ids", "mask"):
            assert doc[key].dtype == one[key].dtype
            np.testing.assert_array_equal(doc[key], one[key])
    if name == "igsm":  # the masked documents were there to compare
        assert 0 < sum(d["mask"].min() == 0 for d in docs) < len(docs)


@pytest.mark.parametrize("name", CORPORA)
def test_the_manifest_and_datasheet_count_documents(pairs, name):
    single, multi = (read_manifest(corpus) for corpus in pairs[name])
    assert multi["fingerprint"] != single["fingerprint"]  # the bytes differ
    assert multi["config"]["docs_per_sample"] == 7
    for key in ("records", "tokens"):
        assert multi[key] == single[key]
    counts = ("records", "tokens", "min_tokens", "max_tokens", "start", "stop", "name")
    assert ([{k: s[k] for k in counts} for s in multi["shards"]]
            == [{k: s[k] for k in counts} for s in single["shards"]])
    single_sheet, multi_sheet = map(_datasheet, pairs[name])
    for row in ("documents", "tokens", "document length (tokens) mean / min / max",
                "documents generated this run"):
        assert multi_sheet[row] == single_sheet[row]
    assert multi_sheet["documents per tar sample"] == "up to 7"
    assert "documents per tar sample" not in single_sheet


def _datasheet(corpus: Path) -> dict[str, str]:
    rows = (row.split("|")[1:3] for row in (corpus / "datasheet.md").read_text().splitlines()
            if row.startswith("| "))
    return {key.strip(): value.strip() for key, value in rows}


def _batches(corpus: Path, options: DataOptions, count: int, rank: int = 0, world: int = 1,
             state: dict | None = None) -> list[dict]:
    loader = PackedBatches(corpus, options, rank, world)
    if state:
        loader.load_state_dict(state)
    batches = iter(loader)
    return [next(batches) for _ in range(count)]


def _equal(a: list[dict], b: list[dict]) -> bool:
    return all(x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("name", ["mano", "igsm"])
@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("world", [1, 2, 5])
def test_packed_batches_are_those_of_the_corpus_written_a_document_per_sample(pairs, name,
                                                                               split, world):
    single, multi = pairs[name]
    ctx = 64 if name == "mano" else 2200  # igsm documents reach ~2,000 tokens
    options = DataOptions(ctx=ctx, micro_batch=2, seed=3, split_documents=split)
    epochs = PackedBatches(single, options, 0, world)
    count = epochs.batches_in_epoch(0) + epochs.batches_in_epoch(1) + 1  # into a third epoch
    for rank in range(world):
        ones = _batches(single, options, count, rank, world)
        assert _equal(_batches(multi, options, count, rank, world), ones)
        # resumed from the state after a few batches: the batches an uninterrupted run yields
        loader = PackedBatches(multi, options, rank, world)
        batches = iter(loader)
        for _ in range(count // 2):
            next(batches)
        state = json.loads(json.dumps(loader.state_dict()))
        assert _equal(_batches(multi, options, count - count // 2, rank, world, state),
                      ones[count // 2 :])


def _digests(corpus: Path) -> dict[str, str]:
    return {entry["name"]: entry["sha256"] for entry in read_manifest(corpus)["shards"]}


def test_any_worker_count_parts_and_a_resumed_run_write_the_same_bytes(pairs, tmp_path):
    digests = _digests(pairs["mano"][1])
    two = _generate(tmp_path / "two", "mano", 7, workers=2)
    assert _digests(two) == digests
    (two / "train/shard-000002.tar").unlink()
    _generate(two, "mano", 7)
    assert hashlib.sha256((two / "train/shard-000002.tar").read_bytes()).hexdigest() == \
        digests["train/shard-000002.tar"]
    for part in ("prepare", "shards:2-4", "shards:0-2"):
        _generate(tmp_path / "parts", "mano", 7, part=part)
    assert _digests(_generate(tmp_path / "parts", "mano", 7)) == digests


def test_a_sample_may_hold_documents_of_several_generation_batches(pairs, tmp_path):
    # 600 documents per sample: each takes documents of two or three of mano's batches of 512
    more = ["samples=1300", "records_per_shard=1250"]
    ones = _generate(tmp_path / "one", "mano", 1, *more)
    big = _generate(tmp_path / "big", "mano", 600, *more)
    keys = [[n for n, _ in _members(big / name) if n.endswith(".json")] for name in _shards(big)]
    assert keys == [["0000000000.json", "0000000600.json", "0000001200.json"],
                    ["0000001250.json"]]
    for name in _shards(big):
        for one, doc in zip(read_shard(ones / name), read_shard(big / name), strict=True):
            assert doc["__key__"] == one["__key__"] and doc["json"] == one["json"]
            np.testing.assert_array_equal(doc["ids"], one["ids"])
            np.testing.assert_array_equal(doc["mask"], one["mask"])


def test_a_document_per_sample_keeps_the_fingerprint_of_corpora_written_before_the_key():
    config = load_config(CONFIGS / "mano.yaml", ["docs_per_sample=1"], schemas())
    before = dict(config_dict(config))
    del before["docs_per_sample"]  # what fingerprint() hashed before the key existed
    payload = json.dumps({"config": before, "version": "v"}, sort_keys=True)
    assert fingerprint(config, "v") == hashlib.sha256(payload.encode()).hexdigest()[:16]
    config.docs_per_sample = 2
    assert fingerprint(config, "v") != hashlib.sha256(payload.encode()).hexdigest()[:16]


@pytest.mark.parametrize("value", ["0", "-3"])
def test_docs_per_sample_below_one_is_refused_in_one_line(value, tmp_path, capsys):
    assert main(["gen", str(CONFIGS / "mano.yaml"), f"docs_per_sample={value}", "--out",
                 str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err == (f"physlm gen: error: command line: docs_per_sample="
                                       f"{value}: >= 1\n")
    assert not (tmp_path / "c").exists()


def _shard_with_lengths(path: Path, lengths: list[int], tokens: int) -> Path:
    with open(path, "wb") as f:
        writer = ShardWriter(f)
        ids = np.arange(tokens, dtype="<u2")
        writer.write("0000000000", {
            "json": json.dumps([{"text": "x"}] * len(lengths)).encode(),
            "ids.npy": npy_bytes(ids.tobytes(), "<u2", tokens),
            "mask.npy": npy_bytes(b"\x01" * tokens, "|u1", tokens),
            "lengths.npy": npy_bytes(np.array(lengths, "<u4").tobytes(), "<u4", len(lengths))})
        writer.close()
    return path


def test_lengths_that_do_not_add_up_to_the_sample_are_refused_naming_it(tmp_path):
    from trainer.data import _Shard

    good = _shard_with_lengths(tmp_path / "good.tar", [3, 1, 2], 6)
    shard = _Shard.open(good, np.dtype("<u2"), 100)
    assert shard.keys == ["0000000000", "0000000001", "0000000002"]
    assert shard.lengths.tolist() == [3, 1, 2]
    assert [d["ids"].tolist() for d in read_shard(good)] == [[0, 1, 2], [3], [4, 5]]
    bad = _shard_with_lengths(tmp_path / "bad.tar", [3, 1, 3], 6)
    with pytest.raises(CorpusError, match=r"bad.tar: sample 0000000000: lengths.npy adds up to "
                                          r"7 tokens, ids.npy holds 6"):
        _Shard.open(bad, np.dtype("<u2"), 100)
    with pytest.raises(CorpusError, match=r"bad.tar: sample 0000000000: its json, ids.npy"):
        list(read_shard(bad))
