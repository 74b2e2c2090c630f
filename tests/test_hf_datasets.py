"""A corpus's shards read through HF `datasets` give the token arrays physlm trains on."""

import numpy as np
import pytest

from corpus_gen.core.manifest import read_manifest
from trainer.data import DataOptions, PackedBatches

datasets = pytest.importorskip("datasets")


def load_train_split(corpus, cache_dir):
    """The README's example: the shards in manifest order, one row per document."""
    shards = [str(corpus / entry["name"]) for entry in read_manifest(corpus)["shards"]]
    return datasets.load_dataset("webdataset", data_files={"train": shards}, split="train",
                                 cache_dir=str(cache_dir))


def test_datasets_rows_are_the_documents_physlm_packs(train_corpus, tmp_path):
    manifest = read_manifest(train_corpus)
    rows = load_train_split(train_corpus, tmp_path / "hf_cache").with_format("numpy")
    assert len(rows) == sum(entry["records"] for entry in manifest["shards"])
    assert rows[0]["json"]["kind"] in ("bio", "qa")  # the ground truth comes along, decoded

    # the trainer's own stream: every document followed by EOS, shards in manifest order
    eos, ctx = int(manifest["tokenizer"]["eos_id"]), 32
    loader = PackedBatches(train_corpus, DataOptions(ctx=ctx, micro_batch=1,
                                                     shuffle_shards=False))
    windows = loader.batches_in_epoch(0)
    batches = [next(iter(loader)) for _ in range(windows)]
    trained = np.concatenate([batch["input_ids"][0].numpy() for batch in batches])
    assert len(trained) == windows * ctx > 1000

    from_hf = np.concatenate([np.append(ids, eos) for ids in rows["ids.npy"]])
    np.testing.assert_array_equal(from_hf[: len(trained)], trained)
    masks = np.concatenate([np.append(mask, 1) for mask in rows["mask.npy"]])
    labels = np.concatenate([batch["labels"][0].numpy() for batch in batches])
    # a label counts where the next token's mask is 1: the masks agree too
    np.testing.assert_array_equal(labels != -100, masks[1 : len(labels) + 1].astype(bool))
