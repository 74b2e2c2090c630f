"""`train.exposures`: the steps that read each person's documents E times, counted in the data
stream itself, and the refusals."""

import json
import math
import shutil
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_experiment_file

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.shards import read_shard
from launch.cli import main
from trainer.config import load_experiment
from trainer.data import DataOptions, PackedBatches
from trainer.engine import data_options, train
from trainer.errors import TrainError
from trainer.exposures import documents_per_person, exposures_reached, steps_for
from trainer.run_dir import read_metrics


def _corpus(root: Path, **overrides) -> Path:
    (root / "bios.yaml").write_text("family: bios\n")
    items = {"tokenizer.vocab_size": 600, "tokenizer.sample_records": 300, **overrides}
    config = load_config(root / "bios.yaml", [f"{k}={v}" for k, v in items.items()], schemas())
    generate_corpus(config, root / "corpus", progress=False, log=lambda *_: None)
    return root / "corpus"


@pytest.fixture(scope="module")
def multi2(tmp_path_factory) -> Path:
    """24 people with 2 biographies each (R = 2), 48 documents in 3 shards of 16."""
    return _corpus(tmp_path_factory.mktemp("multi2"), people=24, variant="multi2",
                   records_per_shard=16)


def _manifest(corpus: Path) -> dict:
    return json.loads((corpus / "manifest.json").read_text())


def _people(corpus: Path) -> dict[tuple[int, ...], int]:
    """Each training document's tokens -> the id of the person it is about."""
    return {tuple(doc["ids"].tolist()): doc["json"]["person"]["id"]
            for shard in _manifest(corpus)["shards"] for doc in read_shard(corpus / shard["name"])}


def _whole_documents(batch: dict, eos: int) -> list[tuple[int, ...]]:
    """The documents of a batch of whole-document windows: each segment (doc_ids) holding more
    than EOS, its EOS cut off (the padding is a segment of EOS alone)."""
    found = []
    for tokens, segments in zip(batch["input_ids"].tolist(), batch["doc_ids"].tolist()):
        for segment in dict.fromkeys(segments):
            ids = [t for t, s in zip(tokens, segments) if s == segment and t != eos]
            if ids:
                found.append(tuple(ids))
    return found


def test_r_is_the_documents_each_person_has():
    summary = {"people": 40, "biographies": 200, "celebrities": 0, "qa_documents": 20}
    assert documents_per_person({"shards": [], "summary": summary}, Path("c")) == 5
    assert documents_per_person({"shards": [], "summary": {"renderings": 3}}, Path("c")) == 3
    assert documents_per_person({"shards": [], "summary": {"problems": 9}}, Path("c")) == 1
    celebrities = {"people": 40, "biographies": 60, "celebrities": 5}
    with pytest.raises(TrainError, match="train.exposures: c gives its people different numbers"):
        documents_per_person({"shards": [], "summary": celebrities}, Path("c"))


@pytest.mark.parametrize("world_size, grad_accum", [(1, 1), (1, 3), (2, 2), (4, 1)])
def test_split_documents_take_ceil_e_t_over_r_tokens_per_step(multi2, world_size, grad_accum):
    """steps = ceil(E * T / (R * micro_batch * ctx * grad_accum * world_size)), T the corpus's
    tokens with one EOS per document; 3 shards over 2 or 4 ranks leave shards out of every
    pass, read again in later passes."""
    manifest = _manifest(multi2)
    corpus_tokens = manifest["tokens"] + manifest["records"]
    options = DataOptions(ctx=64, micro_batch=2)
    data = PackedBatches(multi2, options, 0, world_size)
    assert data.tokens_per_epoch == corpus_tokens
    per_step = 2 * 64 * grad_accum * world_size
    for exposures in (1, 2, 5, 11):
        steps = steps_for(exposures, 2, data, grad_accum)
        assert steps == math.ceil(exposures * corpus_tokens / (2 * per_step))
        # what the iterator has read after those steps, by its own position
        reader = PackedBatches(multi2, options, 0, world_size)
        for _ in islice(reader, steps * grad_accum):
            pass
        reached = exposures_reached(2, reader)
        assert reached == 2 * steps * per_step / corpus_tokens
        assert exposures <= reached < exposures + 2 * per_step / corpus_tokens


@pytest.mark.parametrize("world_size", [2, 4])  # 4 ranks share out the windows of 3 shards
def test_whole_documents_count_what_every_rank_s_windows_hold(multi2, world_size):
    """Whole-document windows with padding, tails dropped on some ranks: tokens_read is the
    documents (and their EOS) every rank's batches held, as the batches show them."""
    options = DataOptions(ctx=256, micro_batch=3, split_documents=False)
    eos = PackedBatches(multi2, options).eos_id
    lengths = {ids: len(ids) + 1 for ids in _people(multi2)}
    readers = [PackedBatches(multi2, options, rank, world_size) for rank in range(world_size)]
    streams = [iter(reader) for reader in readers]
    held = 0
    for batch in range(40):  # several epochs
        for stream in streams:
            held += sum(lengths[doc] for doc in _whole_documents(next(stream), eos))
        assert readers[0].tokens_read() == held
        assert readers[0].batches_to_read(held) == batch + 1  # the fewest batches holding it


def test_exposures_read_each_person_s_documents_exactly_e_times(multi2, tmp_path):
    """Whole documents, one window a batch, one rank: no pass drops a window, so E = 4 with
    R = 2 documents per person is 2 passes, and every person's 2 documents are in the stream
    4 times in all: what the run trained is replayed from its checkpoint's data position."""
    experiment = load_experiment(tiny_experiment_file(tmp_path), [
        "train.exposures=4", "train.split_documents=false", "train.ctx=256",
        "train.micro_batch=1", "train.ckpt_every=1000", "train.log_every=1000"])
    run = tmp_path / "run"
    metrics = train(experiment, run, multi2)
    logged = read_metrics(run)
    replay = PackedBatches(multi2, data_options(experiment.train))
    windows = replay.batches_in_epoch(0)
    assert logged[-1]["step"] == 2 * windows  # two passes, one window a step
    assert metrics["exposures"] == logged[-1]["exposures"] == 4.0
    people = _people(multi2)
    seen = Counter(people[doc] for batch in islice(replay, 2 * windows)
                   for doc in _whole_documents(batch, replay.eos_id))
    assert seen == dict.fromkeys(range(24), 4)
    trained = json.loads((run / f"checkpoints/step-{2 * windows:06d}/data-rank0.json")
                         .read_text())
    assert trained == replay.state_dict()


def test_a_run_logs_its_exposures_and_stops_where_they_are_reached(multi2, tmp_path, capsys):
    manifest = _manifest(multi2)
    corpus_tokens = manifest["tokens"] + manifest["records"]
    # the default tiny experiment: split documents, ctx 64, micro_batch 4; one rank
    experiment = load_experiment(tiny_experiment_file(tmp_path), [
        "train.exposures=3", "train.grad_accum=2", "train.max_steps=5", "train.ckpt_every=1000",
        "train.log_every=4"])
    train(experiment, tmp_path / "run", multi2)
    per_step = 4 * 64 * 2
    steps = math.ceil(3 * corpus_tokens / (2 * per_step))
    logged = read_metrics(tmp_path / "run")
    assert [m["step"] for m in logged] == [1, *range(4, steps, 4), steps]
    assert [m["exposures"] for m in logged] == [2 * m["step"] * per_step / corpus_tokens
                                                for m in logged]
    assert 3 <= logged[-1]["exposures"] < 3 + 2 * per_step / corpus_tokens
    out = capsys.readouterr().out
    assert (f"train  | train.exposures=3: {steps} steps, to read the corpus's "
            f"{corpus_tokens:,} tokens 1.5 times over (2 documents per person); "
            "train.max_steps is not used") in out
    # the schedule the checkpoint records is the steps the exposures gave
    meta = json.loads((tmp_path / f"run/checkpoints/step-{steps:06d}/meta.json").read_text())
    assert meta["schedule"]["exposures"] == 3 and meta["schedule"]["max_steps"] == steps
    # another number of exposures is another schedule: refused, naming it
    more = load_experiment(tiny_experiment_file(tmp_path), ["train.exposures=4",
                                                            "train.grad_accum=2"])
    with pytest.raises(TrainError, match=r"trained with train.exposures=3, but the config says "
                                         r"4, which changes the lr schedule"):
        train(more, tmp_path / "run", multi2)


def test_zero_exposures_are_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="exposures"):
        load_experiment(tiny_experiment_file(tmp_path), ["train.exposures=0"])
    # the warmup is checked against the steps once the corpus gives them, not max_steps
    load_experiment(tiny_experiment_file(tmp_path), ["train.exposures=2",
                                                     "train.warmup_steps=5000"])


def test_a_warmup_longer_than_the_steps_exposures_give_is_refused(multi2, tmp_path):
    experiment = load_experiment(tiny_experiment_file(tmp_path), [
        "train.exposures=1", "train.warmup_steps=5000"])
    with pytest.raises(TrainError, match=r"train.warmup_steps=5000: must not exceed the \d+ "
                                         r"steps train.exposures=1 gives on "):
        train(experiment, tmp_path / "run", multi2)
    assert not (tmp_path / "run").exists()


def test_a_corpus_without_token_counts_is_one_line_naming_exposures(multi2, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(multi2, corpus)
    manifest = _manifest(corpus)
    for shard in manifest["shards"]:
        del shard["tokens"]
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    code = main(["train", str(tiny_experiment_file(tmp_path)), "train.exposures=2",
                 "--corpus", str(corpus), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"physlm train: error: train.exposures: {corpus}/manifest.json counts "
                          "no tokens per shard")


def test_tokens_read_follow_a_resumed_position(multi2):
    """The count comes from the loader's position, which a checkpoint restores."""
    options = DataOptions(ctx=64, micro_batch=2)
    straight = PackedBatches(multi2, options)
    for _ in islice(straight, 50):
        pass
    resumed = PackedBatches(multi2, options)
    resumed.load_state_dict(straight.state_dict())
    assert resumed.tokens_read() == straight.tokens_read() == 50 * 2 * 64
    assert np.isclose(exposures_reached(2, resumed), 2 * 50 * 128 / straight.tokens_per_epoch)
    assert torch.equal(next(iter(resumed))["input_ids"], next(iter(straight))["input_ids"])


def test_steps_for_rounds_the_token_target_up():
    # E * T / R = 7 / 2 tokens: 4 batches of one token are needed, not 3
    class OneTokenBatches:
        tokens_per_epoch = 7

        def batches_to_read(self, tokens: int) -> int:
            return tokens

    assert steps_for(1, 2, OneTokenBatches(), 1) == 4
    assert steps_for(3, 2, OneTokenBatches(), 2) == 6  # ceil(21 / 2) = 11 batches: 6 steps


def test_people_with_unequal_biography_counts_have_no_r():
    summary = {"people": 40, "biographies": 70, "celebrities": 0}
    with pytest.raises(TrainError, match="different numbers of biographies"):
        documents_per_person({"shards": [], "summary": summary}, Path("c"))
