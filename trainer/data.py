"""Packed training batches from a physlm corpus directory, resumable batch for batch.

Packing. An epoch's documents, each followed by EOS, form one token stream. With
`split_documents` the stream is cut into windows of ctx+1 tokens overlapping by one (window k is
stream[k*ctx : k*ctx+ctx+1]; inputs w[:-1], labels w[1:]), so every token but the first is a
label exactly once and a document may run on into the next window. Without it each window holds
whole documents, greedily in order, padded with EOS that never counts; packing restarts at each
shard so that a shard's window count is a fixed number.

Targets. A corpus whose family gives per-position targets (shards with `targets.npy`: k-hop
induction's label at each position is not the next token) packs the same windows, but position
p's label is targets[p] where its mask counts (labels w_targets[:-1]); an EOS predicts nothing.

Order and ranks. Epoch e reads the shards in an order drawn from (seed, e), or in manifest order.
- At least as many shards as ranks: rank r reads shards r, r+W, ... of the epoch's order; the last
  len % W shards of that order sit the epoch out (different ones each epoch when shuffled).
- Fewer shards than ranks: every rank reads all shards and keeps window w iff w % W == r.
Every rank yields `batches_in_epoch(e)` batches, the most that the emptiest rank can fill (its
tail windows are dropped), so no rank waits in a collective for one that ran out.

State. `state_dict()` is (epoch, batches yielded in it) plus the settings that shape the stream.
It holds no tokens: the position of the next window (shard, sample, token) is recomputed from
the manifest's per-shard token counts, and `load_state_dict` then iteration yields exactly the
batches an uninterrupted run would have yielded next. A checkpoint holds one copy per rank,
`data-rank<r>.json` (trainer/checkpoint.py writes each rank's and reads it back on that rank);
the copies are equal, since every rank yields the same number of batches per epoch.
"""

import bisect
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.manifest import MANIFEST, read_manifest
from corpus_gen.core.shards import (
    LENGTHS,
    LENGTHS_DTYPE,
    TARGETS,
    document_keys,
    read_npy_header,
    tar_members,
)
from corpus_gen.core.verify import file_verifies

IGNORE_INDEX = -100  # label of a position that does not count (torch's cross_entropy default)
_CHUNK = 1024  # documents turned into stream arrays at a time: bounds memory on big shards
_NPY_PEEK = 256  # bytes of a member holding its npy header (128 from our writer)

# tokens, mask (1: in the loss), doc starts and, in a corpus of per-position targets, the targets
Window = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class DataOptions:
    """What shapes the batches; the engine fills it from the experiment's `train` keys of the
    same names. A saved state records all but doc_mask and restart_positions, which number a
    window's segments and positions but do not move the stream."""

    ctx: int  # tokens per window
    micro_batch: int  # windows per batch
    seed: int = 0  # draws each epoch's shard order
    split_documents: bool = True  # documents may continue into the next window
    shuffle_shards: bool = True
    doc_mask: bool = True  # doc_ids number the documents of a window (else all 0)
    restart_positions: bool = True  # position ids restart per document


@dataclass
class _Shard:
    """A memory-mapped shard indexed by walking its tar headers: token ids and masks are read in
    place and the json members are never decoded. Document i has `lengths[i]` tokens, at byte
    `ids_at[i]` (its mask at `mask_at[i]`, its targets at `targets_at[i]` in a corpus of
    per-position targets); a sample of several documents (a `lengths.npy` member) is indexed
    document by document."""

    path: Path
    keys: list[str]
    lengths: np.ndarray
    ids_at: list[int]
    mask_at: list[int]
    targets_at: list[int] | None
    buffer: mmap.mmap
    dtype: np.dtype
    vocab_size: int

    @classmethod
    def open(cls, path: Path, dtype: np.dtype, vocab_size: int) -> "_Shard":
        with open(path, "rb") as f:
            try:
                buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                raise CorpusError(f"{path}: empty; run physlm verify") from None
        kinds = {b"ids.npy": dtype.str, b"mask.npy": np.dtype(np.uint8).str,
                 LENGTHS.encode(): LENGTHS_DTYPE, TARGETS.encode(): dtype.str}  # npy item types
        found: dict[bytes, list[tuple[int, int]]] = {ext: [] for ext in kinds}
        keys = []
        try:
            for at, name, size in tar_members(buffer):
                key, _, ext = name.partition(b".")
                if ext not in kinds:
                    continue
                npy = read_npy_header(buffer[at : at + _NPY_PEEK], kinds[ext], size)
                if npy is None:
                    raise CorpusError(
                        f"{path}: {name.decode()} is not a 1-D {kinds[ext]} npy array")
                header_length, items = npy
                found[ext].append((at + header_length, items))
                if ext == b"ids.npy":
                    keys.append(key.decode())
        except ValueError as exc:  # a corrupt header or a truncated archive
            raise CorpusError(f"{path}: {exc}") from None
        ids, masks, targets = found[b"ids.npy"], found[b"mask.npy"], found[TARGETS.encode()]
        if [n for _, n in ids] != [n for _, n in masks]:
            raise CorpusError(f"{path}: ids.npy and mask.npy members do not pair up")
        if targets and [n for _, n in ids] != [n for _, n in targets]:
            raise CorpusError(f"{path}: ids.npy and {TARGETS} members do not pair up")
        lengths = np.array([n for _, n in ids], dtype=np.int64)
        starts = [[a for a, _ in ids], [a for a, _ in masks]] + ([[a for a, _ in targets]]
                                                                 if targets else [])
        documents = found[LENGTHS.encode()]
        if documents:  # samples of several documents: index each document
            keys, lengths, starts = _expand_samples(path, buffer, documents, keys, lengths,
                                                    starts, dtype)
        ids_at, mask_at, *targets_at = starts
        return cls(path, keys, lengths, ids_at, mask_at, targets_at[0] if targets_at else None,
                   buffer, dtype, vocab_size)

    def stream(self, start: int, stop: int, eos: int) -> Window:
        """Documents [start, stop), each followed by EOS. mask[p] says whether token p counts as
        the label of position p - 1 (EOS does); with per-position targets, whether targets[p]
        counts as the label of position p itself (EOS's, which would predict the next
        document, does not)."""
        ends = np.cumsum(self.lengths[start:stop] + 1)
        tokens = np.full(int(ends[-1]), eos, dtype=self.dtype)
        targeted = self.targets_at is not None
        mask = (np.zeros if targeted else np.ones)(len(tokens), dtype=np.uint8)
        first = np.zeros(len(tokens), dtype=bool)
        targets = np.full(len(tokens), eos, dtype=self.dtype) if targeted else None
        for i, end in zip(range(start, stop), ends.tolist()):
            n = int(self.lengths[i])
            begin = end - 1 - n
            tokens[begin : end - 1] = np.frombuffer(self.buffer, self.dtype, n, self.ids_at[i])
            mask[begin : end - 1] = np.frombuffer(self.buffer, np.uint8, n, self.mask_at[i])
            first[begin] = True
            if targeted:
                targets[begin : end - 1] = np.frombuffer(self.buffer, self.dtype, n,
                                                         self.targets_at[i])
        if int(tokens.max()) >= self.vocab_size:  # an embedding lookup would fail naming nothing
            bad = int(np.searchsorted(ends, int(np.argmax(tokens >= self.vocab_size)), "right"))
            raise CorpusError(
                f"{self.path}: sample {self.keys[start + bad]} holds a token id >= the vocabulary "
                f"size {self.vocab_size} of its manifest; the corpus does not match its tokenizer")
        if targeted and int(targets.max()) >= self.vocab_size:
            raise CorpusError(f"{self.path}: a {TARGETS} member holds a token id >= the "
                              f"vocabulary size {self.vocab_size} of its manifest")
        return (tokens, mask, first) + ((targets,) if targeted else ())

    def parts(self, offset: int, eos: int) -> Iterator[Window]:
        """The shard's stream from token `offset` on, a chunk of documents at a time."""
        ends = np.cumsum(self.lengths + 1)
        doc = int(np.searchsorted(ends, offset, side="right"))
        skip = offset - (int(ends[doc - 1]) if doc else 0)
        for start in range(doc, len(self.lengths), _CHUNK):
            part = self.stream(start, min(start + _CHUNK, len(self.lengths)), eos)
            yield tuple(a[skip:] for a in part)
            skip = 0


def _expand_samples(path: Path, buffer: mmap.mmap, counts: list[tuple[int, int]],
                    keys: list[str], sizes: np.ndarray, starts: list[list[int]],
                    dtype: np.dtype) -> tuple[list[str], np.ndarray, list[list[int]]]:
    """(keys, lengths, starts) of each document of samples that hold several: sample i has
    `sizes[i]` tokens, its members' data at starts[m][i] for the members ids.npy, mask.npy and
    (with per-position targets) targets.npy, and its documents' token counts are the
    `counts[i]` = (byte offset, documents) uint32 array of its lengths.npy member."""
    if len(counts) != len(keys):
        raise CorpusError(f"{path}: {len(counts)} {LENGTHS} members for {len(keys)} samples")
    per_sample = np.array([n for _, n in counts], dtype=np.int64)
    lengths = np.concatenate([np.frombuffer(buffer, LENGTHS_DTYPE, n, at)
                              for at, n in counts]).astype(np.int64)  # [documents]
    sample = np.repeat(np.arange(len(keys)), per_sample)  # [documents] the sample holding each
    totals = np.bincount(sample, weights=lengths, minlength=len(keys)).astype(np.int64)
    if not np.array_equal(totals, sizes):
        bad = int(np.flatnonzero(totals != sizes)[0])
        raise CorpusError(f"{path}: sample {keys[bad]}: {LENGTHS} adds up to {totals[bad]} "
                          f"tokens, ids.npy holds {sizes[bad]}")
    # a document's offset inside its sample: tokens before it, less those of earlier samples
    before = np.cumsum(lengths) - lengths - np.concatenate([[0], np.cumsum(sizes)])[sample]
    items = [dtype.itemsize, 1, dtype.itemsize]  # bytes a token of ids, mask, targets
    starts = [(np.array(at, np.int64)[sample] + before * size).tolist()
              for at, size in zip(starts, items)]
    doc_keys = [k for key, n in zip(keys, per_sample.tolist()) for k in document_keys(key, n)]
    return doc_keys, lengths, starts


def _pack(lengths: np.ndarray, ctx: int) -> list[int]:
    """Greedy in-order packing of whole documents (each + EOS) into windows of ctx+1 tokens:
    the first document of each window, then len(lengths)."""
    bounds, used = [], ctx + 1
    for i, n in enumerate(lengths.tolist()):
        if used + n + 1 > ctx + 1:
            bounds.append(i)
            used = 0
        used += n + 1
    return bounds + [len(lengths)]


class PackedBatches:
    """Endless micro-batches for one rank: `input_ids`, `labels` (next token, IGNORE_INDEX where
    it does not count), `position_ids` and `doc_ids` (segment index within the window), each
    [B, T] int64. Iterating advances this object's position; run one iterator at a time."""

    def __init__(self, corpus: str | Path, options: DataOptions, rank: int = 0,
                 world_size: int = 1):
        if options.ctx < 1 or options.micro_batch < 1:
            raise ValueError(
                f"ctx={options.ctx} and micro_batch={options.micro_batch} must be >= 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is outside world_size={world_size}")
        self.root, self.options = Path(corpus), options
        self.rank, self.world_size = rank, world_size
        manifest = read_manifest(self.root)
        tokenizer = manifest["tokenizer"]
        self.vocab_size, self.eos_id = int(tokenizer["vocab_size"]), int(tokenizer["eos_id"])
        self._dtype = np.dtype(tokenizer["dtype"])
        self._fingerprint = manifest.get("fingerprint")
        self._shards = manifest["shards"]
        if sum(entry["records"] for entry in self._shards) == 0:
            raise CorpusError(f"{self.root / MANIFEST}: the corpus holds no documents")
        for entry in self._shards:
            if not (self.root / entry["name"]).is_file():
                raise CorpusError(f"{self.root / entry['name']}: shard listed in "
                                  f"{self.root / MANIFEST} is missing")
        self._targeted: bool | None = None  # per-position targets: known at the first shard
        # documents plus their EOS, per shard and in one pass over the corpus
        stream_lengths = [entry["tokens"] + entry["records"] for entry in self._shards]
        self._stream_lengths = np.array(stream_lengths, dtype=np.int64)
        self.tokens_per_epoch = sum(stream_lengths)
        # whole documents: per shard, the stream tokens up to the end of each of its windows
        self._window_ends = (None if options.split_documents
                             else [self._whole_window_ends(i) for i in range(len(self._shards))])
        # what locates a window: stream tokens per shard, or whole-document windows per shard
        self._extent = np.array(stream_lengths if options.split_documents
                                else [len(ends) for ends in self._window_ends], dtype=np.int64)
        self._by_shard = len(self._shards) >= world_size
        self._epoch = self._batch = 0
        # [e]: stream tokens that epochs before e hold in full (tokens_read runs at every log)
        self._read_before = [0]
        self._batches(0)  # a corpus too small for one batch fails here, not at the first step

    # ---- order and counts -------------------------------------------------------------------

    def _rank_shards(self, epoch: int) -> list[list[int]]:
        """The shard indices each rank reads in `epoch`, in reading order."""
        n, world = len(self._shards), self.world_size
        order = (np.random.default_rng([self.options.seed, epoch]).permutation(n)
                 if self.options.shuffle_shards else np.arange(n))
        if not self._by_shard:
            return [order.tolist()] * world
        kept = order[: n - n % world]
        return [kept[r::world].tolist() for r in range(world)]

    def _windows_in(self, shards: list[int]) -> int:
        total = int(self._extent[shards].sum())
        return max(total - 1, 0) // self.options.ctx if self.options.split_documents else total

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches every rank yields in `epoch` (the same number on all ranks)."""
        lists = self._rank_shards(epoch)
        if self._by_shard:
            windows = min(self._windows_in(shards) for shards in lists)
        else:
            windows = self._windows_in(lists[0]) // self.world_size
        return windows // self.options.micro_batch

    def tokens_in(self, epoch: int, batches: int) -> int:
        """Stream tokens (documents and their EOS, not padding) that the first `batches` batches
        of `epoch` hold on all ranks together: what training reads of the corpus. A window of
        split documents holds ctx of them (its inputs; its last label is the next window's
        first input), a window of whole documents its documents."""
        windows = batches * self.options.micro_batch
        if self.options.split_documents:
            return windows * self.options.ctx * self.world_size
        lists = self._rank_shards(epoch)
        if not self._by_shard:  # the ranks share out the windows of one list
            return self._whole_tokens(lists[0], windows * self.world_size)
        return sum(self._whole_tokens(shards, windows) for shards in lists)

    def tokens_read(self) -> int:
        """Stream tokens that every batch yielded so far (from epoch 0 to this position) held
        on all ranks together."""
        while len(self._read_before) <= self._epoch:
            epoch = len(self._read_before) - 1
            self._read_before.append(self._read_before[-1]
                                     + self.tokens_in(epoch, self.batches_in_epoch(epoch)))
        return self._read_before[self._epoch] + self.tokens_in(self._epoch, self._batch)

    def batches_to_read(self, tokens: int) -> int:
        """The fewest batches per rank, from epoch 0 on, whose windows hold at least `tokens`
        stream tokens on all ranks together (`tokens_in`): what training must take of the
        stream to read so much of the corpus, epoch boundaries, dropped tails and padding
        counted as the iterator has them."""
        epoch, before, read = 0, 0, 0  # batches and tokens of the epochs before `epoch`
        while True:
            batches = self._batches(epoch)
            whole = self.tokens_in(epoch, batches)
            if read + whole >= tokens:
                break
            epoch, before, read = epoch + 1, before + batches, read + whole
        # the first batch count of this epoch that reaches it (tokens_in only grows with it)
        return before + bisect.bisect_left(range(batches + 1), tokens,
                                           key=lambda b: read + self.tokens_in(epoch, b))

    def _batches(self, epoch: int) -> int:
        batches = self.batches_in_epoch(epoch)
        if batches == 0:
            raise CorpusError(
                f"{self.root}: epoch {epoch} has too few tokens for one batch per rank "
                f"(micro_batch={self.options.micro_batch}, ctx={self.options.ctx}, "
                f"world_size={self.world_size}, {len(self._shards)} shards)")
        return batches

    def epoch_shards(self, epoch: int) -> list[str]:
        """Names of the shards this rank reads in `epoch`, in reading order."""
        return [self._shards[i]["name"] for i in self._rank_shards(epoch)[self.rank]]

    # ---- reading ----------------------------------------------------------------------------

    def _open(self, index: int) -> _Shard:
        entry = self._shards[index]
        path = self.root / entry["name"]
        # a damaged shard would train without an error (a flipped byte is still a valid id):
        # each shard is hashed once per process before its first use (cost: BENCHMARKS.md)
        if not file_verifies(path, entry["sha256"]):
            raise CorpusError(f"{path}: sha256 differs from {self.root / MANIFEST}'s (damaged or "
                              f"modified); run physlm verify {self.root}")
        shard = _Shard.open(path, self._dtype, self.vocab_size)
        targeted = shard.targets_at is not None
        if self._targeted is None:
            self._targeted = targeted
        elif targeted != self._targeted:  # a window would mix the two kinds of label
            raise CorpusError(f"{path}: {'has' if targeted else 'lacks'} {TARGETS} members where "
                              f"other shards of {self.root} do not; run physlm verify")
        # counts come from the manifest; a shard that disagrees would desynchronise the ranks
        if len(shard.keys) != entry["records"] or int(shard.lengths.sum()) != entry["tokens"]:
            raise CorpusError(
                f"{shard.path}: {len(shard.keys)} documents / {int(shard.lengths.sum())} tokens, "
                f"manifest says {entry['records']} / {entry['tokens']}; run physlm verify")
        return shard

    def _whole_bounds(self, shard: _Shard) -> list[int]:
        """Window bounds of `shard` packed whole (see `_pack`); a document over ctx is an error."""
        ctx = self.options.ctx
        too_long = np.flatnonzero(shard.lengths > ctx)
        if too_long.size:
            i = int(too_long[0])
            raise CorpusError(
                f"{shard.path}: sample {shard.keys[i]} has {int(shard.lengths[i])} tokens, more "
                f"than ctx={ctx} allows with split_documents=false; use split_documents=true or "
                f"a larger ctx")
        return _pack(shard.lengths, ctx)

    def _whole_window_ends(self, index: int) -> np.ndarray:
        """Shard `index` packed whole: the stream tokens (documents and their EOS) from its start
        to the end of each of its windows."""
        shard = self._open(index)
        last = np.array(self._whole_bounds(shard)[1:], dtype=np.int64) - 1  # each window's
        return np.cumsum(shard.lengths + 1)[last]

    def _whole_tokens(self, shards: list[int], windows: int) -> int:
        """Stream tokens in the first `windows` whole-document windows of `shards`."""
        if windows == 0:
            return 0
        i, offset = self._locate(shards, windows - 1)  # the last of them
        return int(self._stream_lengths[shards[:i]].sum() + self._window_ends[shards[i]][offset])

    def _locate(self, shards: list[int], at: int) -> tuple[int, int]:
        """(position in `shards`, offset inside that shard) of extent unit `at`."""
        ends = np.cumsum(self._extent[shards])
        i = int(np.searchsorted(ends, at, side="right"))
        return i, at - (int(ends[i - 1]) if i else 0)

    def _split_windows(self, shards: list[int], first: int) -> Iterator[Window]:
        """Windows `first`, `first`+1, ... of the stream of `shards`."""
        ctx = self.options.ctx
        start, offset = self._locate(shards, first * ctx)
        held: Window | None = None
        for index in shards[start:]:
            for part in self._open(index).parts(offset, self.eos_id):
                held = part if held is None else tuple(np.concatenate(p) for p in zip(held, part))
                count = (len(held[0]) - 1) // ctx
                for k in range(count):
                    yield tuple(a[k * ctx : k * ctx + ctx + 1] for a in held)
                held = tuple(a[count * ctx :] for a in held)  # next window starts here
            offset = 0

    def _whole_windows(self, shards: list[int], first: int) -> Iterator[Window]:
        """Windows `first`, `first`+1, ... of whole documents, packing each shard on its own."""
        size = self.options.ctx + 1
        start, skip = self._locate(shards, first)
        for index in shards[start:]:
            shard = self._open(index)
            bounds = self._whole_bounds(shard)
            for lo, hi in zip(bounds[skip:-1], bounds[skip + 1 :]):
                part = shard.stream(lo, hi, self.eos_id)
                n = len(part[0])
                # padded with EOS (targets too) that never counts (mask 0)
                window = tuple(np.full(size, fill, a.dtype)
                               for a, fill in zip(part, (self.eos_id, 0, False, self.eos_id)))
                for out, values in zip(window, part):
                    out[:n] = values
                window[2][n : n + 1] = True  # the padding is a segment of its own
                yield window
            skip = 0

    def _collate(self, windows: list[Window]) -> dict[str, torch.Tensor]:
        tokens, mask, first, *targets = (np.stack(column) for column in zip(*windows))
        tokens = tokens.astype(np.int64)
        if targets:  # per-position targets: position p's label is its own target
            labels = np.where(mask[:, :-1].astype(bool), targets[0][:, :-1].astype(np.int64),
                              IGNORE_INDEX)
        else:  # the next token
            labels = np.where(mask[:, 1:].astype(bool), tokens[:, 1:], IGNORE_INDEX)
        starts = first[:, :-1].copy()
        starts[:, 0] = True  # a window opens a segment, even in the middle of a document
        steps = np.arange(self.options.ctx)
        doc_ids = (np.cumsum(starts, axis=1) - 1 if self.options.doc_mask
                   else np.zeros(starts.shape, np.int64))
        positions = (steps - np.maximum.accumulate(np.where(starts, steps, 0), axis=1)
                     if self.options.restart_positions else np.broadcast_to(steps, starts.shape))
        batch = {"input_ids": tokens[:, :-1], "labels": labels, "position_ids": positions,
                 "doc_ids": doc_ids}
        return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.int64))
                for k, v in batch.items()}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        make_windows = self._split_windows if self.options.split_documents else self._whole_windows
        size = self.options.micro_batch
        stride, offset = (1, 0) if self._by_shard else (self.world_size, self.rank)
        while True:
            epoch, start = self._epoch, self._batch
            batches = self._batches(epoch)
            shards = self._rank_shards(epoch)[self.rank]
            windows = islice(make_windows(shards, offset + start * size * stride), 0, None, stride)
            for b in range(start, batches):
                batch = self._collate([next(windows) for _ in range(size)])
                self._epoch, self._batch = (epoch, b + 1) if b + 1 < batches else (epoch + 1, 0)
                yield batch

    # ---- state ------------------------------------------------------------------------------

    def _identity(self) -> dict:
        """Everything a saved position depends on besides (epoch, batch)."""
        o = self.options
        return {"corpus": self._fingerprint, "ctx": o.ctx, "micro_batch": o.micro_batch,
                "split_documents": o.split_documents, "shuffle_shards": o.shuffle_shards,
                "seed": o.seed, "world_size": self.world_size}

    def state_dict(self) -> dict:
        """The position after the last batch yielded: the next batch is `batch` of `epoch`."""
        return {"epoch": self._epoch, "batch": self._batch, **self._identity()}

    def load_state_dict(self, state: dict) -> None:
        for key, value in self._identity().items():
            if state.get(key) != value:
                raise ValueError(f"data state was saved with {key}={state.get(key)!r}, "
                                 f"this run has {key}={value!r}")
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or not 0 <= batch < self._batches(epoch):
            raise ValueError(f"data state epoch={epoch} batch={batch} is outside the corpus")
        self._epoch, self._batch = epoch, batch
