"""The bios family: biographies (bioS or bioR) and QA, laid out by `stream`, truth in `meta`."""

import itertools
import random
from collections.abc import Callable, Iterator

import numpy as np

from corpus_gen.bios import stream
from corpus_gen.bios.bio_r import render_bio_r
from corpus_gen.bios.config import BiosConfig, parse_variant
from corpus_gen.bios.people import ATTRIBUTES, draw_people, person_dicts
from corpus_gen.bios.pools import load_pools
from corpus_gen.bios.qa import eval_rows, qa_document
from corpus_gen.bios.templates import MODES, PLANS, SEP
from corpus_gen.core.records import Record
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key, hash_u64, randint

ORDERS = tuple(itertools.permutations(range(len(ATTRIBUTES))))
PLAN_LISTS = tuple(PLANS[a] for a in ATTRIBUTES)
_EVAL_CHUNK = 20000
# Every sentence plan (attribute a, template t, mode m) at _PLAN_START[a] + t * len(MODES) + m,
# renumbered to take the six attribute values as {0}..{5} and the name as {6}: a document's
# six plans then join into one format string, rendered by one `str.format` call.
_PLAN_FORMATS = np.array([plan[mode].format(f"{{{a}}}", "{6}")
                          for a, plans in enumerate(PLAN_LISTS) for plan in plans
                          for mode in MODES], dtype=object)
_PLAN_START = np.cumsum([0] + [len(plans) * len(MODES) for plans in PLAN_LISTS[:-1]])
_MALE, _FEMALE, _NAME = (MODES.index(mode) for mode in ("male", "female", "name"))
_ORDER_ARRAY = np.array(ORDERS)
_BIRTH_DATE = ATTRIBUTES.index("birth_date")


def layout(config: BiosConfig) -> Layout:
    blocks = stream.blocks(config)
    qa_docs = sum(b.people for b in blocks if b.kind == "qa")
    total = stream.total_records(blocks)
    return Layout(
        records=total,
        summary={
            "people": config.people,
            "celebrities": config.celebrities,
            "qa_train_people": config.qa_train_people,
            "qa_test_people": config.people - config.qa_train_people,
            "biographies": total - qa_docs,
            "qa_documents": qa_docs,
        },
    )


def records(config: BiosConfig, start: int, stop: int) -> Iterator[Record]:
    """Documents at stream positions [start, stop)."""
    pools = load_pools(config.data_dir)
    blocks = stream.blocks(config)
    slot = stream.resolve(config, blocks, start, stop)
    people = person_dicts(draw_people(config.seed, slot.person, pools), pools)
    doc_index = slot.doc_index(blocks)
    seed = config.seed
    drawn_orders = randint(derive_key(seed, "bios", "order"), doc_index, len(ORDERS))
    is_qa = np.array([b.kind == "qa" for b in blocks])[slot.block]
    celebrity = slot.person < config.celebrities
    variant = parse_variant(config.variant)
    celebrity_variant = parse_variant(config.celebrity_variant)
    # QA documents and permuted biographies take their drawn order, the others the canonical one
    permute = np.where(celebrity, celebrity_variant.permute, variant.permute)
    order_index = np.where(is_qa | permute, drawn_orders, 0)
    orders = order_index.tolist()
    if config.style == "s":
        bio = np.flatnonzero(~is_qa)
        choices = np.stack([randint(derive_key(seed, "bios", "template", a), doc_index[bio],
                                    len(p)) for a, p in zip(ATTRIBUTES, PLAN_LISTS)], axis=1)
        fullname = np.where(celebrity, celebrity_variant.fullname, variant.fullname)[bio]
        texts = iter(_bio_s([people[i] for i in bio.tolist()], _ORDER_ARRAY[order_index[bio]],
                            choices, fullname))
    else:
        doc_seeds = hash_u64(derive_key(seed, "bios", "bioR"), doc_index).tolist()
    qa_train_people, celebrities = config.qa_train_people, config.celebrities
    for i, (person, b) in enumerate(zip(people, slot.block.tolist())):
        block = blocks[b]
        meta = {"kind": block.kind, "copy": block.copy,
                "split": "train" if person["id"] < qa_train_people else "test",
                "celebrity": person["id"] < celebrities, "person": person}
        if block.kind == "qa":
            text, no_loss = qa_document(person, ORDERS[orders[i]], config.qa_loss == "answer")
            meta["order"] = ORDERS[orders[i]]
            yield Record(text, meta, no_loss)
        elif config.style == "r":
            yield Record(render_bio_r(person, random.Random(doc_seeds[i])), meta)
        else:
            meta["order"] = ORDERS[orders[i]]
            joined = next(texts)
            yield Record(joined.replace(SEP, " "), meta, pieces=joined.split(SEP))


def _bio_s(people: list[dict], order: np.ndarray, choice: np.ndarray, fullname: np.ndarray
           ) -> list[str]:
    """One biography per person: six sentences, the one of attribute order[i, r] at rank r,
    from template choice[i, attribute]. The first sentence names the person, the rest use
    pronouns (or the name again, with `fullname`). Pieces for the tokenizer's cache are joined
    by SEP. Built for the whole batch at once: plans by numpy indexing, text by `map`."""
    gender = np.array([_FEMALE if p["gender"] == "female" else _MALE for p in people],
                      dtype=np.int64)
    first = np.arange(len(ATTRIBUTES)) == 0
    mode = np.where(fullname[:, None] | first, _NAME, gender[:, None])
    plan = (_PLAN_START[order] + np.take_along_axis(choice, order, axis=1) * len(MODES)
            + mode)
    formats = map(SEP.join, zip(*_PLAN_FORMATS[plan].T.tolist()))
    values = [[person[a] for person in people] for a in ATTRIBUTES]
    # A date is two pieces, "October 2," and "1996": as one, each of the 67,200 dates would be
    # a piece of its own, mostly new to the tokenizer's cache; the two parts are a few hundred.
    values[_BIRTH_DATE] = [date.replace(", ", "," + SEP) for date in values[_BIRTH_DATE]]
    names = [SEP.join((p["first"], p["middle"], p["last"])) for p in people]
    return list(map(str.format, formats, *values, names))


def eval_sets(config: BiosConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    n_train = config.qa_train_people
    return {
        "qa_train": lambda: _qa_rows(config, 0, n_train, "train"),
        "qa_test": lambda: _qa_rows(config, n_train, config.people, "test"),
    }


def _qa_rows(config: BiosConfig, start: int, stop: int, split: str) -> Iterator[dict]:
    pools = load_pools(config.data_dir)
    for chunk in range(start, stop, _EVAL_CHUNK):
        index = np.arange(chunk, min(chunk + _EVAL_CHUNK, stop))
        for person in person_dicts(draw_people(config.seed, index, pools), pools):
            yield from eval_rows(person, split)
