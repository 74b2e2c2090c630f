"""WebDataset shards: tar files of samples `{key}.json`, `{key}.ids.npy`, `{key}.mask.npy`.

A sample holds one document, or with the corpus key `docs_per_sample` n > 1 up to n consecutive
documents of its shard (a sample never crosses a shard; the shard's last holds the remainder):
- one document: `json` its object (`{"text": ..., **meta}`), `ids.npy` its token ids (uint16,
  or uint32 past 65,536 tokens), `mask.npy` its loss mask (uint8, 1: counts); the key is its
  stream position, 10 digits.
- several: `json` a JSON array of the documents' objects (each the object above), `ids.npy`
  and `mask.npy` the documents' arrays concatenated, and `lengths.npy` (uint32) the tokens of
  each document; the key is the stream position of its first document. What a member costs
  besides its data (a 512-byte tar header, padding to 512 bytes, a 128-byte npy header: ~2-3 KB
  a sample) is then paid once per sample, not per document.
- a family with per-position targets (`UnitBatch.targets`: what each position is trained to
  predict, not the next token) adds `targets.npy`, parallel to `ids.npy` (the same dtype).
Readers keep the per-document view: `read_shard` yields one document at a time, keyed by its
own stream position (`document_keys`), and so does the trainer's reader (trainer/data.py).

`ShardWriter` writes the same bytes as `webdataset.TarWriter(f, encoder=False, mtime=0)` (USTAR
members, user/group "bigdata", mode 0444, sorted member order, 10 KiB record padding) — a test
checks this byte for byte — but builds the 512-byte headers of a whole batch of samples at once
with numpy. The webdataset writer spends ~65 us per member in `tarfile`'s generic header code,
which alone would cap a core at ~5K samples/s; see BENCHMARKS.md for the two side by side.
Shards are read back with webdataset, imported only there: it imports torch, which `physlm gen`
need not load. The trainer reads them in place instead, through `tar_members` and
`read_npy_header`, which read the layout written here.
"""

import itertools
import mmap
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from corpus_gen.core.errors import CorpusError

BLOCK = 512
RECORD = 20 * BLOCK  # tar "record": tarfile pads the archive to a multiple of this
LENGTHS, LENGTHS_DTYPE = "lengths.npy", "<u4"  # a multi-document sample's tokens per document
TARGETS = "targets.npy"  # per-position targets, parallel to ids.npy
_NAME_LEN, _SIZE, _CHECKSUM = 100, slice(124, 136), slice(148, 156)
_VARIED = _CHECKSUM.stop  # name, mode, ids, size, mtime, checksum: the fields before the type


def _header_template() -> np.ndarray:
    """A regular-file header with empty name and size, and the checksum field as spaces (which
    is how the checksum itself is computed)."""
    header = bytearray(BLOCK)
    header[100:124] = b"0000444\x00" + b"0000000\x00" * 2  # mode 0444, uid 0, gid 0
    header[136:148] = b"00000000000\x00"  # mtime 0: reproducible archives
    header[_CHECKSUM] = b" " * 8
    header[156:157] = b"0"  # regular file
    header[257:265] = b"ustar\x0000"
    header[265:272] = b"bigdata"  # uname
    header[297:304] = b"bigdata"  # gname
    return np.frombuffer(bytes(header), dtype=np.uint8)


_TEMPLATE = _header_template()
_TEMPLATE_END = int(np.flatnonzero(_TEMPLATE)[-1]) + 1  # the bytes after are zero
_TEMPLATE_SUM = int(_TEMPLATE.sum())  # name and size fields zero, checksum field eight spaces


def _octal_digits(values: np.ndarray, width: int) -> np.ndarray:
    """ASCII octal digits of each value, zero-padded to `width` (most significant first)."""
    shifts = np.arange(3 * (width - 1), -1, -3, dtype=np.int64)
    return ((values[:, None] >> shifts) & 7).astype(np.uint8) + ord("0")


_NPY_HEADERS: dict[tuple[str, int], bytes] = {}


def npy_bytes(array_bytes: bytes | memoryview, dtype: str, length: int) -> bytes:
    """A 1-D array as `.npy` file bytes, identical to `np.save` (format 1.0), header cached."""
    key = (dtype, length)
    header = _NPY_HEADERS.get(key)
    if header is None:
        text = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': ({length},), }}"
        pad = 64 - (10 + len(text) + 1) % 64
        text = text + " " * pad + "\n"
        header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")
        if len(_NPY_HEADERS) < 1 << 16:
            _NPY_HEADERS[key] = header
    return header + array_bytes


class ShardWriter:
    """Append samples to one tar stream; `close()` writes the end-of-archive blocks."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.offset = 0
        self.samples = 0

    def write(self, key: str, members: dict[str, bytes]) -> None:
        """Write one sample; members go in sorted extension order, as webdataset writes them."""
        self.write_batch([key], {ext: [data] for ext, data in members.items()})

    def write_batch(self, keys: Sequence[str], members: dict[str, Sequence[bytes]]) -> None:
        """Write samples keys[i] with members {ext: column[i]}, headers built all at once."""
        n = len(keys)
        exts = sorted(members)
        key_len = len(keys[0])
        joined = "".join(keys).encode()
        if len(joined) != n * key_len:
            raise ValueError("a batch needs ASCII keys of equal length")
        if key_len + 1 + max(map(len, exts)) > _NAME_LEN:
            raise ValueError(f"tar member names longer than {_NAME_LEN} bytes: {keys[0]!r}")
        # Only a header's first _VARIED bytes differ between members (name, size, checksum);
        # they are built for the whole batch, the rest of the template is copied as it is.
        headers = np.tile(_TEMPLATE[:_VARIED], (n, len(exts), 1))
        key_matrix = np.frombuffer(joined, dtype=np.uint8).reshape(n, key_len)
        suffixes = [("." + ext).encode() for ext in exts]
        for j, suffix in enumerate(suffixes):
            headers[:, j, :key_len] = key_matrix
            headers[:, j, key_len : key_len + len(suffix)] = np.frombuffer(suffix, dtype=np.uint8)
        columns = [members[ext] for ext in exts]
        sizes = np.stack([np.fromiter(map(len, column), dtype=np.int64, count=n)
                          for column in columns], axis=1)
        size_digits = _octal_digits(sizes.ravel(), 11).reshape(n, len(exts), 11)
        headers[:, :, _SIZE.start : _SIZE.stop - 1] = size_digits
        # A header's checksum is the sum of its bytes: the template's, the name's and the size
        # digits'. Adding up these few is cheaper than a pass over every header byte.
        checksums = (_TEMPLATE_SUM + np.array([sum(suffix) for suffix in suffixes])
                     + key_matrix.sum(axis=1, dtype=np.int64)[:, None]
                     + size_digits.sum(axis=2, dtype=np.int64))
        headers[:, :, _CHECKSUM.start : _CHECKSUM.start + 6] = _octal_digits(
            checksums.ravel(), 6).reshape(n, len(exts), 6)
        headers[:, :, _CHECKSUM.start + 6] = 0  # then NUL and the space already there
        # Every member starts on a block boundary: lay the batch out as blocks, zeroed (that is
        # the padding), headers placed in one step, each member's data copied in after its header
        blocks = 1 + (sizes.ravel() + BLOCK - 1) // BLOCK
        header_at = np.cumsum(blocks) - blocks
        chunk = np.zeros((int(blocks.sum()), BLOCK), dtype=np.uint8)
        chunk[header_at, :_VARIED] = headers.reshape(-1, _VARIED)
        chunk[header_at, _VARIED:_TEMPLATE_END] = _TEMPLATE[_VARIED:_TEMPLATE_END]
        view = memoryview(chunk.reshape(-1))
        data_at = ((header_at + 1) * BLOCK).tolist()
        for at, data in zip(data_at, itertools.chain.from_iterable(zip(*columns))):
            view[at : at + len(data)] = data
        self.stream.write(view)
        self.offset += len(view)
        self.samples += n

    def close(self) -> None:
        tail = 2 * BLOCK
        remainder = (self.offset + tail) % RECORD
        if remainder:
            tail += RECORD - remainder
        self.stream.write(b"\x00" * tail)
        self.offset += tail


def tar_members(buffer: bytes | mmap.mmap) -> Iterator[tuple[int, bytes, int]]:
    """(offset of its data, name, data size) of each member of the tar archive in `buffer`, read
    from the header fields ShardWriter fills, up to the end-of-archive blocks. ValueError on a
    size that is not octal digits or a member running past the end (a truncated archive)."""
    at = 0
    while at + BLOCK <= len(buffer) and buffer[at]:  # a zero block ends the archive
        try:
            size = int(buffer[at + _SIZE.start : at + _SIZE.stop].rstrip(b"\0 "), 8)
        except ValueError:
            raise ValueError(f"corrupt tar header at byte {at}") from None
        yield at + BLOCK, buffer[at : at + _NAME_LEN].rstrip(b"\0"), size
        at += BLOCK + -(-size // BLOCK) * BLOCK  # data padded to whole blocks
    if at > len(buffer):
        raise ValueError("truncated; run physlm verify")


def read_npy_header(data: bytes, dtype: str, size: int) -> tuple[int, int] | None:
    """(header length, items) of the 1-D `dtype` array in a `size`-byte `.npy` member that starts
    with `data`, if its header is the one npy_bytes writes for such an array; None otherwise."""
    length = 10 + int.from_bytes(data[8:10], "little")  # magic, version, then the text's length
    items = (size - length) // np.dtype(dtype).itemsize
    return (length, items) if data[:length] == npy_bytes(b"", dtype, items) else None


def document_keys(key: str, count: int) -> list[str]:
    """The keys (stream positions, 10 digits) of the `count` documents of the sample `key`."""
    first = int(key)
    return [f"{position:010d}" for position in range(first, first + count)]


def read_shard(path: Path) -> Iterator[dict]:
    """Documents of one shard as dicts: `__key__` (its stream position), `json` (dict), `ids`
    and `mask` (numpy arrays) and, in a corpus of per-position targets, `targets`; a
    multi-document sample yields each of its documents."""
    import webdataset as wds  # imports torch: only readers pay for it

    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False).decode()
    for sample in dataset:
        ids, mask = np.asarray(sample["ids.npy"]), np.asarray(sample["mask.npy"])
        targets = np.asarray(sample[TARGETS]) if TARGETS in sample else None
        if LENGTHS not in sample:
            yield {"__key__": sample["__key__"], "json": sample["json"], "ids": ids, "mask": mask,
                   **({} if targets is None else {"targets": targets})}
            continue
        lengths = np.asarray(sample[LENGTHS], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        if bounds[-1] != len(ids) or len(mask) != len(ids) or len(sample["json"]) != len(lengths):
            raise CorpusError(f"{path}: sample {sample['__key__']}: its json, ids.npy, mask.npy "
                              f"and {LENGTHS} do not describe the same documents")
        keys = document_keys(sample["__key__"], len(lengths))
        for key, doc, a, b in zip(keys, sample["json"], bounds, bounds[1:]):
            yield {"__key__": key, "json": doc, "ids": ids[a:b], "mask": mask[a:b],
                   **({} if targets is None else {"targets": targets[a:b]})}
