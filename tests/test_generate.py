"""The corpus driver: reproducibility, repair, verification and bad input."""

import gc
import json
import os

import pytest

from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer
from corpus_gen.core.verify import verify_corpus
from launch.cli import main


def _files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".") and ".progress" not in p.parts
            and p.name != "datasheet.md"}


def _quiet(*_):
    pass


def test_output_is_byte_identical_for_one_and_two_workers(bios_config, tmp_path):
    config = bios_config(people=700, variant="multi2_permute", records_per_shard=300,
                         mode="mix", qa_loss="answer")
    one, two = tmp_path / "one", tmp_path / "two"
    generate_corpus(config, one, workers=1, progress=False, log=_quiet)
    generate_corpus(config, two, workers=2, progress=False, log=_quiet)
    files = _files(one)
    assert len([f for f in files if f.startswith("train/")]) == 6  # 1400 + 350 docs
    assert files == _files(two)


def test_generation_leaves_the_garbage_collector_as_it_found_it(bios_config, tmp_path):
    """gen freezes what was imported before it (torch's objects in `physlm run`) for its own
    collections, and thaws it after, even when it fails."""
    config = bios_config(people=60)
    generate_corpus(config, tmp_path / "c", progress=False, log=_quiet)
    assert gc.get_freeze_count() == 0
    def failing_log(*_):
        raise CorpusError("log fails")

    with pytest.raises(CorpusError, match="log fails"):  # the rerun's datasheet line
        generate_corpus(config, tmp_path / "c", progress=False, log=failing_log)
    assert gc.get_freeze_count() == 0


def test_shards_hold_text_ids_mask_and_truth(bios_config, tmp_path):
    config = bios_config(people=200, mode="mix", qa_loss="answer")
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=_quiet)
    tokenizer = Tokenizer.load(tmp_path / "c" / "tokenizer.model")
    samples = list(read_shard(tmp_path / "c" / manifest["shards"][0]["name"]))
    assert len(samples) == manifest["records"] == 300
    assert sum(len(s["ids"]) for s in samples) == manifest["tokens"]
    for sample in samples:
        assert tokenizer.decode(sample["ids"]) == sample["json"]["text"]
        assert len(sample["mask"]) == len(sample["ids"])
        if sample["json"]["kind"] == "bio":
            assert sample["mask"].all()
        else:
            answers = tokenizer.decode(sample["ids"][sample["mask"] == 1])
            assert sample["json"]["person"]["employer"] in answers
            assert "Answer" not in answers
    assert {r["name"] for r in manifest["eval"]} == {"eval/qa_train.jsonl", "eval/qa_test.jsonl"}
    assert (tmp_path / "c" / "datasheet.md").read_text().count("| tokens") == 1


def test_rerun_repairs_exactly_the_truncated_shard(bios_config, tmp_path):
    config = bios_config(people=900, records_per_shard=300)
    out = tmp_path / "c"
    generate_corpus(config, out, progress=False, log=_quiet)
    before = _files(out)
    shards = sorted((out / "train").iterdir())
    mtimes = {p.name: p.stat().st_mtime_ns for p in shards}
    with open(shards[1], "r+b") as f:
        f.truncate(5000)
    problems = verify_corpus(out)
    assert problems == [f"{shards[1]}: sha256 mismatch (corrupt or modified)"]
    messages = []
    generate_corpus(config, out, progress=False, log=messages.append)
    assert any(str(shards[1]) in m and "regenerating" in m for m in messages)
    assert _files(out) == before
    changed = {p.name for p in shards if p.stat().st_mtime_ns != mtimes[p.name]}
    assert changed == {shards[1].name}
    assert verify_corpus(out) == []


def test_interrupted_run_resumes_from_finished_shards(bios_config, tmp_path):
    config = bios_config(people=900, records_per_shard=300)
    out = tmp_path / "c"
    generate_corpus(config, out, progress=False, log=_quiet)
    reference = _files(out)
    # simulate a kill after shard 0: later shards, eval sets and the manifest never appeared
    for name in ("train/shard-000001.tar", "train/shard-000002.tar", "manifest.json",
                 "eval/qa_test.jsonl"):
        (out / name).unlink()
    (out / "train" / ".shard-000002.tar.tmp-999").write_bytes(b"half a shard")
    kept = (out / "train" / "shard-000000.tar").stat().st_mtime_ns
    generate_corpus(config, out, progress=False, log=_quiet)
    assert _files(out) == reference
    assert (out / "train" / "shard-000000.tar").stat().st_mtime_ns == kept
    assert not list(out.rglob("*.tmp-*"))


def test_another_config_never_overwrites_an_existing_corpus(bios_config, tmp_path):
    out = tmp_path / "c"
    generate_corpus(bios_config(people=100), out, progress=False, log=_quiet)
    before = _files(out)
    with pytest.raises(CorpusError, match="holds a corpus of another config"):
        generate_corpus(bios_config(people=101), out, progress=False, log=_quiet)
    assert _files(out) == before


def test_a_foreign_directory_is_left_alone(bios_config, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CorpusError, match="not a physlm corpus directory"):
        generate_corpus(bios_config(people=100), tmp_path, progress=False, log=_quiet)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_unwritable_output_directory_is_named(bios_config, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CorpusError, match=f"{blocker / 'out'}: cannot write"):
        generate_corpus(bios_config(people=100), blocker / "out", progress=False, log=_quiet)


def test_a_damaged_manifest_or_progress_record_is_rebuilt_not_refused(bios_config, tmp_path):
    config = bios_config(people=600, records_per_shard=300)
    out = tmp_path / "c"
    generate_corpus(config, out, progress=False, log=_quiet)
    reference = _files(out)
    shard_record = out / ".progress" / "train__shard-000001.tar.json"
    kept = (out / "train" / "shard-000001.tar").stat().st_mtime_ns
    shard_record.write_text("\x00garbage")
    lines = []
    generate_corpus(config, out, progress=False, log=lines.append)
    assert f"{shard_record}: unreadable; rebuilding it" in lines
    # the shard's record came back from the manifest, so the shard itself was kept, not rebuilt
    assert (out / "train" / "shard-000001.tar").stat().st_mtime_ns == kept
    assert json.loads(shard_record.read_text())["name"] == "train/shard-000001.tar"
    assert _files(out) == reference

    (out / "manifest.json").write_text('{"format": 1, "shards": [')  # cut mid-write
    lines.clear()
    generate_corpus(config, out, progress=False, log=lines.append)
    assert f"{out / 'manifest.json'}: unreadable; rebuilding it" in lines
    assert (out / "train" / "shard-000001.tar").stat().st_mtime_ns == kept
    assert _files(out) == reference

    # with both records of a shard gone, the shard is generated again, byte for byte
    (out / "manifest.json").write_text("")
    shard_record.unlink()
    generate_corpus(config, out, progress=False, log=_quiet)
    assert _files(out) == reference and verify_corpus(out) == []


def test_a_second_writer_is_refused_naming_who_holds_the_directory(bios_config, tmp_path):
    import fcntl
    import subprocess
    import sys

    out = tmp_path / "c"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
         "f.write('physlm gen (pid 4242 on node7)'); f.flush(); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
         str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(CorpusError, match=r"c: physlm gen \(pid 4242 on node7\) is writing "
                                              "here; wait for it"):
            generate_corpus(bios_config(people=100), out, progress=False, log=_quiet)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written, no tmp
    finally:
        holder.kill()
        holder.wait()
    generate_corpus(bios_config(people=100), out, progress=False, log=_quiet)  # lock released
    assert verify_corpus(out) == [] and not (out / ".lock").exists()
    with open(tmp_path / "probe", "w") as f:  # the helper process really held an flock
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_full_disk_names_the_file_and_keeps_finished_shards(bios_config, tmp_path):
    import resource
    import signal

    config = bios_config(people=900, records_per_shard=300)
    reference = tmp_path / "reference"
    generate_corpus(config, reference, progress=False, log=_quiet)
    others = [reference / "tokenizer.model", *(reference / "eval").iterdir()]
    limit = max(p.stat().st_size for p in others) + 1  # every file but a shard fits
    assert all(p.stat().st_size > limit for p in (reference / "train").iterdir())
    out = tmp_path / "c"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(CorpusError) as error:
            generate_corpus(config, out, progress=False, log=_quiet)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    message = str(error.value)
    assert message.startswith(f"{out / 'train' / 'shard-000000.tar'}: cannot write it: File "
                              "too large") and "\n" not in message
    assert not list(out.rglob("*.tmp-*"))
    # the files finished before the failure are there, whole, and a rerun keeps them
    finished = [out / "tokenizer.model", *(out / "eval").iterdir()]
    assert [p.read_bytes() for p in finished] == [
        (reference / p.relative_to(out)).read_bytes() for p in finished]
    stamps = [p.stat().st_mtime_ns for p in finished]
    generate_corpus(config, out, progress=False, log=_quiet)  # disk freed: the run completes
    assert _files(out) == _files(reference)
    assert [p.stat().st_mtime_ns for p in finished] == stamps


def test_people_beyond_the_name_space_are_refused(bios_config, tmp_path):
    for name in ("first_name_male", "first_name_female", "middle_name", "last_name", "city",
                 "university", "field"):
        (tmp_path / f"{name}.txt").write_text("A\nB\n")
    (tmp_path / "company.txt").write_text("Acme; Springfield, IL\n")
    assert bios_config(people=16, data_dir=str(tmp_path)).people == 16
    with pytest.raises(ConfigError, match="command line: people=17: exceeds the 16 unique"):
        bios_config(people=17, data_dir=str(tmp_path))


def _cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_generates_verifies_and_reports_errors_in_one_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("family: bios\npeople: 50\ntokenizer:\n  vocab_size: 600\n")
    out = tmp_path / "corpus"
    code, stdout, _ = _cli(["gen", str(config), "--out", str(out), "seed=4", "--no-progress"],
                           capsys)
    assert code == 0 and "| documents" in stdout
    assert json.loads((out / "manifest.json").read_text())["seed"] == 4
    assert _cli(["verify", str(out)], capsys)[0] == 0

    shard = out / "train" / "shard-000000.tar"
    os.truncate(shard, 1024)
    code, _, err = _cli(["verify", str(out)], capsys)
    assert code == 1 and str(shard) in err

    for argv, culprit in [
        (["gen", str(config), "--out", str(tmp_path / "x"), "peple=3"], "peple"),
        (["gen", str(config), "--out", str(tmp_path / "x"), "variant=multi5_shuffle"],
         "variant='multi5_shuffle'"),
        (["gen", str(tmp_path / "missing.yaml")], "missing.yaml"),
        (["gen", str(config), f"data_dir={tmp_path / 'nowhere'}"],
         f"{tmp_path / 'nowhere' / 'first_name_male.txt'}: data file not found"),
        (["verify", str(tmp_path)], "manifest.json"),
        (["gen", str(config), "--out", str(tmp_path / "x"), "--workers", "0"], "workers"),
    ]:
        code, _, err = _cli(argv, capsys)
        assert code == 2 and culprit in err and len(err.strip().splitlines()) == 1, err
