"""Depo's documents laid out as items by a compiled loop (numba, cached on disk), one pass over
each document; its words and orders come from corpus_gen/core/compiled_words.py. The same values
as the numpy layout it replaced (tests/test_depo_compiled.py checks them against each other).

Imported when documents are drawn, not when the family registers: numba's import and its first
call of cached kernels take ~1 s of CPU.
"""

import numpy as np

from corpus_gen.core.compiled_hash import hash_draw
from corpus_gen.core.jit import njit
from corpus_gen.core.word_tasks import Items


def lay_out(keys: np.ndarray, words: np.ndarray, n: np.ndarray, pairs: np.ndarray,
            asked: np.ndarray, queries: np.ndarray, hops: np.ndarray | None, max_k: int,
            hop_tag: int, marks: tuple[int, int, int]) -> tuple[Items, np.ndarray]:
    """The documents as items, `<bos>`, the listed pairs (`pairs`: positions in `words`, the
    cycles back to back, of each pair's first word), then the queries `hop<k> q => a` (`asked`
    their words' positions, queries[i] per document), `=>` and the answer in the loss; and each
    query's k: `hops`, or drawn in 1..max_k (word_tasks.below under `hop_tag`, by its rank in
    its document). `marks`: the ids of `<bos>`, `hop1` and `=>`."""
    n, queries = np.asarray(n, dtype=np.int64), np.asarray(queries, dtype=np.int64)
    offsets = np.r_[0, np.cumsum(1 + 2 * n + 4 * queries)]
    size = int(offsets[-1])
    items = Items(np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                  np.empty(size, dtype=np.uint8), offsets)
    drawn_hops = hops is None
    hops = np.empty(len(asked), dtype=np.int64) if drawn_hops else np.asarray(hops, np.int64)
    _lay_out(keys.astype(np.uint64), words, n, pairs, asked, queries, hops, drawn_hops,
             np.uint64(max_k), np.uint64(hop_tag << 40), *marks, items.codes, items.marks,
             items.loss, offsets)
    return items, hops


@njit(cache=True)
def _lay_out(keys, words, n, pairs, asked, queries, hops, drawn_hops, max_k, hop_tag, bos,
             hop1, answer, codes, marks, loss, offsets):  # pragma: no cover - compiled
    start, at = 0, 0  # the document's first word, its first query
    for doc in range(len(n)):
        size, item = n[doc], offsets[doc]
        codes[item], marks[item], loss[item] = -1, bos, 0
        for rank in range(size):
            first = pairs[start + rank]
            second = start + (first - start + 1) % size
            place = item + 1 + 2 * rank
            codes[place], codes[place + 1] = words[first], words[second]
            marks[place] = marks[place + 1] = loss[place] = loss[place + 1] = 0
        for rank in range(queries[doc]):
            if drawn_hops:
                hops[at + rank] = np.int64(hash_draw(keys[doc], np.uint64(rank) + hop_tag)
                                           % max_k) + 1
            hop, query = hops[at + rank], asked[at + rank]
            place = item + 1 + 2 * size + 4 * rank
            codes[place], marks[place], loss[place] = -1, hop1 - 1 + hop, 0
            codes[place + 1], marks[place + 1], loss[place + 1] = words[query], 0, 0
            codes[place + 2], marks[place + 2], loss[place + 2] = -1, answer, 1
            answered = start + (query - start + hop) % size
            codes[place + 3], marks[place + 3], loss[place + 3] = words[answered], 0, 1
        start += size
        at += queries[doc]
