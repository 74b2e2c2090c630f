"""WebDataset shards: tar files of samples `{key}.json`, `{key}.ids.npy`, `{key}.mask.npy`.

`ShardWriter` writes the same bytes as `webdataset.TarWriter(f, encoder=False, mtime=0)` (USTAR
members, user/group "bigdata", mode 0444, sorted member order, 10 KiB record padding) — a test
checks this byte for byte — but builds each 512-byte header from a precomputed template. The
webdataset writer spends ~65 us per member in `tarfile`'s generic header code, which alone would
cap a core at ~5K samples/s; this writer does ~2 us. Shards are read back with webdataset.
"""

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import webdataset as wds

BLOCK = 512
RECORD = 20 * BLOCK  # tar "record": tarfile pads the archive to a multiple of this
_NAME_LEN, _CHKSUM_OFF = 100, 148


def _header_parts() -> tuple[bytes, bytes, bytes, int]:
    """The constant stretches of a header around its name, size and checksum fields."""
    after_name = b"0000444\x00" + b"0000000\x00" * 2  # mode 0444, uid 0, gid 0
    after_size = b"00000000000\x00"  # mtime 0: reproducible archives
    tail = bytearray(BLOCK - _CHKSUM_OFF - 8)  # type flag onwards
    tail[0:1] = b"0"  # regular file
    tail[101:109] = b"ustar\x0000"
    tail[109:116] = b"bigdata"  # uname
    tail[141:148] = b"bigdata"  # gname
    constant_sum = sum(after_name) + sum(after_size) + sum(b"        ") + sum(tail)
    return after_name, after_size, bytes(tail), constant_sum


_AFTER_NAME, _AFTER_SIZE, _TAIL, _CONSTANT_SUM = _header_parts()


class _FieldCache(dict):
    """Formatted numeric fields by value: sizes and checksums repeat across samples."""

    def __init__(self, fmt: bytes):
        super().__init__()
        self.fmt = fmt

    def __missing__(self, value: int) -> tuple[bytes, int]:
        field = self.fmt % value
        if len(self) < 1 << 16:
            self[value] = (field, sum(field))
        return field, sum(field)


_SIZE_FIELDS = _FieldCache(b"%011o\x00")
_CHECKSUM_FIELDS = _FieldCache(b"%06o\x00 ")


def _header_pieces(name: bytes, size: int, name_sum: int) -> tuple[bytes, ...]:
    """The USTAR header Python's tarfile writes for a regular file, as pieces to join."""
    if len(name) > _NAME_LEN:
        raise ValueError(f"tar member name longer than {_NAME_LEN} bytes: {name!r}")
    size_field, size_sum = _SIZE_FIELDS[size]
    # The checksum sums the header with its own field read as eight spaces; it is written as six
    # octal digits, NUL, space.
    checksum = _CHECKSUM_FIELDS[_CONSTANT_SUM + name_sum + size_sum][0]
    return (name.ljust(_NAME_LEN, b"\x00"), _AFTER_NAME, size_field, _AFTER_SIZE, checksum,
            _TAIL)


def tar_header(name: bytes, size: int) -> bytes:
    return b"".join(_header_pieces(name, size, sum(name)))


_PADDING = tuple(b"\x00" * (-n % BLOCK) for n in range(BLOCK))


_NPY_HEADERS: dict[tuple[str, int], bytes] = {}


def npy_bytes(array_bytes: bytes, dtype: str, length: int) -> bytes:
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


_SUFFIXES: dict[str, tuple[bytes, int]] = {}


def _suffix(ext: str) -> tuple[bytes, int]:
    """b'.ext' and its byte sum, computed once per extension."""
    if ext not in _SUFFIXES:
        suffix = b"." + ext.encode()
        _SUFFIXES[ext] = (suffix, sum(suffix))
    return _SUFFIXES[ext]


class ShardWriter:
    """Append samples to one tar stream; `close()` writes the end-of-archive blocks."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.offset = 0
        self.samples = 0

    def write(self, key: str, members: dict[str, bytes]) -> None:
        """Write one sample; members go in sorted extension order, as webdataset writes them."""
        key_bytes = key.encode()
        key_sum = sum(key_bytes)
        parts: list[bytes] = []
        for ext in sorted(members):
            data = members[ext]
            suffix = _suffix(ext)
            size = len(data)
            parts += _header_pieces(key_bytes + suffix[0], size, key_sum + suffix[1])
            parts.append(data)
            parts.append(_PADDING[size % BLOCK])
        chunk = b"".join(parts)
        self.stream.write(chunk)
        self.offset += len(chunk)
        self.samples += 1

    def close(self) -> None:
        tail = 2 * BLOCK
        remainder = (self.offset + tail) % RECORD
        if remainder:
            tail += RECORD - remainder
        self.stream.write(b"\x00" * tail)
        self.offset += tail


def read_shard(path: Path) -> Iterator[dict]:
    """Samples of one shard as dicts: `__key__`, `json` (dict), `ids` and `mask` (numpy arrays)."""
    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False).decode()
    for sample in dataset:
        yield {
            "__key__": sample["__key__"],
            "json": sample["json"],
            "ids": np.asarray(sample["ids.npy"]),
            "mask": np.asarray(sample["mask.npy"]),
        }
