"""`physlm gen`: config -> tokenizer -> shards and eval sets (in parallel) -> manifest.

Shard i holds stream positions [i*R, (i+1)*R) and is a pure function of (config, i), so any
number of worker processes writes the same bytes. A rerun keeps every file whose progress record
still verifies and regenerates the rest; the manifest is written last.

A corpus can also be written in parts, each a job of its own (a Slurm array): "prepare" (the
tokenizer, the family's files, the eval sets), then "shards" parts of disjoint shard ranges at
the same time, then a full gen that finds them done and writes the manifest: the same bytes as
one run.
"""

import functools
import gc
import hashlib
import multiprocessing
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson
from tqdm import tqdm

from corpus_gen import __version__
from corpus_gen.core.config import CorpusConfig, config_dict, fingerprint
from corpus_gen.core.datasheet import datasheet, write_datasheet
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import (
    LOCK,
    atomic_path,
    atomic_write,
    busy,
    directory_lock,
    lock_holder,
    read_json_file,
    remove_stale_temporaries,
)
from corpus_gen.core.manifest import (
    FORMAT,
    MANIFEST,
    PROGRESS,
    is_intact,
    progress_path,
    record_progress,
    recorded_entries,
    write_json,
)
from corpus_gen.core.records import Record, UnitBatch, batch_texts
from corpus_gen.core.registry import Family, Layout, get_family
from corpus_gen.core.shards import ShardWriter, npy_bytes
from corpus_gen.core.tokenizer import Tokenizer, reused_model, train_tokenizer

TOKENIZER = "tokenizer.model"
# The version of what the core writes (tar layout, tokenizer training, eval-set encoding): it
# enters every corpus fingerprint with the family's own version. Bump it when core output changes.
CORE_VERSION = 1
_SAMPLE_CHUNKS = 64  # the tokenizer sample is taken from this many places along the stream
# With one worker, up to this many tokenizer-sample documents are kept for the shards, which
# then need not generate them again (a few KB each).
_KEEP_SAMPLE_DOCUMENTS = 100_000


@dataclass(frozen=True)
class Job:
    """One output file to build in a worker: a shard (index >= 0) or an eval set (name)."""

    config: CorpusConfig
    out: str
    fingerprint: str
    name: str
    start: int = 0
    stop: int = 0
    eval_set: str = ""


class _Document(NamedTuple):
    """A record as its shard members need it: its ground truth already serialized (kept from
    the tokenizer sample without the dozens of objects a `meta` holds)."""

    text: str
    masked: tuple[tuple[int, int], ...]
    json: bytes


def shard_name(index: int) -> str:
    return f"train/shard-{index:06d}.tar"


def generator_version(config: CorpusConfig) -> str:
    """The code version a corpus depends on: the core's output format and the family's."""
    family = get_family(config.family)
    return f"core-{CORE_VERSION}/{family.name}-{family.version}"


def corpus_fingerprint(config: CorpusConfig) -> str:
    """Identifies a corpus: the same config, generator versions and family files (a CFG corpus's
    grammar, which may come from a user's file the config only names) give the same bytes."""
    family = get_family(config.family)
    files = family.files(config) if family.files else {}
    inputs = "".join(f"/{name}:{hashlib.sha256(data).hexdigest()}"
                     for name, data in sorted(files.items()))
    return fingerprint(config, generator_version(config) + inputs)


@dataclass(frozen=True)
class Part:
    """A piece of a corpus that a job of its own writes (a Slurm array task): "prepare" the
    tokenizer, the family's files and the eval sets; "shards" the training shards with index in
    [start, stop). Neither writes the manifest: a full gen afterwards finds every part done,
    regenerates what a failed part left missing, and writes it."""

    kind: str
    start: int = 0
    stop: int = 0

    def __post_init__(self):
        if self.kind != "prepare" and not (self.kind == "shards" and 0 <= self.start < self.stop):
            raise CorpusError(f"{self!r}: not a part of a corpus; expected Part('prepare') or "
                              "Part('shards', start, stop) with 0 <= start < stop")

    def __str__(self) -> str:
        return self.kind if self.kind == "prepare" else f"shards:{self.start}-{self.stop}"


def parse_part(text: str) -> Part:
    """`prepare` or `shards:START-STOP` (STOP exclusive) as a Part."""
    match = re.fullmatch(r"prepare|shards:([0-9]+)-([0-9]+)", text)
    if match and match[1] is None:
        return Part("prepare")
    if match and int(match[1]) < int(match[2]):
        return Part("shards", int(match[1]), int(match[2]))
    raise CorpusError(f"part {text!r}: expected 'prepare' or 'shards:START-STOP' (whole numbers, "
                      "START < STOP, STOP exclusive)")


def shard_count(config: CorpusConfig) -> int:
    """How many training shards the corpus of `config` has."""
    records = get_family(config.family).layout(config).records
    return -(-records // config.records_per_shard)


def generate_corpus(config: CorpusConfig, out: Path, workers: int = 1,
                    progress: bool | None = None, log=print, part: Part | None = None
                    ) -> dict | None:
    """Generate (or repair) the corpus of `config` in `out`; return the manifest. Given a `part`,
    generate (or repair) only that part's files and return None."""
    if workers < 1:
        raise CorpusError(f"workers={workers}: must be >= 1")
    _check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{exc.strerror or exc}") from None
    what = "physlm gen" + (f" part {part}" if part else "")
    with directory_lock(out, what, _lock_name(part)):
        _refuse_overlapping_writers(out, part)
        # What was imported before (torch's ~150,000 objects in `physlm run`) stays out of the
        # full collections generation triggers, each of which would otherwise walk it again.
        gc.freeze()
        try:
            return _generate(config, out, workers, progress, log, part)
        finally:
            gc.unfreeze()


# `.lock` (a full gen), `.lock-prepare`, `.lock-shards-000000-000004` (parts)
_LOCK_NAME = re.compile(re.escape(LOCK) + r"(-prepare|-shards-([0-9]+)-([0-9]+))?")


def _lock_name(part: Part | None) -> str:
    if part is None:
        return LOCK
    if part.kind == "prepare":
        return f"{LOCK}-prepare"
    return f"{LOCK}-shards-{part.start:06d}-{part.stop:06d}"


def _refuse_overlapping_writers(out: Path, part: Part | None) -> None:
    """Refuse to start beside a live writer that may write the same files or remove their
    temporaries: any other writer but a shards part of a disjoint range (another task of the
    array). Each writer takes its own lock before it looks at the others', so of two that start
    together at least one sees the other."""
    for path in out.glob(f"{LOCK}*"):
        other = _LOCK_NAME.fullmatch(path.name)
        if not other or path.name == _lock_name(part) or _disjoint(part, other):
            continue
        holder = lock_holder(path)
        if holder:
            raise busy(out, holder)
        if part is None:  # a killed part's lock file: the full gen, alone here, tidies it away
            path.unlink(missing_ok=True)


def _disjoint(part: Part | None, lock: re.Match) -> bool:
    """Whether `part` and the writer of a lock file are shards parts of disjoint ranges."""
    if part is None or part.kind != "shards" or lock[2] is None:
        return False
    return int(lock[3]) <= part.start or part.stop <= int(lock[2])


def _generate(config: CorpusConfig, out: Path, workers: int, progress: bool | None, log,
              part: Part | None) -> dict | None:
    began = time.perf_counter()
    family = get_family(config.family)
    layout = family.layout(config)
    fp = corpus_fingerprint(config)
    prepares = part is None or part.kind == "prepare"
    files = family.files(config) if prepares and family.files else {}
    eval_sets = list(family.eval_sets(config)) if prepares else []
    indices = _shard_indices(shard_count(config), part)
    names = [*([TOKENIZER] if prepares else []), *files, *map(_eval_name, eval_sets),
             *map(shard_name, indices)]
    recorded = _prepare_output(out, fp, log, part, None if part is None else names)
    # the tokenizer-sample documents kept for the shards (one worker, whole corpus)
    kept: dict[int, _Document] | None = {} if workers == 1 and part is None else None
    if prepares:
        tokenizer_entry = _ensure_tokenizer(config, family, layout, out, fp, recorded, log, kept)
    else:
        tokenizer_entry = _prepared_tokenizer(out, fp, recorded)
    for name, data in files.items():  # a few KB: written again on every run
        atomic_write(out / name, data)

    per_shard = config.records_per_shard
    jobs, entries = [], {}
    for index in indices:
        name = shard_name(index)
        entry = _kept(out, name, fp, recorded, log)
        if entry and entry.get("tokenizer") == tokenizer_entry["sha256"]:
            entries[name] = entry
            continue
        start = index * per_shard
        jobs.append(Job(config, str(out), fp, name, start, min(start + per_shard,
                                                                  layout.records)))
    for set_name in eval_sets:
        name = _eval_name(set_name)
        entry = _kept(out, name, fp, recorded, log)
        if entry:
            entries[name] = entry
        else:
            jobs.insert(0, Job(config, str(out), fp, name, eval_set=set_name))

    generated = sum(job.stop - job.start for job in jobs)
    hide = None if progress is None else not progress  # None: show on a terminal only
    bar = tqdm(total=generated, unit="doc", unit_scale=True, disable=hide, file=sys.stderr)
    for entry in _run(jobs, workers, kept):
        entries[entry["name"]] = entry
        bar.update(entry.get("stop", 0) - entry.get("start", 0))
    bar.close()
    if part:
        log(f"{out}: part {part}: generated {len(jobs)} files ({generated:,} documents), kept "
            f"{len(entries) - len(jobs)}")
        return None

    shards = [entries[shard_name(i)] for i in indices]
    manifest = {
        "format": FORMAT,
        "family": config.family,
        "version": generator_version(config),
        "package_version": __version__,
        "fingerprint": fp,
        "seed": config.seed,
        "config": config_dict(config),
        "records": sum(s["records"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "summary": layout.summary,
        "tokenizer": tokenizer_entry,
        "shards": shards,
        "eval": [entries[_eval_name(s)] for s in eval_sets],
    }
    if files:
        manifest["files"] = [{"name": name, "sha256": hashlib.sha256(data).hexdigest(),
                              "fingerprint": fp} for name, data in files.items()]
    write_json(out / MANIFEST, manifest)
    seconds = time.perf_counter() - began
    sheet = datasheet(manifest, seconds, generated, out)
    write_datasheet(out, sheet)
    log(sheet)
    return manifest


def _eval_name(set_name: str) -> str:
    return f"eval/{set_name}.jsonl"


def _shard_indices(count: int, part: Part | None) -> range:
    """The shards a run writes: all of them (full gen), none (prepare) or the part's range,
    clipped to the corpus (an array may have more tasks than the corpus shards)."""
    if part is None:
        return range(count)
    if part.kind == "prepare":
        return range(0)
    return range(min(part.start, count), min(part.stop, count))


def _check_output(out: Path) -> None:
    """Refuse, before writing anything, a path that is a file or a foreign non-empty directory."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    physlm = (out / MANIFEST).exists() or (out / PROGRESS).is_dir()
    if out.is_dir() and not physlm and any(not _LOCK_NAME.fullmatch(p.name)
                                           for p in out.iterdir()):
        raise CorpusError(f"{out}: not empty and not a physlm corpus directory; refusing to "
                          "write into it (choose another --out)")


def _prepare_output(out: Path, fp: str, log, part: Part | None,
                    own: list[str] | None) -> dict[str, dict]:
    """Check that `out` holds nothing but this corpus; return what earlier runs recorded. A part
    removes the stale temporaries of its `own` files only: other parts may be writing theirs."""
    recorded = recorded_entries(out, log)
    other = {entry.get("fingerprint") for entry in recorded.values()} - {fp}
    if other:
        raise CorpusError(f"{out}: holds a corpus of another config or code version "
                          f"(fingerprint {sorted(map(str, other))[0]}, this config {fp}); choose "
                          "another --out or remove it yourself")
    # a write probe of this writer's own: concurrent parts must not remove each other's
    probe = out / PROGRESS / ("write-probe" + _lock_name(part).removeprefix(LOCK))
    try:
        for sub in ("train", "eval", PROGRESS):
            (out / sub).mkdir(parents=True, exist_ok=True)
        atomic_write(probe, b"")
        probe.unlink()
    except (OSError, CorpusError) as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    targets = None if own is None else {probe, *(out / name for name in own),
                                        *(progress_path(out, name) for name in own)}
    remove_stale_temporaries(out, targets)
    return recorded


def _prepared_tokenizer(out: Path, fp: str, recorded: dict[str, dict]) -> dict:
    """The tokenizer the prepare part wrote. A shards part never trains or copies one itself:
    the tasks of an array run at once, and all must encode with the same."""
    entry = recorded.get(TOKENIZER)
    if entry and is_intact(out, entry, fp):
        return entry
    raise CorpusError(f"{out}: no tokenizer of this corpus there; run the prepare part first")


def _kept(out: Path, name: str, fp: str, recorded: dict[str, dict], log) -> dict | None:
    """The recorded entry of `name` if the file still verifies (its progress record rewritten
    if it was lost), else None: the file is to be generated again."""
    entry = recorded.get(name)
    if entry and is_intact(out, entry, fp):
        try:
            intact_record = read_json_file(progress_path(out, name)) == entry
        except (FileNotFoundError, CorpusError):
            intact_record = False
        if not intact_record:
            record_progress(out, entry)
        return entry
    if (out / name).exists():
        log(f"{out / name}: does not match its checksum; regenerating it")
    return None


def _ensure_tokenizer(config: CorpusConfig, family: Family, layout: Layout, out: Path, fp: str,
                      recorded: dict[str, dict], log,
                      kept: dict[int, _Document] | None = None) -> dict:
    if config.tokenizer.reuse:  # copied again on every run: the source may have changed
        model = reused_model(config.tokenizer.reuse, layout.user_symbols)
    else:
        entry = _kept(out, TOKENIZER, fp, recorded, log)
        if entry:
            return entry
        model = train_tokenizer(_tokenizer_sample(config, family, layout, kept),
                                config.tokenizer.vocab_size, config.tokenizer.model_type,
                                layout.user_symbols)
    atomic_write(out / TOKENIZER, model)
    tokenizer = Tokenizer(model)
    entry = {"name": TOKENIZER, "fingerprint": fp, "sha256": hashlib.sha256(model).hexdigest(),
             "vocab_size": tokenizer.vocab_size, "dtype": tokenizer.dtype,
             "eos_id": tokenizer.eos_id, "user_symbols": list(layout.user_symbols)}
    record_progress(out, entry)
    return entry


def _tokenizer_sample(config: CorpusConfig, family: Family, layout: Layout,
                      kept: dict[int, _Document] | None = None) -> Iterator[str]:
    """`sample_records` documents taken in equal runs from evenly spaced places of the stream.
    Given `kept`, the sample's record documents are also stored there by stream position, for
    the shards (if there are at most `_KEEP_SAMPLE_DOCUMENTS`)."""
    wanted = min(config.tokenizer.sample_records, layout.records)
    chunks = min(_SAMPLE_CHUNKS, wanted)
    if wanted > _KEEP_SAMPLE_DOCUMENTS:
        kept = None
    for k in range(chunks):
        size = wanted // chunks + (k < wanted % chunks)
        start = k * layout.records // chunks
        for batch in family.document_batches(config, start, start + size):
            if kept is None or isinstance(batch, UnitBatch):
                yield from batch_texts(batch)
            else:
                for position, document in enumerate(map(_document, batch), start):
                    kept[position] = document
                    yield document.text
            start += len(batch)


def _run(jobs: list[Job], workers: int, kept: dict[int, _Document] | None):
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield _build(job, kept)
        return
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(workers, len(jobs))) as pool:
        yield from pool.imap_unordered(_build, jobs)


def _build(job: Job, kept: dict[int, _Document] | None = None) -> dict:
    entry = _build_eval_set(job) if job.eval_set else _build_shard(job, kept)
    entry.update(name=job.name, fingerprint=job.fingerprint)
    record_progress(Path(job.out), entry)
    return entry


class _HashingFile:
    """Write-through wrapper computing the sha256 of what it writes (no second read)."""

    def __init__(self, f):
        self.f, self.digest = f, hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.digest.update(data)
        self.f.write(data)


_TOKENIZERS: dict[str, Tokenizer] = {}


def _tokenizer(out: str) -> Tokenizer:
    path = Path(out) / TOKENIZER
    key = f"{path}:{path.stat().st_mtime_ns}"
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = Tokenizer.load(path)
    return _TOKENIZERS[key]


def _build_shard(job: Job, kept: dict[int, _Document] | None = None) -> dict:
    tokenizer = _tokenizer(job.out)
    lengths: list[int] = []
    position = job.start
    path = Path(job.out) / job.name
    with atomic_path(path) as tmp:
        # a batch arrives as one chunk larger than this buffer, so it goes through uncopied
        with open(tmp, "wb", buffering=1 << 16) as f:
            sink = _HashingFile(f)
            writer = ShardWriter(sink)
            for batch in _batches(job, kept or {}):
                jsons, ids, masks, counts = _members(tokenizer, batch)
                keys = [f"{p:010d}" for p in range(position, position + len(batch))]
                writer.write_batch(keys, {"json": jsons, "ids.npy": ids, "mask.npy": masks})
                lengths += counts
                position += len(batch)
            writer.close()
    return {"records": job.stop - job.start, "tokens": sum(lengths),
            "min_tokens": min(lengths), "max_tokens": max(lengths),
            "sha256": sink.digest.hexdigest(), "start": job.start, "stop": job.stop,
            "tokenizer": hashlib.sha256(tokenizer.model_bytes).hexdigest()}


def _document(record: Record) -> _Document:
    return _Document(record.text, record.masked, orjson.dumps({"text": record.text,
                                                                **record.meta}))


def _batches(job: Job, kept: dict[int, _Document]) -> Iterator[UnitBatch | list[_Document]]:
    """The documents of the job's stream positions, in batches: those the tokenizer sample
    kept (each taken out of `kept`), the others generated."""
    position = job.start
    while position < job.stop:
        run = []
        while position < job.stop and position in kept:
            run.append(kept.pop(position))
            position += 1
        if run:
            yield run
            continue
        gap = position
        while position < job.stop and position not in kept:
            position += 1
        for batch in get_family(job.config.family).document_batches(job.config, gap, position):
            yield batch if isinstance(batch, UnitBatch) else list(map(_document, batch))


def _members(tokenizer: Tokenizer, batch: UnitBatch | list[_Document]
             ) -> tuple[list, list, list, list[int]]:
    """The `json`, `ids.npy` and `mask.npy` members and the token counts of a batch."""
    if not isinstance(batch, UnitBatch):
        ids, masks, counts = zip(*map(functools.partial(_token_members, tokenizer), batch))
        return [d.json for d in batch], ids, masks, list(counts)
    tokens, unit_counts = tokenizer.encode_units(batch.units, batch.ids)
    ends = np.concatenate([[0], np.cumsum(unit_counts)])[batch.offsets]
    counts = np.diff(ends).tolist()
    data, item = memoryview(tokens.tobytes()), tokens.itemsize
    bounds = (ends * item).tolist()
    ids = [npy_bytes(data[a:b], tokenizer.dtype, n)
           for a, b, n in zip(bounds, bounds[1:], counts)]
    # the same bytes as orjson.dumps({"text": text, **meta}): text first, then meta's fields
    jsons = [f'{{"text":"{text}",{meta[1:]}'.encode()
             for text, meta in zip(batch.texts(json=True), batch.metas)]
    return jsons, ids, [_full_mask(n) for n in counts], counts


def _token_members(tokenizer: Tokenizer, document: _Document) -> tuple[bytes, bytes, int]:
    """The document's `ids.npy` and `mask.npy` members and its number of tokens."""
    if document.masked:
        tokens, mask = tokenizer.encode_masked(document.text, document.masked)
        n = tokenizer.count(tokens)
        return npy_bytes(tokens, tokenizer.dtype, n), npy_bytes(mask, "|u1", n), n
    tokens = tokenizer.encode_bytes(document.text)
    n = tokenizer.count(tokens)
    return npy_bytes(tokens, tokenizer.dtype, n), _full_mask(n), n


@functools.lru_cache(maxsize=1 << 12)
def _full_mask(n: int) -> bytes:
    """`mask.npy` of n tokens that all count, shared by the documents of that length."""
    return npy_bytes(b"\x01" * n, "|u1", n)


def _build_eval_set(job: Job) -> dict:
    rows = get_family(job.config.family).eval_sets(job.config)[job.eval_set]()
    path = Path(job.out) / job.name
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "wb", buffering=1 << 20) as f:
            sink = _HashingFile(f)
            for row in rows:
                sink.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
                count += 1
    return {"records": count, "sha256": sink.digest.hexdigest()}
