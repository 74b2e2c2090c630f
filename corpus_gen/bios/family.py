"""The bios family: biographies (bioS or bioR) and QA, laid out by `stream`, truth in `meta`."""

import functools
import random
from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.bios import biographies, capacity, stream
from corpus_gen.bios.bio_r import render_bio_r
from corpus_gen.bios.biographies import ORDERS
from corpus_gen.bios.config import BiosConfig
from corpus_gen.bios.inverse import identifying_levels, identifying_rows, inverse_document
from corpus_gen.bios.junk import DOMAIN_PIECE, domain_units, prefix_record, prefix_units
from corpus_gen.bios.manipulation import manipulation_document, manipulation_rows, partners
from corpus_gen.bios.people import ATTRIBUTES, draw_people, person_dicts, person_json
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.qa import eval_rows, qa_document
from corpus_gen.bios.units import spell, spelling, value_matrix
from corpus_gen.core.records import BATCH, Batch, Record, UnitBatch, flatten
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key, hash_u64

_ORDER_FIELDS = np.array([',"order":' + orjson.dumps(order).decode() for order in ORDERS])
_EVAL_CHUNK = 20000


def layout(config: BiosConfig) -> Layout:
    blocks = stream.blocks(config)
    documents = {kind: sum(b.people for b in blocks if b.kind.startswith(kind))
                 for kind in ("bio", "qa", "inverse", "manipulation")}
    summary = {
        "people": config.people,
        "celebrities": config.celebrities,
        "qa_train_people": config.qa_train_people,
        "qa_test_people": config.people - config.qa_train_people,
        "biographies": documents["bio"],
        "qa_documents": documents["qa"],
    }
    summary |= {f"{kind}_documents": documents[kind] for kind in ("inverse", "manipulation")
                if documents[kind]}
    if config.capacity:  # the information content, Part 3.3's capacity
        summary |= capacity.information(config)
    useful = stream.total_records(blocks)
    if config.junk_ratio:
        summary |= {"useful_documents": useful, "junk_ratio": config.junk_ratio,
                    "junk_documents": useful * config.junk_ratio}
    return Layout(records=useful * (config.junk_ratio + 1), summary=summary,
                  user_symbols=(DOMAIN_PIECE,) if config.domain_token else ())


def records(config: BiosConfig, start: int, stop: int) -> Iterator[Record]:
    """Documents at stream positions [start, stop)."""
    return flatten(batches(config, start, stop))


def batches(config: BiosConfig, start: int, stop: int) -> Iterator[Batch]:
    """Documents at stream positions [start, stop) in batches of at most BATCH: bioS
    biographies as `UnitBatch`es, QA documents and bioR biographies as records. Junk documents
    are biographies (kind "junk"), without a split; with `domain_token` the others start with
    DOMAIN_TOKEN."""
    pools = load_pools(config.data_dir)
    blocks = stream.blocks(config)
    slot = stream.resolve(config, blocks, start, stop)
    blocks = [*blocks, stream.JUNK]  # junk's block is the last
    drawn = draw_people(config.seed, slot.person, pools)
    doc_index = slot.doc_index(blocks)
    seed = config.seed
    is_qa = np.array([b.kind == "qa" for b in blocks])[slot.block]
    is_inverse = np.array([b.kind == "inverse" for b in blocks])[slot.block]
    forms = [b.kind.removeprefix("manipulation_") if b.kind.startswith("manipulation_") else ""
             for b in blocks]
    is_manipulation = np.array([bool(form) for form in forms])[slot.block]
    celebrity = slot.person < config.celebrities
    order_index = biographies.orders(config, slot.person, doc_index, is_qa)
    is_question = is_qa | is_inverse | is_manipulation  # documents of questions and answers
    spelled = ~is_question if config.style == "s" else np.zeros_like(is_qa)
    if config.style == "r":
        doc_seeds = hash_u64(derive_key(seed, "bios", "bioR"), doc_index).tolist()
    elif spelled.any():
        bio = np.flatnonzero(spelled)
        plans = np.zeros((len(spelled), len(ATTRIBUTES)), dtype=np.int64)
        plans[bio] = biographies.bio_s_plans(config, pools, drawn[bio], doc_index[bio],
                                             order_index[bio])
        values = value_matrix(drawn)
        units = spelling(pools)
    # each document's ground truth as JSON text, written once per document; records parse it
    heads = [f'{{"kind":"{b.kind}","copy":{b.copy},"split":"' for b in blocks]
    with_order = np.array([b.kind == "qa" or (b.kind in ("bio", "junk") and config.style == "s")
                           for b in blocks])[slot.block]
    tails = np.char.add(np.where(with_order, _ORDER_FIELDS[order_index], ""), "}").tolist()
    splits = np.where(slot.person < config.qa_train_people, "train", "test").tolist()
    celebrities = np.where(celebrity, "true", "false").tolist()
    kinds, orders = slot.block.tolist(), order_index.tolist()
    junk_at = np.flatnonzero(slot.junk)
    junk_head = f'{{"kind":"junk","junk":"{config.junk}","person":'  # no split, no celebrity
    answer_only_loss = config.qa_loss == "answer"
    domain = config.domain_token
    if domain and spelled.any():
        domain_vocabulary = domain_units(units.units)

    # batches of BATCH positions, cut again wherever spelled and other documents meet
    n = len(kinds)
    cuts = np.union1d(np.arange(0, n, BATCH), np.flatnonzero(np.diff(spelled)) + 1).tolist()
    for a, b in zip(cuts, cuts[1:] + [n]):
        befores = [f'{heads[k]}{split}","celebrity":{star},"person":'
                   for k, split, star in zip(kinds[a:b], splits[a:b], celebrities[a:b])]
        for i in junk_at[np.searchsorted(junk_at, a):np.searchsorted(junk_at, b)].tolist():
            befores[i - a] = junk_head
        metas = person_json(drawn[a:b], pools, around=(befores, tails[a:b]))
        if spelled[a]:
            ids, offsets = spell(units, plans[a:b], values[a:b])
            if domain:
                yield UnitBatch(domain_vocabulary, *prefix_units(
                    domain_vocabulary, ids, offsets, ~slot.junk[a:b]), metas)
            else:
                yield UnitBatch(units.units, ids, offsets, metas)
            continue
        documents = []
        partner = _partners(config, slot.person[a:b], is_manipulation[a:b], pools)
        for i, person, meta in zip(range(a, b), person_dicts(drawn[a:b], pools), metas):
            if is_qa[i]:
                text, masked = qa_document(person, ORDERS[orders[i]], answer_only_loss)
            elif is_inverse[i]:
                text, masked = inverse_document(
                    person, identifying_levels(config, person["id"]), answer_only_loss)
            elif is_manipulation[i]:
                text, masked = manipulation_document(person, partner[i - a],
                                                     forms[kinds[i]], answer_only_loss)
            if not is_question[i]:
                text, masked = render_bio_r(person, random.Random(doc_seeds[i])), ()
            if domain and not slot.junk[i]:
                text, masked = prefix_record(text, masked)
            documents.append(Record(text, orjson.loads(meta), masked))
        yield documents


def _partners(config: BiosConfig, people: np.ndarray, selected: np.ndarray,
              pools) -> list[dict | None]:
    """The comparison partner of each selected person (manipulation documents: all of the
    qa_train half), None for the others."""
    result: list[dict | None] = [None] * len(people)
    where = np.flatnonzero(selected)
    if len(where):
        index = partners(config.seed, people[where], 0, config.qa_train_people)
        drawn = person_dicts(draw_people(config.seed, index, pools), pools)
        for i, person in zip(where.tolist(), drawn):
            result[i] = person
    return result


def eval_sets(config: BiosConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    n_train = config.qa_train_people
    sets = {
        "qa_train": lambda: _rows(config, 0, n_train, "train", eval_rows),
        "qa_test": lambda: _rows(config, n_train, config.people, "test", eval_rows),
    }
    if config.inverse:
        rows = functools.partial(identifying_rows, config)
        sets["inverse_train"] = lambda: _rows(config, 0, n_train, "train", rows)
        sets["inverse_test"] = lambda: _rows(config, n_train, config.people, "test", rows)
    if config.manipulation:
        sets["manipulation_train"] = lambda: _manipulation_rows(config, 0, n_train, "train")
        sets["manipulation_test"] = lambda: _manipulation_rows(config, n_train, config.people,
                                                               "test")
    if config.capacity:
        sets[capacity.EVAL_SET] = lambda: capacity.rows(config)
    return sets


def _rows(config: BiosConfig, start: int, stop: int, split: str,
          rows: Callable[[dict, str], list[dict]]) -> Iterator[dict]:
    """An eval set: `rows(person, split)` for the people [start, stop)."""
    pools = load_pools(config.data_dir)
    for chunk in range(start, stop, _EVAL_CHUNK):
        index = np.arange(chunk, min(chunk + _EVAL_CHUNK, stop))
        for person in person_dicts(draw_people(config.seed, index, pools), pools):
            yield from rows(person, split)


def _manipulation_rows(config: BiosConfig, start: int, stop: int, split: str
                       ) -> Iterator[dict]:
    """The manipulation set of people [start, stop), each compared with a partner of the same
    split (none when the split has one person)."""
    pools = load_pools(config.data_dir)
    for chunk in range(start, stop, _EVAL_CHUNK):
        index = np.arange(chunk, min(chunk + _EVAL_CHUNK, stop))
        people = person_dicts(draw_people(config.seed, index, pools), pools)
        others = (person_dicts(draw_people(config.seed, partners(config.seed, index, start, stop),
                                           pools), pools)
                  if stop - start > 1 else [None] * len(people))
        for person, other in zip(people, others):
            yield from manipulation_rows(person, other, split)
