import io

import numpy as np
import webdataset as wds

from corpus_gen.core.shards import ShardWriter, npy_bytes, read_shard


def _samples(n):
    for i in range(n):
        ids = (np.arange(i % 131 + 1) * 7).astype(np.uint16)
        yield f"{i:010d}", {
            "json": b'{"text": "%d"}' % i + b" " * (i % 600),
            "ids.npy": npy_bytes(ids.tobytes(), "<u2", len(ids)),
            "mask.npy": npy_bytes(b"\x01" * len(ids), "|u1", len(ids)),
        }


def test_shard_writer_writes_the_bytes_webdataset_tarwriter_writes():
    ours, theirs = io.BytesIO(), io.BytesIO()
    writer, reference = ShardWriter(ours), wds.TarWriter(theirs, encoder=False, mtime=0)
    for key, members in _samples(700):
        writer.write(key, members)
        reference.write({"__key__": key, **members})
    writer.close()
    reference.close()
    assert ours.getvalue() == theirs.getvalue()


def test_npy_bytes_match_numpy_save_for_every_length_and_dtype():
    for dtype in (np.uint16, np.uint32, np.uint8):
        for n in (0, 1, 5, 99, 1000, 123456):
            array = np.arange(n, dtype=dtype)
            buffer = io.BytesIO()
            np.save(buffer, array)
            assert npy_bytes(array.tobytes(), array.dtype.str, n) == buffer.getvalue()


def test_webdataset_reads_back_every_sample(tmp_path):
    path = tmp_path / "shard.tar"
    with open(path, "wb") as f:
        writer = ShardWriter(f)
        for key, members in _samples(50):
            writer.write(key, members)
        writer.close()
    samples = list(read_shard(path))
    assert [s["__key__"] for s in samples] == [f"{i:010d}" for i in range(50)]
    assert samples[9]["json"] == {"text": "9"}
    np.testing.assert_array_equal(samples[9]["ids"], np.arange(10) * 7)
    assert samples[9]["mask"].dtype == np.uint8 and samples[9]["mask"].sum() == 10


def test_batches_of_any_size_write_the_bytes_tarwriter_writes():
    # member sizes around block boundaries, empty members, batches of 1 to 300 samples
    sizes = [0, 1, 511, 512, 513, 1023, 1024, 1025, 5000]
    rng = np.random.default_rng(0)
    samples = [(f"{i:08d}", {ext: bytes(rng.integers(0, 256, size=int(rng.choice(sizes)),
                                                       dtype=np.uint8))
                             for ext in ("json", "ids.npy", "mask.npy")}) for i in range(900)]
    ours, theirs = io.BytesIO(), io.BytesIO()
    writer, reference = ShardWriter(ours), wds.TarWriter(theirs, encoder=False, mtime=0)
    at = 0
    for size in (1, 2, 300, 7, 256, 334):
        batch = samples[at : at + size]
        writer.write_batch([key for key, _ in batch],
                           {ext: [m[ext] for _, m in batch] for ext in ("mask.npy", "json",
                                                                         "ids.npy")})
        at += size
    for key, members in samples:
        reference.write({"__key__": key, **members})
    writer.close()
    reference.close()
    assert at == len(samples) and ours.getvalue() == theirs.getvalue()
