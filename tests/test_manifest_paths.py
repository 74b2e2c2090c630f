"""Every file a corpus manifest names lies inside the corpus: a shard renamed to a path outside
it (with that file's sha256), an absolute path, or a symlink out of the corpus is refused in one
line naming the manifest and the entry, by `physlm verify`, the trainer and a rerun of gen."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.manifest import (
    MANIFEST,
    corpus_path,
    progress_path,
    read_manifest,
    recorded_entries,
)
from corpus_gen.core.verify import verify_corpus
from trainer.data import DataOptions, PackedBatches

SHARD = "train/shard-000000.tar"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def corpus(train_corpus, tmp_path) -> Path:
    """A copy of the shared tiny corpus at tmp/a/b/corpus, beside a file outside it at
    tmp/a/secret (a copy of its first shard, so that a trainer could read it)."""
    copy = tmp_path / "a" / "b" / "corpus"
    shutil.copytree(train_corpus, copy)
    shutil.copy(copy / SHARD, tmp_path / "a" / "secret")
    return copy


def _rename_shard(corpus: Path, name: str) -> None:
    """List the first shard under `name`, with the sha256 of the file `name` reaches."""
    manifest = json.loads((corpus / MANIFEST).read_text())
    manifest["shards"][0].update(name=name, sha256=_sha256(corpus / name))
    (corpus / MANIFEST).write_text(json.dumps(manifest))


def _refusal(corpus: Path, name: str, reason: str) -> str:
    return (f"{corpus / MANIFEST}: entry {name!r} {reason}; a corpus lists only files inside "
            f"{corpus}")


@pytest.mark.parametrize("name, reason", [
    ("../../secret", "climbs out of the corpus with '..'"),
    ("train/../../../secret", "climbs out of the corpus with '..'"),
    ("<absolute>", "is an absolute path"),
])
def test_verify_refuses_a_manifest_naming_a_file_outside_the_corpus(corpus, name, reason):
    name = str(corpus.parent.parent / "secret") if name == "<absolute>" else name
    _rename_shard(corpus, name)
    with pytest.raises(CorpusError) as refused:
        verify_corpus(corpus)
    assert str(refused.value) == _refusal(corpus, name, reason)


def test_verify_refuses_a_shard_that_is_a_symlink_out_of_the_corpus(corpus):
    (corpus / SHARD).unlink()
    (corpus / SHARD).symlink_to(corpus.parent.parent / "secret")
    with pytest.raises(CorpusError) as refused:
        verify_corpus(corpus)
    assert str(refused.value) == _refusal(corpus, SHARD, "is a symlink out of the corpus")


def test_a_symlink_that_stays_inside_the_corpus_verifies(corpus):
    (corpus / "train" / "kept.tar").write_bytes((corpus / SHARD).read_bytes())
    (corpus / SHARD).unlink()
    (corpus / SHARD).symlink_to("kept.tar")
    assert verify_corpus(corpus) == []


def test_the_trainer_refuses_a_shard_list_naming_a_file_outside_the_corpus(corpus):
    _rename_shard(corpus, "../../secret")
    with pytest.raises(CorpusError) as refused:
        PackedBatches(corpus, DataOptions(ctx=32, micro_batch=2))
    assert str(refused.value) == _refusal(corpus, "../../secret",
                                          "climbs out of the corpus with '..'")


def test_gen_skips_a_progress_record_naming_a_file_outside_the_corpus(corpus):
    record = progress_path(corpus, SHARD)
    record.write_text(json.dumps({**json.loads(record.read_text()), "name": "../../secret"}))
    logged = []
    entries = recorded_entries(corpus, logged.append)
    assert "../../secret" not in entries and SHARD in entries  # the manifest still lists it
    assert logged == [f"{record}: unreadable; rebuilding it"]


def test_names_inside_the_corpus_are_paths_inside_it(tmp_path):
    listed_in = tmp_path / MANIFEST
    assert corpus_path(tmp_path, "./eval/qa_test.jsonl", listed_in) == \
        tmp_path / "eval/qa_test.jsonl"
    for name, reason in ((3, "is not a file name"), ("", "is not a file name"),
                         ("/etc/passwd", "is an absolute path"),
                         ("eval/../../x", "climbs out of the corpus with '..'")):
        with pytest.raises(CorpusError, match=f"^{listed_in}: entry {name!r} {reason}"):
            corpus_path(tmp_path, name, listed_in)


def test_a_manifest_whose_file_lists_are_not_lists_is_damaged(corpus):
    manifest = json.loads((corpus / MANIFEST).read_text())
    (corpus / MANIFEST).write_text(json.dumps({**manifest, "eval": 7}))
    with pytest.raises(CorpusError, match=f"^{corpus / MANIFEST}: damaged manifest, its file "
                                          "lists are not lists"):
        read_manifest(corpus)
