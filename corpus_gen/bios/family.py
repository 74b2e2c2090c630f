"""The bios family: biographies (bioS or bioR) and QA, laid out by `stream`, truth in `meta`."""

import functools
import itertools
import random
from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.bios import stream
from corpus_gen.bios.bio_r import render_bio_r
from corpus_gen.bios.config import BiosConfig, parse_variant
from corpus_gen.bios.inverse import identifying_levels, identifying_rows, inverse_document
from corpus_gen.bios.manipulation import manipulation_document, manipulation_rows, partners
from corpus_gen.bios.people import ATTRIBUTES, draw_people, person_dicts, person_json
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.qa import eval_rows, qa_document
from corpus_gen.bios.templates import MODES, PLANS
from corpus_gen.bios.units import plan_index, spell, spelling, value_matrix
from corpus_gen.core.records import BATCH, Batch, Record, UnitBatch, flatten
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key, hash_u64, randint

ORDERS = tuple(itertools.permutations(range(len(ATTRIBUTES))))
_ORDER_ARRAY = np.array(ORDERS)
_ORDER_FIELDS = np.array([',"order":' + orjson.dumps(order).decode() for order in ORDERS])
_MALE, _FEMALE, _NAME = (MODES.index(mode) for mode in ("male", "female", "name"))
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
    return Layout(records=stream.total_records(blocks), summary=summary)


def records(config: BiosConfig, start: int, stop: int) -> Iterator[Record]:
    """Documents at stream positions [start, stop)."""
    return flatten(batches(config, start, stop))


def batches(config: BiosConfig, start: int, stop: int) -> Iterator[Batch]:
    """Documents at stream positions [start, stop) in batches of at most BATCH: bioS
    biographies as `UnitBatch`es, QA documents and bioR biographies as records."""
    pools = load_pools(config.data_dir)
    blocks = stream.blocks(config)
    slot = stream.resolve(config, blocks, start, stop)
    drawn = draw_people(config.seed, slot.person, pools)
    doc_index = slot.doc_index(blocks)
    seed = config.seed
    drawn_orders = randint(derive_key(seed, "bios", "order"), doc_index, len(ORDERS))
    is_qa = np.array([b.kind == "qa" for b in blocks])[slot.block]
    is_inverse = np.array([b.kind == "inverse" for b in blocks])[slot.block]
    forms = [b.kind.removeprefix("manipulation_") if b.kind.startswith("manipulation_") else ""
             for b in blocks]
    is_manipulation = np.array([bool(form) for form in forms])[slot.block]
    celebrity = slot.person < config.celebrities
    variant = parse_variant(config.variant)
    celebrity_variant = parse_variant(config.celebrity_variant)
    # QA documents and permuted biographies take their drawn order, the others the canonical one
    permute = np.where(celebrity, celebrity_variant.permute, variant.permute)
    order_index = np.where(is_qa | permute, drawn_orders, 0)
    is_question = is_qa | is_inverse | is_manipulation  # documents of questions and answers
    spelled = ~is_question if config.style == "s" else np.zeros_like(is_qa)
    if config.style == "r":
        doc_seeds = hash_u64(derive_key(seed, "bios", "bioR"), doc_index).tolist()
    elif spelled.any():
        bio = np.flatnonzero(spelled)
        choices = np.stack([randint(derive_key(seed, "bios", "template", a), doc_index[bio],
                                    len(PLANS[a])) for a in ATTRIBUTES], axis=1)
        fullname = np.where(celebrity, celebrity_variant.fullname, variant.fullname)[bio]
        female = drawn.first[bio] >= pools.male_first_names
        plans = np.zeros((len(spelled), len(ATTRIBUTES)), dtype=np.int64)
        plans[bio] = _bio_s_plans(_ORDER_ARRAY[order_index[bio]], choices, female, fullname)
        values = value_matrix(drawn)
        units = spelling(pools)
    # each document's ground truth as JSON text, written once per document; records parse it
    heads = [f'{{"kind":"{b.kind}","copy":{b.copy},"split":"' for b in blocks]
    with_order = np.array([b.kind == "qa" or (b.kind == "bio" and config.style == "s")
                           for b in blocks])[slot.block]
    tails = np.char.add(np.where(with_order, _ORDER_FIELDS[order_index], ""), "}").tolist()
    splits = np.where(slot.person < config.qa_train_people, "train", "test").tolist()
    celebrities = np.where(celebrity, "true", "false").tolist()
    kinds, orders = slot.block.tolist(), order_index.tolist()
    answer_only_loss = config.qa_loss == "answer"

    # batches of BATCH positions, cut again wherever spelled and other documents meet
    n = len(kinds)
    cuts = np.union1d(np.arange(0, n, BATCH), np.flatnonzero(np.diff(spelled)) + 1).tolist()
    for a, b in zip(cuts, cuts[1:] + [n]):
        metas = person_json(drawn[a:b], pools, around=(
            [f'{heads[k]}{split}","celebrity":{star},"person":'
             for k, split, star in zip(kinds[a:b], splits[a:b], celebrities[a:b])],
            tails[a:b]))
        if spelled[a]:
            yield UnitBatch(units.units, *spell(units, plans[a:b], values[a:b]), metas)
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
            if is_question[i]:
                documents.append(Record(text, orjson.loads(meta), masked))
            else:
                documents.append(Record(render_bio_r(person, random.Random(doc_seeds[i])),
                                        orjson.loads(meta)))
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


def _bio_s_plans(order: np.ndarray, choice: np.ndarray, female: np.ndarray,
                 fullname: np.ndarray) -> np.ndarray:
    """The six sentence plans of each biography, in text order: the one of attribute
    order[i, r] at rank r, from template choice[i, attribute]. The first sentence names the
    person, the rest use pronouns (or the name again, with `fullname`)."""
    first = np.arange(len(ATTRIBUTES)) == 0
    mode = np.where(fullname[:, None] | first, _NAME, np.where(female, _FEMALE, _MALE)[:, None])
    return plan_index(order, np.take_along_axis(choice, order, axis=1), mode)


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
