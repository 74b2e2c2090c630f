"""`physlm gen`: config -> tokenizer -> shards and eval sets (in parallel) -> manifest.

Shard i holds stream positions [i*R, (i+1)*R) and is a pure function of (config, i), so any
number of worker processes writes the same bytes. A rerun keeps every file whose progress record
still verifies and regenerates the rest; the manifest is written last.
"""

import functools
import gc
import hashlib
import multiprocessing
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
    directory_lock,
    remove_stale_temporaries,
)
from corpus_gen.core.manifest import (
    FORMAT,
    MANIFEST,
    PROGRESS,
    is_intact,
    progress_path,
    read_json,
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


def generate_corpus(config: CorpusConfig, out: Path, workers: int = 1,
                    progress: bool | None = None, log=print) -> dict:
    """Generate (or repair) the corpus of `config` in `out`; return the manifest."""
    if workers < 1:
        raise CorpusError(f"workers={workers}: must be >= 1")
    _check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{exc.strerror or exc}") from None
    with directory_lock(out, "physlm gen"):
        # What was imported before (torch's ~150,000 objects in `physlm run`) stays out of the
        # full collections generation triggers, each of which would otherwise walk it again.
        gc.freeze()
        try:
            return _generate(config, out, workers, progress, log)
        finally:
            gc.unfreeze()


def _generate(config: CorpusConfig, out: Path, workers: int, progress: bool | None,
              log) -> dict:
    began = time.perf_counter()
    family = get_family(config.family)
    layout = family.layout(config)
    fp = corpus_fingerprint(config)
    recorded = _prepare_output(out, fp, log)
    kept: dict[int, _Document] | None = {} if workers == 1 else None
    tokenizer_entry = _ensure_tokenizer(config, family, layout, out, fp, recorded, log, kept)
    files = family.files(config) if family.files else {}
    for name, data in files.items():  # a few KB: written again on every run
        atomic_write(out / name, data)

    per_shard = config.records_per_shard
    jobs, entries = [], {}
    for index, start in enumerate(range(0, layout.records, per_shard)):
        name = shard_name(index)
        entry = _kept(out, name, fp, recorded, log)
        if entry and entry.get("tokenizer") == tokenizer_entry["sha256"]:
            entries[name] = entry
            continue
        jobs.append(Job(config, str(out), fp, name, start, min(start + per_shard,
                                                                  layout.records)))
    for set_name in family.eval_sets(config):
        name = f"eval/{set_name}.jsonl"
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

    shards = [entries[shard_name(i)] for i in range(len(range(0, layout.records, per_shard)))]
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
        "eval": [entries[f"eval/{s}.jsonl"] for s in family.eval_sets(config)],
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


def _check_output(out: Path) -> None:
    """Refuse, before writing anything, a path that is a file or a foreign non-empty directory."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    physlm = (out / MANIFEST).exists() or (out / PROGRESS).is_dir()
    if out.is_dir() and not physlm and any(p.name != LOCK for p in out.iterdir()):
        raise CorpusError(f"{out}: not empty and not a physlm corpus directory; refusing to "
                          "write into it (choose another --out)")


def _prepare_output(out: Path, fp: str, log) -> dict[str, dict]:
    """Check that `out` holds nothing but this corpus; return what earlier runs recorded."""
    recorded = recorded_entries(out, log)
    other = {entry.get("fingerprint") for entry in recorded.values()} - {fp}
    if other:
        raise CorpusError(f"{out}: holds a corpus of another config or code version "
                          f"(fingerprint {sorted(map(str, other))[0]}, this config {fp}); choose "
                          "another --out or remove it yourself")
    try:
        for sub in ("train", "eval", PROGRESS):
            (out / sub).mkdir(parents=True, exist_ok=True)
        atomic_write(out / PROGRESS / "write-probe", b"")
        (out / PROGRESS / "write-probe").unlink()
    except (OSError, CorpusError) as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    remove_stale_temporaries(out)
    return recorded


def _kept(out: Path, name: str, fp: str, recorded: dict[str, dict], log) -> dict | None:
    """The recorded entry of `name` if the file still verifies (its progress record rewritten
    if it was lost), else None: the file is to be generated again."""
    entry = recorded.get(name)
    if entry and is_intact(out, entry, fp):
        try:
            intact_record = read_json(progress_path(out, name)) == entry
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
