"""The khop family: documents "kK" followed by T letters with no letter twice in a row, each
position labelled with its k-hop target (`UnitBatch.targets`, the shards' `targets.npy`), not
the next token; and the `khop_test` rows, `eval_samples` for each k.

Position 0 (the hop token) has the target "_" (blank, as in the official task) outside the
loss: it is the same for every document, so counting it would only dilute the error. Every
letter's target counts, "~" (no k-hop) included: telling when the hops run off the start is part
of the task (the official task counts it too)."""

import functools
import string
from collections.abc import Callable, Iterator

import numpy as np

from corpus_gen.core.records import BATCH, Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.khop import sequences
from corpus_gen.khop.config import KhopConfig

UNDEFINED, BLANK = "~", "_"
TEST_SET = "khop_test"


@functools.lru_cache(maxsize=8)
def _units(alphabet: int, max_hops: int) -> Units:
    """Letters 0 .. A-1, then "~", "_", then the hop tokens "k0" .. "kK"."""
    return Units([*string.ascii_lowercase[:alphabet], UNDEFINED, BLANK,
                  *(f"k{k}" for k in range(max_hops + 1))])


def units(config: KhopConfig) -> Units:
    return _units(config.alphabet, config.max_hops)


def vocabulary(config: KhopConfig) -> tuple[str, ...]:
    """<eos> then the units: token u + 1 is unit u."""
    return (EOS, *units(config).strings.tolist())


def _key(config: KhopConfig, stream: str) -> int:
    return derive_key(config.seed, "khop", stream)


def documents(config: KhopConfig, stream: str, index: np.ndarray,
              hops: np.ndarray | None = None) -> UnitBatch:
    """Sequences `index` of a stream as one batch of documents: unit ids (hop token, letters),
    targets and loss; `hops` (B,) overrides the drawn hop counts (test rows)."""
    alphabet = config.alphabet
    letters, drawn = sequences.draw(_key(config, stream), index, config.seq_len, alphabet,
                                     np.array(config.hop_law()))
    hops = drawn if hops is None else hops
    hop_targets = sequences.targets(letters, hops)
    count, width = len(letters), config.seq_len + 1
    ids = np.empty((count, width), dtype=np.int64)
    ids[:, 0], ids[:, 1:] = alphabet + 2 + hops, letters  # unit of "k<k>", the letters
    targets = np.empty_like(ids)
    targets[:, 0] = alphabet + 1  # "_"
    targets[:, 1:] = np.where(hop_targets == sequences.UNDEFINED, alphabet, hop_targets)
    loss = np.ones((count, width), dtype=np.uint8)
    loss[:, 0] = 0
    return UnitBatch(units(config), ids.ravel(), np.arange(count + 1, dtype=np.int64) * width,
                     [f'{{"k":{k}}}' for k in hops.tolist()], loss.ravel(), targets.ravel())


def layout(config: KhopConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "seq_len": config.seq_len, "alphabet": config.alphabet,
                           "max_hops": config.max_hops})


def batches(config: KhopConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    for lo in range(start, stop, BATCH):
        yield documents(config, "train", np.arange(lo, min(lo + BATCH, stop)))


def records(config: KhopConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: KhopConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {TEST_SET: lambda: _rows(config)}


def _rows(config: KhopConfig) -> Iterator[dict]:
    """`eval_samples` rows for each k, of the stream "test": row i has k = i mod (K + 1), so
    any first rows hold every k alike. `tokens` and `targets` are vocabulary ids (unit + 1),
    the hop token first; `text` the tokens' names."""
    total = (config.max_hops + 1) * config.eval_samples
    for lo in range(0, total, BATCH):
        index = np.arange(lo, min(lo + BATCH, total))
        batch = documents(config, "test", index, index % (config.max_hops + 1))
        width = config.seq_len + 1
        tokens = (batch.ids + 1).reshape(-1, width).tolist()
        targets = (batch.targets + 1).reshape(-1, width).tolist()
        for i, text in enumerate(batch.texts()):
            yield {"id": int(index[i]), "k": int(index[i] % (config.max_hops + 1)),
                   "tokens": tokens[i], "targets": targets[i], "text": text}
