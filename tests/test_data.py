"""Packed batches: the exact token stream, loss masks, segments, rank splits and exact resume."""

import hashlib
import json
import shutil
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.shards import read_npy_header, read_shard, tar_members
from trainer.data import IGNORE_INDEX, DataOptions, PackedBatches

LEGACY_STATE = (Path(__file__).resolve().parent
                / "golden/legacy_run/checkpoints/step-000004/data-rank0.json")


def _corpus(root: Path, **overrides) -> Path:
    config_file = root / "bios.yaml"
    config_file.write_text("family: bios\n")
    items = {"tokenizer.vocab_size": 1000, "tokenizer.sample_records": 500, **overrides}
    config = load_config(config_file, [f"{k}={v}" for k, v in items.items()], schemas())
    generate_corpus(config, root / "corpus", progress=False, log=lambda *_: None)
    return root / "corpus"


@pytest.fixture(scope="module")
def bios(tmp_path_factory) -> Path:
    """100 biographies in 5 shards of 20; every token counts."""
    return _corpus(tmp_path_factory.mktemp("bios"), people=100, records_per_shard=20)


@pytest.fixture(scope="module")
def mix(tmp_path_factory) -> Path:
    """120 biographies and 60 QA documents whose questions do not count, in 6 shards of 30."""
    return _corpus(tmp_path_factory.mktemp("mix"), people=120, records_per_shard=30, mode="mix",
                   qa_loss="answer")


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory) -> Path:
    """60 biographies in a single shard."""
    return _corpus(tmp_path_factory.mktemp("one"), people=60)


def _documents(corpus: Path, names: list[str]) -> list[dict]:
    """The documents of the named shards, in order, read back with webdataset."""
    return [sample for name in names for sample in read_shard(corpus / name)]


def _stream(documents: list[dict], eos: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and loss mask of the documents, each followed by an EOS that counts."""
    tokens = np.concatenate([np.append(d["ids"], eos) for d in documents]).astype(np.int64)
    mask = np.concatenate([np.append(d["mask"], 1) for d in documents])
    return tokens, mask


def _rows(batches: list[dict], key: str) -> np.ndarray:
    """One row per window, in the order the windows were yielded."""
    return torch.cat([b[key] for b in batches]).numpy()


def _assert_same(left: list[dict], right: list[dict]) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_windows_cut_the_document_stream_in_manifest_order(bios):
    data = PackedBatches(bios, DataOptions(ctx=64, micro_batch=2, shuffle_shards=False))
    names = data.epoch_shards(0)
    assert names == [f"train/shard-{i:06d}.tar" for i in range(5)]
    tokens, _ = _stream(_documents(bios, names), data.eos_id)
    assert data.tokens_per_epoch == len(tokens)
    batches = data.batches_in_epoch(0)
    assert batches == (len(tokens) - 1) // 64 // 2
    out = list(islice(data, batches))
    assert out[0]["input_ids"].shape == (2, 64) and out[0]["input_ids"].dtype == torch.int64
    inputs, labels = _rows(out, "input_ids"), _rows(out, "labels")
    # windows overlap by one token: the inputs, then the last label, are the stream itself
    rebuilt = np.append(inputs.reshape(-1), labels[-1, -1])
    np.testing.assert_array_equal(rebuilt, tokens[: 2 * batches * 64 + 1])
    np.testing.assert_array_equal(labels[:, :-1], inputs[:, 1:])


def test_labels_count_exactly_where_the_next_token_is_in_the_loss(mix):
    data = PackedBatches(mix, DataOptions(ctx=64, micro_batch=2, shuffle_shards=False))
    tokens, mask = _stream(_documents(mix, data.epoch_shards(0)), data.eos_id)
    labels = _rows(list(islice(data, data.batches_in_epoch(0))), "labels")
    covered = slice(1, len(labels) * 64 + 1)
    expected = np.where(mask[covered] == 1, tokens[covered], IGNORE_INDEX).reshape(-1, 64)
    np.testing.assert_array_equal(labels, expected)
    ignored = int((mask[covered] == 0).sum())
    assert ignored > 1000  # the QA questions
    assert int((labels == IGNORE_INDEX).sum()) == ignored
    assert int((labels == data.eos_id).sum()) == int((tokens[covered] == data.eos_id).sum())


def test_positions_restart_and_doc_ids_step_after_each_eos(bios):
    data = PackedBatches(bios, DataOptions(ctx=128, micro_batch=2, shuffle_shards=False))
    out = list(islice(data, 20))
    inputs, positions, doc_ids = (_rows(out, k) for k in ("input_ids", "position_ids", "doc_ids"))
    first_length = len(_documents(bios, data.epoch_shards(0)[:1])[0]["ids"])
    assert first_length < 127  # the first window holds the first document's EOS at this index
    assert doc_ids[0, first_length] == 0 and doc_ids[0, first_length + 1] == 1
    assert positions[0, first_length] == first_length and positions[0, first_length + 1] == 0
    for row, pos, ids in zip(inputs, positions, doc_ids):
        after_eos = np.concatenate([[True], row[:-1] == data.eos_id])  # segment starts
        np.testing.assert_array_equal(ids, np.cumsum(after_eos) - 1)
        starts = np.maximum.accumulate(np.where(after_eos, np.arange(128), 0))
        np.testing.assert_array_equal(pos, np.arange(128) - starts)
    plain = PackedBatches(bios, DataOptions(ctx=128, micro_batch=2, shuffle_shards=False,
                                            doc_mask=False, restart_positions=False))
    first = next(iter(plain))
    assert torch.equal(first["input_ids"], out[0]["input_ids"])
    assert torch.equal(first["labels"], out[0]["labels"])
    assert torch.equal(first["position_ids"], torch.arange(128).expand(2, 128))
    assert int(first["doc_ids"].abs().sum()) == 0


def test_whole_documents_are_packed_greedily_and_padded_with_ignored_eos(mix):
    ctx = 256
    data = PackedBatches(mix, DataOptions(ctx=ctx, micro_batch=2, split_documents=False,
                                          shuffle_shards=False))
    eos = data.eos_id
    expected = []  # greedy, in order, restarting at every shard
    for name in data.epoch_shards(0):
        window: list[int] = []
        for document in _documents(mix, [name]):
            tokens = [*document["ids"].tolist(), eos]
            if len(window) + len(tokens) > ctx + 1:
                expected.append(window)
                window = []
            window += tokens
        expected.append(window)
    assert len(expected) == 118  # 180 documents of 75-183 tokens
    assert sum(w.count(eos) >= 2 for w in expected) == 62
    assert sum(len(w) == ctx + 1 for w in expected) == 1  # one window needs no padding
    assert data.batches_in_epoch(0) == len(expected) // 2
    out = list(islice(data, data.batches_in_epoch(0)))
    rows = zip(*(_rows(out, k) for k in ("input_ids", "labels", "position_ids", "doc_ids")))
    for want, (inputs, labels, positions, doc_ids) in zip(expected, rows):
        n = len(want)
        np.testing.assert_array_equal(inputs[: min(n, ctx)], want[:ctx])
        assert (inputs[n:] == eos).all() and (labels[n - 1 :] == IGNORE_INDEX).all()
        assert (doc_ids[n:] == want.count(eos)).all()  # the padding is a segment of its own
        np.testing.assert_array_equal(positions[n:], np.arange(ctx - n))


def test_document_longer_than_ctx_is_an_error_naming_it(mix):
    first = _documents(mix, ["train/shard-000000.tar"])
    too_long = next(d for d in first if len(d["ids"]) > 60)
    key, length = too_long["__key__"], len(too_long["ids"])
    with pytest.raises(CorpusError) as error:
        PackedBatches(mix, DataOptions(ctx=60, micro_batch=2, split_documents=False))
    message = str(error.value)
    assert str(mix / "train/shard-000000.tar") in message
    assert f"sample {key} has {length} tokens" in message
    assert "ctx=60" in message and "use split_documents=true or a larger ctx" in message


def test_shard_order_changes_each_epoch_and_is_reproducible_from_the_seed(mix):
    config = DataOptions(ctx=64, micro_batch=2, seed=7)
    data = PackedBatches(mix, config)
    orders = [data.epoch_shards(epoch) for epoch in range(4)]
    assert all(sorted(order) == [f"train/shard-{i:06d}.tar" for i in range(6)] for order in orders)
    assert len({tuple(order) for order in orders}) == 4
    assert [PackedBatches(mix, config).epoch_shards(e) for e in range(4)] == orders
    other = PackedBatches(mix, DataOptions(ctx=64, micro_batch=2, seed=8))
    assert other.epoch_shards(0) != orders[0]
    # iteration follows the drawn order, epoch after epoch
    epoch0 = data.batches_in_epoch(0)
    out = list(islice(data, epoch0 + 1))
    for epoch, batch in ((0, out[0]), (1, out[epoch0])):
        tokens, _ = _stream(_documents(mix, orders[epoch][:1]), data.eos_id)
        np.testing.assert_array_equal(batch["input_ids"][0].numpy(), tokens[:64])


def test_two_ranks_read_disjoint_shards_and_yield_equal_batch_counts(bios):
    config = DataOptions(ctx=64, micro_batch=2)
    ranks = [PackedBatches(bios, config, rank=r, world_size=2) for r in range(2)]
    for epoch in range(3):
        lists = [data.epoch_shards(epoch) for data in ranks]
        assert [len(names) for names in lists] == [2, 2] and not set(lists[0]) & set(lists[1])
    dropped = {next(iter({f"train/shard-{i:06d}.tar" for i in range(5)}
                         - set(ranks[0].epoch_shards(e)) - set(ranks[1].epoch_shards(e))))
               for e in range(6)}
    assert len(dropped) > 1  # the shard that sits an epoch out changes
    for epoch in range(2):
        count = ranks[0].batches_in_epoch(epoch)
        assert count == ranks[1].batches_in_epoch(epoch) > 0
        windows = []
        for data in ranks:
            assert data.state_dict()["epoch"] == epoch
            inputs = _rows(list(islice(data, count)), "input_ids")
            tokens, _ = _stream(_documents(bios, data.epoch_shards(epoch)), data.eos_id)
            np.testing.assert_array_equal(inputs.reshape(-1), tokens[: len(inputs) * 64])
            windows.append({row.tobytes() for row in inputs})
        assert len(windows[0]) == len(windows[1]) == 2 * count
        assert not windows[0] & windows[1]


def test_fewer_shards_than_ranks_deal_windows_round_robin(one_shard):
    config = DataOptions(ctx=32, micro_batch=2)
    ranks = [PackedBatches(one_shard, config, rank=r, world_size=2) for r in range(2)]
    tokens, _ = _stream(_documents(one_shard, ["train/shard-000000.tar"]), ranks[0].eos_id)
    total = (len(tokens) - 1) // 32
    count = ranks[0].batches_in_epoch(0)
    assert count == ranks[1].batches_in_epoch(0) == total // 2 // 2
    for rank, data in enumerate(ranks):
        assert data.epoch_shards(0) == ["train/shard-000000.tar"]
        inputs = _rows(list(islice(data, count)), "input_ids")
        expected = [tokens[w * 32 : w * 32 + 32] for w in range(rank, total, 2)][: 2 * count]
        np.testing.assert_array_equal(inputs, np.stack(expected))


RESUME_CASES = {
    "split": ("mix", DataOptions(ctx=64, micro_batch=2), 0, 1),
    "whole": ("mix", DataOptions(ctx=200, micro_batch=2, split_documents=False), 0, 1),
    "shard_ranks": ("bios", DataOptions(ctx=64, micro_batch=2), 1, 2),
    "window_ranks": ("one_shard", DataOptions(ctx=32, micro_batch=2), 1, 2),
}


@pytest.mark.parametrize("case", RESUME_CASES)
def test_resume_from_saved_state_yields_the_uninterrupted_batches(case, request):
    fixture, config, rank, world_size = RESUME_CASES[case]
    corpus = request.getfixturevalue(fixture)
    data = PackedBatches(corpus, config, rank, world_size)
    epoch0, epoch1 = data.batches_in_epoch(0), data.batches_in_epoch(1)
    states, batches = [data.state_dict()], []
    for batch in islice(data, epoch0 + epoch1 + 12):
        batches.append(batch)
        states.append(data.state_dict())
    assert states[epoch0]["epoch"] == 1 and states[epoch0]["batch"] == 0
    assert states[epoch0 + epoch1]["epoch"] == 2
    for cut in (0, 1, epoch0 // 2, epoch0 - 3, epoch0, epoch0 + epoch1 - 5):
        resumed = PackedBatches(corpus, config, rank, world_size)
        resumed.load_state_dict(json.loads(json.dumps(states[cut])))
        _assert_same(list(islice(resumed, 12)), batches[cut : cut + 12])
        assert resumed.state_dict() == states[cut + 12]


def test_state_is_json_and_rejects_a_run_with_other_settings(bios):
    data = PackedBatches(bios, DataOptions(ctx=64, micro_batch=2))
    list(islice(data, 3))
    state = data.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["epoch"] == 0 and state["batch"] == 3
    with pytest.raises(ValueError, match="saved with ctx=64, this run has ctx=32"):
        PackedBatches(bios, DataOptions(ctx=32, micro_batch=2)).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size=1, this run has world_size=2"):
        PackedBatches(bios, DataOptions(ctx=64, micro_batch=2), 0, 2).load_state_dict(state)


def test_a_state_saved_when_the_loader_read_the_train_config_still_loads(bios):
    """tests/golden/legacy_run's data state, saved by 445d8d3 (the loader then took the whole
    TrainConfig): same keys, and it resumes at its batch. Only the corpus is another one."""
    saved = json.loads(LEGACY_STATE.read_text())
    assert (saved["epoch"], saved["batch"], saved["ctx"], saved["micro_batch"]) == (0, 4, 32, 2)
    data = PackedBatches(bios, DataOptions(ctx=32, micro_batch=2))
    ours = {**saved, "corpus": data.state_dict()["corpus"]}
    assert data.state_dict().keys() == saved.keys()
    data.load_state_dict(ours)
    assert data.state_dict() == ours
    uninterrupted = list(islice(PackedBatches(bios, DataOptions(ctx=32, micro_batch=2)), 6))
    _assert_same(list(islice(data, 2)), uninterrupted[4:])


def test_missing_or_damaged_inputs_are_errors_naming_the_file(bios, tmp_path):
    config = DataOptions(ctx=64, micro_batch=2)
    with pytest.raises(CorpusError, match=str(tmp_path / "nowhere")):
        PackedBatches(tmp_path / "nowhere", config)
    with pytest.raises(CorpusError, match=f"^{tmp_path}: no manifest.json; not a finished"):
        PackedBatches(tmp_path, config)
    copy = tmp_path / "copy"
    shutil.copytree(bios, copy)
    shard = copy / "train/shard-000003.tar"
    shard.write_bytes(shard.read_bytes()[:5000])
    with pytest.raises(CorpusError, match=f"{shard}: sha256 differs .* run physlm verify"):
        list(islice(PackedBatches(copy, config), 10**4))  # reaches shard 3 in epoch 0
    shard.unlink()
    with pytest.raises(CorpusError, match=f"{shard}: shard listed in .* is missing"):
        PackedBatches(copy, config)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["shards"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match=f"^{copy / 'manifest.json'}: damaged manifest, no "
                                          "shards; rerun physlm gen"):
        PackedBatches(copy, config)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "shards": []}))
    with pytest.raises(CorpusError, match="holds no documents"):
        PackedBatches(copy, config)


def _first_ids_offset(shard: Path) -> int:
    """Byte offset of the first token id of the shard's first `ids.npy` member."""
    data = shard.read_bytes()
    at, _, size = next(m for m in tar_members(data) if m[1].endswith(b".ids.npy"))
    return at + read_npy_header(data[at:], "<u2", size)[0]


def _sign(copy: Path, index: int) -> None:
    """Make the manifest agree with shard `index` as it now is: only the reader's own checks can
    catch its damage."""
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = manifest["shards"][index]
    entry["sha256"] = hashlib.sha256((copy / entry["name"]).read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))


def _copy_with_first_token(corpus: Path, tmp_path: Path, shard_name: str, token: int
                           ) -> tuple[Path, Path]:
    """A copy of `corpus` whose shard's first token id is `token`: (copy, shard)."""
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    shard = copy / shard_name
    data = bytearray(shard.read_bytes())
    at = _first_ids_offset(shard)
    data[at : at + 2] = token.to_bytes(2, "little")  # uint16 ids
    shard.write_bytes(bytes(data))
    return copy, shard


def test_a_flipped_byte_in_a_token_array_stops_training_at_its_shard(bios, tmp_path):
    name = "train/shard-000002.tar"
    first = next(read_shard(bios / name))["ids"][0]
    copy, shard = _copy_with_first_token(bios, tmp_path, name, int(first) ^ 1)
    config = DataOptions(ctx=64, micro_batch=2, shuffle_shards=False)
    batches, yielded = iter(PackedBatches(copy, config)), 0
    with pytest.raises(CorpusError, match=f"^{shard}: sha256 differs from .*manifest.json's"):
        for _ in range(10**4):
            next(batches)
            yielded += 1
    # still a valid token id: only the checksum can tell, and it tells before the shard is read,
    # once the windows that shards 0 and 1 fill on their own (documents + EOS) are trained on
    before = sum(e["tokens"] + e["records"] for e in
                 json.loads((copy / "manifest.json").read_text())["shards"][:2])
    assert int(first) ^ 1 < 1000 and yielded == (before - 1) // 64 // 2 > 0


def test_a_token_id_outside_the_vocabulary_is_named_with_its_shard_and_sample(bios, tmp_path):
    name = "train/shard-000000.tar"
    copy, shard = _copy_with_first_token(bios, tmp_path, name, 65535)  # vocabulary ~1000
    _sign(copy, 0)
    key = next(read_shard(bios / name))["__key__"]
    with pytest.raises(CorpusError, match=f"^{shard}: sample {key} holds a token id >= the "
                                          "vocabulary size"):
        next(iter(PackedBatches(copy, DataOptions(ctx=64, micro_batch=2, shuffle_shards=False))))


def test_an_npy_member_of_another_layout_is_named_with_its_shard(bios, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(bios, copy)
    shard = copy / "train/shard-000000.tar"
    data = shard.read_bytes()
    shard.write_bytes(data.replace(b"'descr': '|u1'", b"'descr': '<i1'", 1))  # a mask of int8
    _sign(copy, 0)
    key = next(read_shard(bios / "train/shard-000000.tar"))["__key__"]
    with pytest.raises(CorpusError, match=rf"^{shard}: {key}\.mask\.npy is not a 1-D \|u1 npy"):
        next(iter(PackedBatches(copy, DataOptions(ctx=64, micro_batch=2, shuffle_shards=False))))


def test_a_stream_of_exactly_k_windows_of_tokens_yields_k_minus_1(bios):
    # the last window would lack its last label
    tokens = PackedBatches(bios, DataOptions(ctx=64, micro_batch=1)).tokens_per_epoch
    ctx = next((c for c in range(8, 400) if tokens % c == 0), None)
    assert ctx is not None, f"{tokens} tokens: pick a corpus whose length has a divisor"
    data = PackedBatches(bios, DataOptions(ctx=ctx, micro_batch=1, shuffle_shards=False))
    assert data.batches_in_epoch(0) == tokens // ctx - 1
    batches = list(islice(data, tokens // ctx))  # the whole epoch, then epoch 1's first
    assert data.state_dict()["epoch"] == 1 and len(batches) == tokens // ctx


def test_the_shards_left_over_by_the_ranks_are_the_last_of_the_epochs_order(bios):
    # 5 shards, 2 ranks, manifest order: rank r reads shards r and r + 2, shard 4 sits out
    options = DataOptions(ctx=64, micro_batch=2, shuffle_shards=False)
    shards = [[PackedBatches(bios, options, rank, 2).epoch_shards(epoch) for rank in range(2)]
              for epoch in range(2)]
    assert shards[0] == shards[1] == [["train/shard-000000.tar", "train/shard-000002.tar"],
                                      ["train/shard-000001.tar", "train/shard-000003.tar"]]


def test_every_rank_yields_what_the_emptiest_rank_can_fill(bios):
    options = DataOptions(ctx=16, micro_batch=1, shuffle_shards=False)
    ranks = [PackedBatches(bios, options, rank, 2) for rank in range(2)]
    own = [(int(data._stream_lengths[data._rank_shards(0)[data.rank]].sum()) - 1) // 16
           for data in ranks]
    assert own[0] != own[1]  # the premise: the two ranks' shards fill different counts
    assert [data.batches_in_epoch(0) for data in ranks] == [min(own)] * 2


def test_a_state_at_the_end_of_its_epoch_is_refused(bios):
    data = PackedBatches(bios, DataOptions(ctx=64, micro_batch=2))
    last = data.batches_in_epoch(0)
    state = {**data.state_dict(), "batch": last}
    with pytest.raises(ValueError, match=f"epoch=0 batch={last} is outside the corpus"):
        data.load_state_dict(state)
    data.load_state_dict({**state, "batch": last - 1})  # the epoch's last batch loads
