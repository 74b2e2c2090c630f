"""The biod family (Physics of LMs Part 3.3, bioD(N, K, C, D, L, T)): N people with distinct
names, each with K attributes whose values are C chunks from the attribute's dictionary of D
chunks of L tokens over a T-token alphabet. A document is a person's name, then each attribute
in a random order: `<ak>` and the value's tokens; every token in the loss. R renderings per
person, each its own order, spread over the stream (stream.py), with J junk documents per
useful one mixed in, and `<useful>` before each useful document with `domain_token`.

`biod.json` beside the shards holds the dictionaries, the token ids and the information the
population holds in bits (information.py); eval set `biod_people` has each person's rendering-0
document with the spans of its name and values, which the capacity evaluation scores.
"""

import functools
from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.biod import documents
from corpus_gen.biod.config import BiodConfig
from corpus_gen.biod.information import information
from corpus_gen.biod.population import dictionaries
from corpus_gen.biod.stream import resolve, total_records
from corpus_gen.biod.tokens import token_ids, vocabulary
from corpus_gen.core.records import Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout

BLOCK = 8192  # documents drawn and handed to the writer together
EVAL_SET = "biod_people"
FILE = "biod.json"

@functools.lru_cache(maxsize=8)
def _units(names: tuple[str, ...]) -> Units:
    return Units(names[1:])  # <eos> is token 0, so unit u is token u + 1


def _shape(config: BiodConfig) -> dict[str, int]:
    return {"N0": config.name_space, "people": config.people, "attributes": config.attributes,
            "chunks": config.chunks, "dictionary": config.dictionary,
            "chunk_len": config.chunk_len, "alphabet": config.alphabet,
            "renderings": config.renderings, "junk_ratio": config.junk_ratio}


def layout(config: BiodConfig) -> Layout:
    return Layout(records=total_records(config), summary={**_shape(config),
                                                          **information(config)})


def files(config: BiodConfig) -> dict[str, bytes]:
    """biod.json: the shape, the junk settings, the token ids (the first of each name pool,
    the attribute tokens, `<useful>`), each attribute's dictionary as token ids [k][d][l],
    and the information terms in bits."""
    ids = token_ids(config)
    return {FILE: orjson.dumps({
        **_shape(config), "name_pools": list(config.name_pools), "junk": config.junk,
        "domain_token": config.domain_token, "eval_set": EVAL_SET,
        "name_pool_tokens": ids.pools.tolist(),
        "attribute_tokens": list(range(ids.attributes, ids.attributes + config.attributes)),
        "useful_token": ids.useful,
        "dictionaries": (dictionaries(config) + ids.alphabet).tolist(),
        **information(config)})}


def batches(config: BiodConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    units = _units(vocabulary(config))
    ids = token_ids(config)
    junk_meta = f'{{"junk":"{config.junk}"}}'
    for lo in range(start, stop, BLOCK):
        slots = resolve(config, lo, min(lo + BLOCK, stop))
        # column 0 the domain token, kept on useful documents when asked for
        tokens = np.empty((len(slots.position), config.biography_len + 1), dtype=np.int64)
        tokens[:, 0] = ids.useful
        for r in np.unique(slots.rendering[slots.useful]).tolist():
            chosen = slots.rendering == r
            tokens[chosen, 1:] = documents.people(config, slots.person[chosen], r).tokens
        junk = ~slots.useful
        if junk.any():
            tokens[junk, 1:] = documents.junk(config, slots.position[junk])
        keep = np.ones(tokens.shape, dtype=bool)
        keep[:, 0] = slots.useful & config.domain_token
        metas = [f'{{"person":{p},"rendering":{r}}}' if p >= 0 else junk_meta
                 for p, r in zip(slots.person.tolist(), slots.rendering.tolist())]
        yield UnitBatch(units, tokens[keep] - 1, np.r_[0, np.cumsum(keep.sum(1))], metas)


def records(config: BiodConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: BiodConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {EVAL_SET: lambda: _rows(config)}


def _rows(config: BiodConfig) -> Iterator[dict]:
    """One row per person, in person order: the rendering-0 document as token ids (`<useful>`
    first with domain_token; no `<eos>`), [start, stop) of the name and of each attribute k's
    value in `tokens`, the attribute order, the values' chunk indices, the readable text."""
    names = np.array(vocabulary(config), dtype=object)
    prefix = int(config.domain_token)
    for lo in range(0, config.people, BLOCK):
        person = np.arange(lo, min(lo + BLOCK, config.people))
        drawn = documents.people(config, person, 0)
        tokens = drawn.tokens
        if prefix:
            tokens = np.concatenate([np.full((len(person), 1), token_ids(config).useful),
                                     tokens], axis=1)
        name_span, value_spans = documents.spans(config, drawn.orders, prefix)
        for i, (row, spans, order, values, words) in enumerate(zip(
                tokens.tolist(), value_spans.tolist(), drawn.orders.tolist(),
                drawn.values.tolist(), names[tokens].tolist())):
            yield {"person": lo + i, "tokens": row, "name_span": name_span,
                   "value_spans": spans, "attribute_order": order, "values": values,
                   "text": " ".join(words)}
