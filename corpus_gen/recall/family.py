"""The recall family: documents of T + 1 tokens over a fixed vocabulary, the prompt's T - 1
slots noise tokens but for one subject and one relation at random places, then "<sep>" and the
answer a*(s, r); the loss on the answer only. The fact table is a function of the seed
(facts.py), written beside the shards as facts.json; the test set asks every (s, r) once.

Document i of a stream is a pure function of (seed, stream, i): its draws are counter-based
hashes of i, so no batch or worker count changes it.
"""

import functools
from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.core.records import Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS
from corpus_gen.recall.config import RecallConfig
from corpus_gen.recall.facts import fact_table, hallucination_losses, zipf_law

SEPARATOR = "<sep>"
BLOCK = 8192  # documents drawn and handed to the writer together (~270k tokens)
TEST_SET = "recall_test"
FACTS_FILE = "facts.json"


def vocabulary(config: RecallConfig) -> tuple[str, ...]:
    """<eos>, subjects s*, relations r*, noise n*, <sep>, answers a* (relation r's block:
    a{r*D} .. a{r*D + D - 1})."""
    return (EOS, *(f"s{i}" for i in range(config.subjects)),
            *(f"r{i}" for i in range(config.relations)),
            *(f"n{i}" for i in range(config.noise_tokens)), SEPARATOR,
            *(f"a{i}" for i in range(config.answers_per_relation * config.relations)))


@functools.lru_cache(maxsize=8)
def _units(names: tuple[str, ...]) -> Units:
    return Units(names[1:])  # EOS is token 0, so unit u is token u + 1


def _facts_key(config: RecallConfig) -> tuple[int, int, int, int, bool]:
    """What the fact table depends on (configs are not hashable: the caches key on this)."""
    return (config.seed, config.subjects, config.relations, config.answers_per_relation,
            config.distinct_answers)


def _table(config: RecallConfig) -> np.ndarray:
    return fact_table(*_facts_key(config))


def _laws(config: RecallConfig) -> tuple[np.ndarray, np.ndarray]:
    return (zipf_law(config.subjects, config.subject_zipf),
            zipf_law(config.relations, config.relation_zipf))


def layout(config: RecallConfig) -> Layout:
    return Layout(records=config.samples, summary={
        "samples": config.samples, "subjects": config.subjects, "relations": config.relations,
        "answers_per_relation": config.answers_per_relation, "seq_len": config.seq_len,
        **hallucination_losses(_table(config), *_laws(config), config.answers_per_relation)})


def files(config: RecallConfig) -> dict[str, bytes]:
    """facts.json: the fact table (answers[s][r], an answer index: token "a<index>"), the
    laws and the relation-only losses."""
    subject_law, relation_law = _laws(config)
    return {FACTS_FILE: orjson.dumps({
        "subjects": config.subjects, "relations": config.relations,
        "answers_per_relation": config.answers_per_relation,
        "answers": _table(config).tolist(), "subject_law": subject_law.tolist(),
        "relation_law": relation_law.tolist(),
        **hallucination_losses(_table(config), subject_law, relation_law,
                               config.answers_per_relation)})}


@functools.lru_cache(maxsize=16)
def _cdf(n: int, exponent: float) -> np.ndarray:
    cdf = np.cumsum(zipf_law(n, exponent))
    cdf[-1] = 1.0  # rounding must not leave a sliver above the last index
    cdf.flags.writeable = False  # cached: shared by every caller
    return cdf


def _documents(config: RecallConfig, stream: str, index: np.ndarray,
               asked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(B, T + 1) unit ids of the documents at `index` of the stream and (B, 4) their subject,
    relation, subject place and relation place (draws.documents); `asked` (B, 2): the
    (subject, relation) each asks, else drawn."""
    from corpus_gen.recall import draws  # numba: paid when documents are drawn

    ids = np.empty((len(index), config.seq_len + 1), dtype=np.int64)
    facts = np.empty((len(index), 4), dtype=np.int64)
    draws.documents(np.uint64(derive_key(config.seed, "recall", stream)), index,
                    config.seq_len, _cdf(config.subjects, config.subject_zipf),
                    _cdf(config.relations, config.relation_zipf), config.noise_tokens,
                    _table(config), np.empty((0, 2), np.int64) if asked is None else asked,
                    ids, facts)
    return ids, facts


@functools.lru_cache(maxsize=8)
def _meta_parts(facts_key: tuple[int, int, int, int, bool], seq_len: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of the documents' metas: per fact (s * R + r), per subject place and per
    relation place (object arrays, added elementwise)."""
    relations = facts_key[2]
    facts = np.array([f'{{"subject":{i // relations},"relation":{i % relations},'
                      f'"answer":{a},' for i, a in enumerate(fact_table(*facts_key).ravel())],
                     dtype=object)
    places = range(seq_len - 1)
    return (facts, np.array([f'"subject_at":{i},' for i in places], dtype=object),
            np.array([f'"relation_at":{i}}}' for i in places], dtype=object))


def batches(config: RecallConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    units = _units(vocabulary(config))
    fact_metas, subject_places, relation_places = _meta_parts(_facts_key(config),
                                                              config.seq_len)
    width = config.seq_len + 1
    for lo in range(start, stop, BLOCK):
        index = np.arange(lo, min(lo + BLOCK, stop))
        ids, facts = _documents(config, "train", index)
        loss = np.zeros(ids.shape, dtype=np.uint8)
        loss[:, -1] = 1  # the answer only
        metas = fact_metas[facts[:, 0] * config.relations + facts[:, 1]] \
            + subject_places[facts[:, 2]] + relation_places[facts[:, 3]]
        yield UnitBatch(units, ids.ravel(), np.arange(len(index) + 1) * width, metas.tolist(),
                        loss.ravel())


def records(config: RecallConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: RecallConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {TEST_SET: lambda: _rows(config)}


def _rows(config: RecallConfig) -> Iterator[dict]:
    """Every fact once, row s * R + r asking (s, r); noise and places from the test stream."""
    names = vocabulary(config)
    total = config.subjects * config.relations
    for lo in range(0, total, BLOCK):
        index = np.arange(lo, min(lo + BLOCK, total))
        asked = np.stack([index // config.relations, index % config.relations], 1)
        ids, facts = _documents(config, "test", index, asked)
        for i, (doc, fact) in enumerate(zip((ids + 1).tolist(), facts.tolist())):
            yield {"id": int(index[i]), "prompt": doc[:-1], "answer": doc[-1:],  # token = unit + 1
                   "text": " ".join(names[t] for t in doc),
                   **dict(zip(("subject", "relation", "subject_at", "relation_at"), fact))}
