"""A corpus generated in parts (prepare, shard ranges, then a full gen for the manifest), as the
tasks of a Slurm array write it: the same bytes as one run, and safe beside its other tasks."""

import re
import threading
from contextlib import contextmanager

import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import Part, generate_corpus, parse_part, shard_count
from corpus_gen.core.registry import schemas
from corpus_gen.core.verify import verify_corpus

FAMILIES = {
    "bios": ("family: bios\n", ["people=300", "records_per_shard=100",
                                 "tokenizer.vocab_size=1000", "tokenizer.sample_records=500"]),
    "cfg": ("family: cfg\ngrammar: cfg3b\n", ["samples=70", "eval_samples=30",
                                              "records_per_shard=25", "tokenizer.vocab_size=300",
                                              "tokenizer.sample_records=20"]),
}


def _config(directory, family="bios", extra=()):
    yaml, overrides = FAMILIES[family]
    path = directory / f"{family}.yaml"
    path.write_text(yaml)
    return load_config(path, overrides + list(extra), schemas())


def _quiet(*_):
    pass


def _files(out):
    """Every file of a corpus directory, progress records included, but the datasheet (it holds
    the directory and this run's timings)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "datasheet.md"}


def _datasheet(out):
    """The datasheet's rows: what -> value."""
    rows = [line.split("|")[1:3] for line in (out / "datasheet.md").read_text().splitlines()[4:]]
    return {what.strip(): value.strip() for what, value in rows}


# the datasheet rows that tell about the run rather than the corpus
RUN_ROWS = ("corpus", "seconds", "documents generated this run", "records/s")


def _gen(config, out, part=None, workers=1, log=_quiet):
    return generate_corpus(config, out, workers=workers, progress=False, log=log,
                           part=None if part is None else parse_part(part))


def _stamps(out):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "train").iterdir()}


@pytest.fixture(scope="module")
def bios(tmp_path_factory):
    """The bios config (three shards) and its corpus made in one run."""
    directory = tmp_path_factory.mktemp("bios")
    config = _config(directory)
    _gen(config, directory / "one")
    return config, directory / "one"


@pytest.mark.parametrize("family, parts", [
    ("bios", [("prepare", 1), ("shards:2-3", 1), ("shards:1-2", 1), ("shards:0-1", 1)]),
    ("cfg", [("prepare", 2), ("shards:1-9", 2), ("shards:0-1", 1)]),
])
def test_parts_then_a_full_gen_make_the_one_run_corpus_byte_for_byte(family, parts, tmp_path):
    config = _config(tmp_path, family)
    assert shard_count(config) == 3
    manifest = _gen(config, tmp_path / "one")
    out = tmp_path / "parts"
    for part, workers in parts:
        assert _gen(config, out, part, workers) is None
    assert not (out / "manifest.json").exists()
    assert _gen(config, out) == manifest
    files = _files(out)
    assert files == _files(tmp_path / "one")
    assert ("grammar.json" in files) == (family == "cfg")
    # the datasheets differ in the rows about the run only: the last generated nothing
    sheets = [_datasheet(directory) for directory in (tmp_path / "one", out)]
    assert len(sheets[1]) > 10 and sheets[1]["documents generated this run"] == "0"
    for row in RUN_ROWS:
        del sheets[0][row], sheets[1][row]
    assert sheets[0] == sheets[1]


def test_a_shards_part_before_prepare_is_refused_naming_the_directory(tmp_path):
    config = _config(tmp_path)
    out = tmp_path / "c"
    with pytest.raises(CorpusError, match=f"^{re.escape(str(out))}: no tokenizer of this "
                                          "corpus there; run the prepare part first$"):
        _gen(config, out, "shards:0-1")
    assert not list(out.rglob("*.tar")) and not (out / "tokenizer.model").exists()


def test_a_reused_tokenizer_is_copied_by_prepare_and_only_read_by_shards_parts(bios, tmp_path):
    config = _config(tmp_path, extra=[f"tokenizer.reuse={bios[1]}"])
    out = tmp_path / "parts"
    with pytest.raises(CorpusError, match="run the prepare part first"):
        _gen(config, out, "shards:0-3")
    assert not (out / "tokenizer.model").exists()
    _gen(config, out, "prepare")
    copied = (out / "tokenizer.model").stat().st_mtime_ns
    _gen(config, out, "shards:0-3")
    assert (out / "tokenizer.model").stat().st_mtime_ns == copied
    _gen(config, out)
    _gen(config, tmp_path / "one")
    assert _files(out) == _files(tmp_path / "one")


@pytest.mark.parametrize("text, part", [
    ("prepare", Part("prepare")), ("shards:0-4", Part("shards", 0, 4)),
    ("shards:12-100", Part("shards", 12, 100)),
])
def test_a_part_is_read_from_its_text(text, part):
    assert parse_part(text) == part
    assert str(part) == text


@pytest.mark.parametrize("text", ["shards:4-4", "shards:5-2", "shards:3", "shards:-1-2",
                                  "shards:a-b", "shards:1.5-3", "shard:0-1", "shards 0-1",
                                  "Prepare", " prepare", ""])
def test_a_bad_part_text_is_refused_in_one_line_naming_it(text):
    with pytest.raises(CorpusError) as error:
        parse_part(text)
    assert str(error.value) == (f"part {text!r}: expected 'prepare' or 'shards:START-STOP' "
                                "(whole numbers, START < STOP, STOP exclusive)")


def test_a_part_built_in_code_with_an_empty_range_is_refused():
    with pytest.raises(CorpusError, match="not a part of a corpus"):
        Part("shards", 3, 3)
    with pytest.raises(CorpusError, match="not a part of a corpus"):
        Part("eval")


def test_a_range_past_the_last_shard_is_clipped(bios, tmp_path):
    config, one = bios
    out = tmp_path / "c"
    _gen(config, out, "prepare")
    lines = []
    _gen(config, out, "shards:2-10", log=lines.append)
    _gen(config, out, "shards:5-9", log=lines.append)
    assert sorted(p.name for p in (out / "train").iterdir()) == ["shard-000002.tar"]
    assert (out / "train/shard-000002.tar").read_bytes() == (
        one / "train/shard-000002.tar").read_bytes()
    assert lines == [f"{out}: part shards:2-10: generated 1 files (100 documents), kept 0",
                     f"{out}: part shards:5-9: generated 0 files (0 documents), kept 0"]


def test_a_damaged_shard_is_regenerated_by_its_part_alone(bios, tmp_path):
    config, one = bios
    out = tmp_path / "c"
    for part in ("prepare", "shards:0-2", "shards:2-3"):
        _gen(config, out, part)
    before = _stamps(out)
    damaged = out / "train/shard-000001.tar"
    with open(damaged, "r+b") as f:
        f.truncate(5000)
    lines = []
    _gen(config, out, "shards:0-2", log=lines.append)
    assert lines == [f"{damaged}: does not match its checksum; regenerating it",
                     f"{out}: part shards:0-2: generated 1 files (100 documents), kept 1"]
    after = _stamps(out)
    assert {name for name in before if after[name] != before[name]} == {damaged.name}
    _gen(config, out)
    assert _files(out) == _files(one) and verify_corpus(out) == []


def test_the_final_full_gen_redoes_a_failed_range_and_keeps_the_others(bios, tmp_path):
    config, one = bios
    out = tmp_path / "c"
    for part in ("prepare", "shards:0-1", "shards:1-2", "shards:2-3"):
        _gen(config, out, part)
    # the task of shards 1-2 failed: it left a half-written shard and no finished one
    (out / "train/shard-000001.tar").rename(out / "train/.shard-000001.tar.tmp-4242")
    kept = _stamps(out)
    lines = []
    _gen(config, out, log=lines.append)
    assert _files(out) == _files(one)
    after = _stamps(out)
    assert sorted(after) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    assert {name: after[name] for name in ("shard-000000.tar", "shard-000002.tar")} == {
        name: kept[name] for name in ("shard-000000.tar", "shard-000002.tar")}
    assert _datasheet(out)["documents generated this run"] == "100"


def test_a_part_removes_only_its_own_stale_temporaries(bios, tmp_path):
    config, _ = bios
    out = tmp_path / "c"
    _gen(config, out, "prepare")
    other = [out / "train/.shard-000000.tar.tmp-4242",  # shards 0-1 being written elsewhere
             out / ".progress/.train__shard-000000.tar.json.tmp-4242"]
    own = [out / "train/.shard-000002.tar.tmp-4242",  # left by a killed task of shards 1-3
           out / ".progress/.train__shard-000001.tar.json.tmp-4242"]
    for path in other + own:
        path.write_bytes(b"half a file")
    _gen(config, out, "shards:1-3")
    assert [p.exists() for p in other + own] == [True, True, False, False]
    _gen(config, out, "prepare")
    assert all(p.exists() for p in other)
    _gen(config, out)  # no part runs: every temporary is stale
    assert not list(out.rglob("*.tmp-*"))


@contextmanager
def _running_part(config, out, part):
    """A part that holds its lock mid-run (stopped at its first log line, which names a shard
    it found damaged) until the block ends, then completes."""
    stopped, go, failure = threading.Event(), threading.Event(), []

    def log(_line):
        stopped.set()
        assert go.wait(60)

    def run():
        try:
            _gen(config, out, part, log=log)
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)
            stopped.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert stopped.wait(60) and not failure
        yield
    finally:
        go.set()
        thread.join()
    if failure:
        raise failure[0]


@pytest.fixture
def prepared(bios, tmp_path):
    """A bios corpus of every part but the manifest, with shard 0 damaged."""
    config, _ = bios
    out = tmp_path / "c"
    for part in ("prepare", "shards:0-3"):
        _gen(config, out, part)
    with open(out / "train/shard-000000.tar", "r+b") as f:
        f.truncate(5000)
    return out


def test_a_second_writer_of_the_same_or_an_overlapping_range_is_refused(bios, prepared):
    config, one = bios
    out = prepared
    with _running_part(config, out, "shards:0-2"):
        holder = (rf"{re.escape(str(out))}: physlm gen part shards:0-2 \(pid \d+ on .+\) is "
                  "writing here; wait")
        for part in ("shards:0-2", "shards:1-3", "prepare"):
            with pytest.raises(CorpusError, match=holder):
                _gen(config, out, part)
        assert sorted(p.name for p in out.glob(".lock*")) == [".lock-shards-000000-000002"]
        _gen(config, out, "shards:2-3")  # a disjoint range runs beside it
    _gen(config, out)
    assert _files(out) == _files(one)


def test_a_full_gen_refuses_while_a_part_runs_and_not_after(bios, prepared):
    config, one = bios
    out = prepared
    with _running_part(config, out, "shards:0-1"):
        with pytest.raises(CorpusError) as error:
            _gen(config, out)
        assert str(error.value).startswith(f"{out}: physlm gen part shards:0-1 (pid ")
        assert "\n" not in str(error.value) and not (out / "manifest.json").exists()
    # a lock file left by a task that was killed is no lock: the kernel dropped its lock
    stale = out / ".lock-shards-000001-000002"
    stale.write_text("physlm gen part shards:1-2 (pid 1 on gone)")
    _gen(config, out)
    assert not stale.exists()  # the full gen removes it
    assert _files(out) == _files(one)


def test_a_part_refuses_while_a_full_gen_runs(bios, prepared):
    config, one = bios
    out = prepared
    with _running_part(config, out, None):
        with pytest.raises(CorpusError, match=rf"{re.escape(str(out))}: physlm gen \(pid \d+ on "):
            _gen(config, out, "shards:2-3")
    assert _files(out) == _files(one)
