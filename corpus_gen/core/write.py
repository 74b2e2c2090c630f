"""Writing a corpus's files, each a `Job` for a worker: a training shard (its documents tokenized
into `json`, `ids.npy` and `mask.npy` members) or an eval set (JSON lines). Each file is written
to a temporary name, renamed when whole, and recorded in `.progress/` with its sha256.
"""

import functools
import hashlib
import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.corpus_tokenizer import read_tokenizer, tokenizer_name
from corpus_gen.core.io import atomic_path
from corpus_gen.core.manifest import record_progress
from corpus_gen.core.records import Document, UnitBatch, document
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import ShardWriter, npy_bytes
from corpus_gen.core.tokenizer import CorpusTokenizer


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


def run_jobs(jobs: list[Job], workers: int, kept: dict[int, Document] | None
             ) -> Iterator[dict]:
    """Build the jobs, in `workers` processes; yield each file's entry as it is finished.
    `kept`: documents of the tokenizer sample, by stream position (one worker only)."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield build(job, kept)
        return
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(workers, len(jobs))) as pool:
        yield from pool.imap_unordered(build, jobs)


def build(job: Job, kept: dict[int, Document] | None = None) -> dict:
    entry = build_eval_set(job) if job.eval_set else build_shard(job, kept)
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


_TOKENIZERS: dict[str, CorpusTokenizer] = {}


def _tokenizer(job: Job) -> CorpusTokenizer:
    """The corpus's tokenizer, read once per worker while its file is unchanged."""
    path = Path(job.out) / tokenizer_name(job.config)
    key = f"{path}:{path.stat().st_mtime_ns}"
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = read_tokenizer(path)
    return _TOKENIZERS[key]


def build_shard(job: Job, kept: dict[int, Document] | None = None) -> dict:
    tokenizer = _tokenizer(job)
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


def _batches(job: Job, kept: dict[int, Document]) -> Iterator[UnitBatch | list[Document]]:
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
            yield batch if isinstance(batch, UnitBatch) else list(map(document, batch))


def _members(tokenizer: CorpusTokenizer, batch: UnitBatch | list[Document]
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
    if batch.loss is None:
        return jsons, ids, [_full_mask(n) for n in counts], counts
    mask = np.repeat(batch.loss.astype(np.uint8), unit_counts)
    masks = [npy_bytes(mask[a:b].tobytes(), "|u1", b - a)
             for a, b in zip(ends.tolist(), ends[1:].tolist())]
    return jsons, ids, masks, counts


def _token_members(tokenizer: CorpusTokenizer, doc: Document) -> tuple[bytes, bytes, int]:
    """The document's `ids.npy` and `mask.npy` members and its number of tokens."""
    if doc.masked:
        tokens, mask = tokenizer.encode_masked(doc.text, doc.masked)
        n = tokenizer.count(tokens)
        return npy_bytes(tokens, tokenizer.dtype, n), npy_bytes(mask, "|u1", n), n
    tokens = tokenizer.encode_bytes(doc.text)
    n = tokenizer.count(tokens)
    return npy_bytes(tokens, tokenizer.dtype, n), _full_mask(n), n


@functools.lru_cache(maxsize=1 << 12)
def _full_mask(n: int) -> bytes:
    """`mask.npy` of n tokens that all count, shared by the documents of that length."""
    return npy_bytes(b"\x01" * n, "|u1", n)


def build_eval_set(job: Job) -> dict:
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
