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
from corpus_gen.bios.templates import PLANS, SEP
from corpus_gen.core.records import Record
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key, hash_u64, randint

ORDERS = tuple(itertools.permutations(range(len(ATTRIBUTES))))
PLAN_LISTS = tuple(PLANS[a] for a in ATTRIBUTES)
_EVAL_CHUNK = 20000


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
    orders = randint(derive_key(seed, "bios", "order"), doc_index, len(ORDERS)).tolist()
    variant = parse_variant(config.variant)
    celebrity_variant = parse_variant(config.celebrity_variant)
    if config.style == "s":
        choices = np.stack([randint(derive_key(seed, "bios", "template", a), doc_index, len(p))
                            for a, p in zip(ATTRIBUTES, PLAN_LISTS)], axis=1).tolist()
    else:
        doc_seeds = hash_u64(derive_key(seed, "bios", "bioR"), doc_index).tolist()
    for i, (person, b) in enumerate(zip(people, slot.block.tolist())):
        block = blocks[b]
        split = "train" if person["id"] < config.qa_train_people else "test"
        meta = {"kind": block.kind, "copy": block.copy, "split": split,
                "celebrity": person["id"] < config.celebrities, "person": person}
        if block.kind == "qa":
            text, no_loss = qa_document(person, ORDERS[orders[i]], config.qa_loss == "answer")
            meta["order"] = ORDERS[orders[i]]
            yield Record(text, meta, no_loss)
        elif config.style == "r":
            yield Record(render_bio_r(person, random.Random(doc_seeds[i])), meta)
        else:
            v = celebrity_variant if meta["celebrity"] else variant
            order = ORDERS[orders[i]] if v.permute else ORDERS[0]
            meta["order"] = order
            joined = _bio_s(person, order, choices[i], v.fullname)
            yield Record(joined.replace(SEP, " "), meta, pieces=joined.split(SEP))


def _bio_s(person: dict, order: tuple[int, ...], choice: list[int], fullname: bool) -> str:
    """Six sentences, one per attribute; the first names the person, the rest use pronouns
    (or the name again, with `fullname`). Pieces for the tokenizer's cache are joined by SEP."""
    name = SEP.join((person["first"], person["middle"], person["last"]))
    gender = person["gender"]
    return SEP.join(
        PLAN_LISTS[a][choice[a]]["name" if fullname or rank == 0 else gender].format(
            person[ATTRIBUTES[a]], name)
        for rank, a in enumerate(order)
    )


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
