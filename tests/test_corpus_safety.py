"""The corpus core's promises about data: a foreign directory is never written into (a
manifest.json of another program's included), an unfinished corpus of another config is
refused, one writer holds the lock, verify names every missing or changed file, a failed write
leaves no half file, shards follow a changed reused tokenizer, a cut shard is truncated."""

import io
import os
import shutil

import pytest

import corpus_gen.core.io as core_io
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus, parse_part
from corpus_gen.core.io import atomic_path, directory_lock
from corpus_gen.core.registry import schemas
from corpus_gen.core.shards import ShardWriter, tar_members
from corpus_gen.core.verify import verify_corpus
from tests.test_generate import _files, _quiet


def _config(directory, **overrides):
    path = directory / "bios.yaml"
    path.write_text("family: bios\n")
    items = {"people": 100, "records_per_shard": 100, "tokenizer.vocab_size": 600,
             "tokenizer.sample_records": 200, **overrides}
    return load_config(path, [f"{k}={v}" for k, v in items.items()], schemas())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("built")
    generate_corpus(_config(d), d / "c", progress=False, log=_quiet)
    return d / "c"


@pytest.fixture
def corpus(built, tmp_path):
    shutil.copytree(built, tmp_path / "c")
    return tmp_path / "c"


# an interrupted corpus (progress records, no manifest yet) of another config is refused
def test_an_unfinished_corpus_of_another_config_is_refused(tmp_path):
    out = tmp_path / "c"
    generate_corpus(_config(tmp_path), out, progress=False, log=_quiet)
    (out / "manifest.json").unlink()  # killed before the manifest
    before = _files(out)
    with pytest.raises(CorpusError, match="holds a corpus of another config"):
        generate_corpus(_config(tmp_path, people=101), out, progress=False, log=_quiet)
    assert _files(out) == before


# a directory of nothing but dotfiles is still foreign
def test_a_directory_of_dotfiles_is_foreign(tmp_path):
    (tmp_path / ".bashrc").write_text("mine")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / ".x.tmp-1").write_text("mine too")
    with pytest.raises(CorpusError, match="not a physlm corpus directory"):
        generate_corpus(_config(tmp_path / ".cache"), tmp_path, progress=False, log=_quiet)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bashrc", ".cache"]
    assert (tmp_path / ".cache" / ".x.tmp-1").read_text() == "mine too"


# a lock file removed by its finishing holder between open and flock is no lock
def test_a_lock_taken_on_a_removed_lock_file_is_not_held(tmp_path, monkeypatch):
    real = core_io._flock_exclusive

    def holder_finishes_first(f, *a, **k):
        (tmp_path / ".lock").unlink()  # the previous holder removed it as it finished
        monkeypatch.setattr(core_io, "_flock_exclusive", real)
        return real(f, *a, **k)

    monkeypatch.setattr(core_io, "_flock_exclusive", holder_finishes_first)
    try:
        with directory_lock(tmp_path, "first"):
            with pytest.raises(CorpusError, match="is writing here"):
                with directory_lock(tmp_path, "second"):
                    pass
    except CorpusError as exc:
        assert "is writing here" in str(exc)  # the first writer refused: fine too


# verify names a missing file
def test_verify_names_a_missing_shard_and_eval_set(corpus):
    (corpus / "train/shard-000000.tar").unlink()
    (corpus / "eval/qa_test.jsonl").unlink()
    assert sorted(verify_corpus(corpus)) == sorted([
        f"{corpus / 'train/shard-000000.tar'}: missing",
        f"{corpus / 'eval/qa_test.jsonl'}: missing"])


# verify re-reads eval sets (and the tokenizer)
def test_verify_checks_eval_sets_and_the_tokenizer(corpus):
    with open(corpus / "eval/qa_train.jsonl", "ab") as f:
        f.write(b"\n")
    with open(corpus / "tokenizer.model", "r+b") as f:
        f.write(b"X")
    assert sorted(verify_corpus(corpus)) == sorted(
        f"{corpus / name}: sha256 mismatch (corrupt or modified)"
        for name in ("eval/qa_train.jsonl", "tokenizer.model"))


# a shard modified in place (same size) after a verify in this process is caught
def test_verify_catches_a_same_size_edit_after_an_earlier_verify(corpus):
    shard = corpus / "train/shard-000000.tar"
    assert verify_corpus(corpus) == []
    stamp = shard.stat().st_mtime_ns
    with open(shard, "r+b") as f:
        f.seek(600)
        byte = f.read(1)
        f.seek(600)
        f.write(bytes([byte[0] ^ 1]))
    os.utime(shard, ns=(stamp + 10**9, stamp + 10**9))  # a new stamp even on a coarse clock
    assert verify_corpus(corpus) == [f"{shard}: sha256 mismatch (corrupt or modified)"]


# a write that fails leaves the target as it was and no temporary
@pytest.mark.parametrize("existing", [None, b"old"])
def test_a_failed_write_never_puts_its_half_file_in_place(tmp_path, existing):
    path = tmp_path / "shard.tar"
    if existing is not None:
        path.write_bytes(existing)
    with pytest.raises(CorpusError, match="cannot write it"):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half a shard")
            raise OSError(28, "No space left on device")
    assert (path.read_bytes() if path.exists() else None) == existing
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if existing is None else [path.name])


# shards encoded with a reused tokenizer that has since changed are regenerated
def test_shards_follow_a_changed_reused_tokenizer(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    generate_corpus(_config(tmp_path, people=100), a, progress=False, log=_quiet)
    generate_corpus(_config(tmp_path, people=150, seed=7), b, progress=False, log=_quiet)
    assert (a / "tokenizer.model").read_bytes() != (b / "tokenizer.model").read_bytes()
    source = tmp_path / "tok.model"
    shutil.copy(a / "tokenizer.model", source)
    config = _config(tmp_path, **{"tokenizer.reuse": str(source)})
    out = tmp_path / "out"
    generate_corpus(config, out, progress=False, log=_quiet)
    shutil.copy(b / "tokenizer.model", source)  # the reused tokenizer changed
    generate_corpus(config, out, progress=False, log=_quiet)
    fresh = tmp_path / "fresh"
    generate_corpus(config, fresh, progress=False, log=_quiet)
    assert _files(out) == _files(fresh)


# a shard cut inside its last member's final block is reported truncated
def test_a_shard_cut_by_one_byte_is_truncated(tmp_path):
    stream = io.BytesIO()
    writer = ShardWriter(stream)
    writer.write("0000000000", {"json": b'{"text": "x"}', "ids.npy": b"\x01" * 700})
    writer.close()
    data = stream.getvalue()
    at, _, size = list(tar_members(data))[-1]
    with pytest.raises(ValueError, match="truncated"):
        list(tar_members(data[: at + size - 1]))


# a shards part refuses a recorded tokenizer whose file is gone or damaged
@pytest.mark.parametrize("damage", ["remove", "modify"])
def test_a_shards_part_refuses_a_damaged_prepared_tokenizer(tmp_path, damage):
    config, out = _config(tmp_path), tmp_path / "c"
    generate_corpus(config, out, progress=False, log=_quiet, part=parse_part("prepare"))
    if damage == "remove":
        (out / "tokenizer.model").unlink()
    else:
        with open(out / "tokenizer.model", "r+b") as f:
            f.write(b"X")
    with pytest.raises(CorpusError, match="run the prepare part first"):
        generate_corpus(config, out, progress=False, log=_quiet, part=parse_part("shards:0-2"))
    assert not list(out.rglob("*.tar"))


# a web app's manifest.json is not a corpus's: gen once overwrote it and deleted the app's
# temporaries below it
def test_a_foreign_manifest_json_does_not_make_a_directory_a_corpus(tmp_path):
    web = tmp_path / "web"
    (web / "sub").mkdir(parents=True)
    (web / "manifest.json").write_text('{"name": "my-pwa"}\n')
    (web / "sub" / ".draft.txt.tmp-12").write_text("mine")
    with pytest.raises(CorpusError, match="not a physlm corpus directory"):
        generate_corpus(_config(tmp_path), web, progress=False, log=_quiet)
    assert (web / "manifest.json").read_text() == '{"name": "my-pwa"}\n'
    assert (web / "sub" / ".draft.txt.tmp-12").exists()
