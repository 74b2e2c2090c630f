"""Writing a corpus's files, each a `Job` for a worker: a training shard (its documents tokenized
into `json`, `ids.npy` and `mask.npy` members, `lengths.npy` where a sample holds several
documents and `targets.npy` where a family gives per-position targets: shards.py describes the
layout) or an eval set (JSON lines). Each file is written
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
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import atomic_path
from corpus_gen.core.manifest import record_progress
from corpus_gen.core.records import Document, UnitBatch, document
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import LENGTHS, LENGTHS_DTYPE, TARGETS, ShardWriter, npy_bytes
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
    per_sample = job.config.docs_per_sample
    compiled = get_family(job.config.family).compiled
    documents = (_documents(tokenizer, batch, compiled) for batch in _batches(job, kept or {}))
    samples = (_single_samples(documents, job.start) if per_sample == 1
               else _multi_samples(documents, job.start, per_sample))
    counts = []
    path = Path(job.out) / job.name
    with atomic_path(path) as tmp:
        # a batch arrives as one chunk larger than this buffer, so it goes through uncopied
        with open(tmp, "wb", buffering=1 << 16) as f:
            sink = _HashingFile(f)
            writer = ShardWriter(sink)
            for keys, members, lengths in samples:
                writer.write_batch(keys, members)
                counts.append(lengths)
            writer.close()
    lengths = np.concatenate(counts)  # tokens per document
    return {"records": job.stop - job.start, "tokens": int(lengths.sum()),
            "min_tokens": int(lengths.min()), "max_tokens": int(lengths.max()),
            "sha256": sink.digest.hexdigest(), "start": job.start, "stop": job.stop,
            "tokenizer": hashlib.sha256(tokenizer.model_bytes).hexdigest()}


def _batches(job: Job, kept: dict[int, Document]) -> Iterator[UnitBatch | list[Document]]:
    """The documents of the job's stream positions, in batches: those the tokenizer sample
    kept (each taken out of `kept`), the others generated."""
    # the kept positions of this job, ascending: each gap between two is generated at once
    marks = iter(sorted(p for p in kept if job.start <= p < job.stop))
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
        position = next((p for p in marks if p > gap), job.stop)
        for batch in get_family(job.config.family).document_batches(job.config, gap, position):
            yield batch if isinstance(batch, UnitBatch) else list(map(document, batch))


# what ShardWriter.write_batch takes, and the tokens of each document the samples hold
Samples = tuple[list[str], dict[str, list[bytes]], np.ndarray]


@dataclass
class _Documents:
    """Consecutive documents as their shard members need them, back to back."""

    ids: np.ndarray  # [tokens] the tokenizer's dtype
    mask: np.ndarray | None  # [tokens] uint8, 1: in the loss; None: every token counts
    counts: np.ndarray  # [documents] int64 tokens per document
    # [bytes] uint8: the objects of the `json` members, each followed by a comma (a run of
    # documents is then a JSON array's items, plus a comma), and [documents + 1] where each starts
    objects: np.ndarray
    object_bounds: np.ndarray
    # [tokens] the tokenizer's dtype: what each position is trained to predict (UnitBatch.targets;
    # None: the next token, and no targets.npy)
    targets: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.counts)

    def token_bounds(self) -> np.ndarray:
        """[documents + 1] where each document's tokens start, then the end."""
        return np.concatenate([[0], np.cumsum(self.counts)])

    def full_mask(self) -> np.ndarray:
        return np.ones(len(self.ids), np.uint8) if self.mask is None else self.mask


def _documents(tokenizer: CorpusTokenizer, batch: UnitBatch | list[Document],
               compiled: bool) -> _Documents:
    """A batch's documents tokenized. `compiled`: the family's generator is (Family.compiled),
    so its units' JSON is assembled by a compiled kernel too."""
    if not isinstance(batch, UnitBatch):
        encoded = [_encoded(tokenizer, doc) for doc in batch]
        ids = np.frombuffer(b"".join(tokens for tokens, _ in encoded), tokenizer.dtype)
        counts = np.fromiter((tokenizer.count(tokens) for tokens, _ in encoded), np.int64,
                             len(encoded))
        mask = None if all(mask is None for _, mask in encoded) else np.frombuffer(
            b"".join(mask or b"\x01" * tokenizer.count(tokens) for tokens, mask in encoded),
            np.uint8)
        return _Documents(ids, mask, counts, *_flat([doc.json for doc in batch]))
    if compiled:  # numba: see Family.compiled
        from corpus_gen.core.unit_json import json_objects
        from corpus_gen.core.unit_tokens import unit_tokens

        table = tokenizer.unit_table(batch.units, batch.ids)
        ids, mask, counts = unit_tokens(table, batch)
        return _Documents(ids, mask, counts, *json_objects(batch),
                          _target_tokens(tokenizer, batch, len(ids)))
    ids, unit_counts = tokenizer.encode_units(batch.units, batch.ids)
    ends = np.concatenate([[0], np.cumsum(unit_counts)])[batch.offsets]
    mask = None if batch.loss is None else np.repeat(batch.loss.astype(np.uint8), unit_counts)
    # the same bytes as orjson.dumps({"text": text, **meta}): text first, then meta's fields
    return _Documents(ids, mask, np.diff(ends), *_flat(
        [f'{{"text":"{text}",{meta[1:]}'.encode()
         for text, meta in zip(batch.texts(json=True), batch.metas)]),
        _target_tokens(tokenizer, batch, len(ids)))


def _target_tokens(tokenizer: CorpusTokenizer, batch: UnitBatch, tokens: int
                   ) -> np.ndarray | None:
    """The tokens of the batch's targets (None without), one per input token: targets need every
    unit, of the input and of the targets, to be one token."""
    if batch.targets is None:
        return None
    table = tokenizer.unit_table(batch.units, batch.targets)
    if tokens != len(batch.ids) or (table.length[batch.targets] != 1).any():
        raise CorpusError("per-position targets need every unit to be one token; this "
                          "family's vocabulary spells some in several")
    return table.rows[batch.targets, 0]


def _flat(objects: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """`_Documents.objects` and `object_bounds` of these objects."""
    lengths = np.fromiter(map(len, objects), np.int64, len(objects)) + 1
    return (np.frombuffer(b",".join(objects) + b",", dtype=np.uint8),
            np.concatenate([[0], np.cumsum(lengths)]))


def _encoded(tokenizer: CorpusTokenizer, doc: Document) -> tuple[bytes, bytes | None]:
    """The document's token ids (array bytes) and loss mask (uint8 bytes; None: all count)."""
    if doc.masked:
        return tokenizer.encode_masked(doc.text, doc.masked)
    return tokenizer.encode_bytes(doc.text), None


def _join(parts: list[_Documents]) -> _Documents:
    if len(parts) == 1:
        return parts[0]
    masks = None if all(p.mask is None for p in parts) else [p.full_mask() for p in parts]
    shifts = np.cumsum([0] + [len(p.objects) for p in parts[:-1]])
    targets = None if parts[0].targets is None else np.concatenate([p.targets for p in parts])
    return _Documents(np.concatenate([p.ids for p in parts]),
                      None if masks is None else np.concatenate(masks),
                      np.concatenate([p.counts for p in parts]),
                      np.concatenate([p.objects for p in parts]),
                      np.concatenate([[0]] + [p.object_bounds[1:] + shift
                                              for p, shift in zip(parts, shifts)]), targets)


def _npy_slices(array: np.ndarray, bounds: list[int]) -> list[bytes]:
    """The `.npy` members of array[bounds[i]:bounds[i + 1]], one per i."""
    data, item, dtype = memoryview(array.tobytes()), array.itemsize, array.dtype.str
    return [npy_bytes(data[a * item : b * item], dtype, b - a)
            for a, b in zip(bounds, bounds[1:])]


@functools.lru_cache(maxsize=1 << 12)
def _full_mask(n: int) -> bytes:
    """`mask.npy` of n tokens that all count, shared by the documents of that length."""
    return npy_bytes(b"\x01" * n, "|u1", n)


def _single_samples(documents: Iterator[_Documents], position: int) -> Iterator[Samples]:
    """A sample per document (docs_per_sample 1), from stream position `position` on."""
    for docs in documents:
        bounds = docs.token_bounds().tolist()
        masks = (list(map(_full_mask, docs.counts.tolist())) if docs.mask is None
                 else _npy_slices(docs.mask, bounds))
        keys = [f"{p:010d}" for p in range(position, position + len(docs))]
        objects, at = memoryview(docs.objects), docs.object_bounds.tolist()
        jsons = [objects[a:b - 1] for a, b in zip(at, at[1:])]  # each without its comma
        members = {"json": jsons, "ids.npy": _npy_slices(docs.ids, bounds), "mask.npy": masks}
        if docs.targets is not None:
            members[TARGETS] = _npy_slices(docs.targets, bounds)
        yield keys, members, docs.counts
        position += len(docs)


def _multi_samples(documents: Iterator[_Documents], position: int, per_sample: int
                   ) -> Iterator[Samples]:
    """Samples of `per_sample` consecutive documents from stream position `position` on, the
    last holding the remainder. A batch's documents wait in `held` until they fill samples."""
    held: list[_Documents] = []
    count = 0
    for docs in documents:
        held.append(docs)
        count += len(docs)
        if count >= per_sample:
            docs = _join(held)
            whole = count - count % per_sample
            yield _grouped(docs, whole, per_sample, position)
            held = [_rest(docs, whole)] if count > whole else []
            count, position = count - whole, position + whole
    if count:
        yield _grouped(_join(held), count, per_sample, position)


def _grouped(docs: _Documents, stop: int, per_sample: int, position: int) -> Samples:
    """Documents [0, stop) of `docs` as samples of `per_sample` (the last may hold fewer), the
    first document at stream position `position`."""
    firsts = list(range(0, stop, per_sample)) + [stop]  # each sample's first document, the end
    tokens = docs.token_bounds()[firsts].tolist()
    objects, at = memoryview(docs.objects), docs.object_bounds[firsts].tolist()
    members = {
        # documents' objects joined as orjson.dumps joins a list's items: commas, no spaces
        "json": [b"[" + objects[a:b - 1] + b"]" for a, b in zip(at, at[1:])],
        "ids.npy": _npy_slices(docs.ids, tokens),
        "mask.npy": _npy_slices(docs.full_mask(), tokens),
        LENGTHS: _npy_slices(docs.counts[:stop].astype(LENGTHS_DTYPE), firsts),
    }
    if docs.targets is not None:
        members[TARGETS] = _npy_slices(docs.targets, tokens)
    keys = [f"{position + first:010d}" for first in firsts[:-1]]
    return keys, members, docs.counts[:stop]


def _rest(docs: _Documents, start: int) -> _Documents:
    """Documents [start, end) of `docs`."""
    at, object_at = int(docs.counts[:start].sum()), docs.object_bounds[start]
    return _Documents(docs.ids[at:], None if docs.mask is None else docs.mask[at:],
                      docs.counts[start:], docs.objects[object_at:],
                      docs.object_bounds[start:] - object_at,
                      None if docs.targets is None else docs.targets[at:])


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
