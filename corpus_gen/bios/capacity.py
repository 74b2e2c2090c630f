"""Knowledge capacity on bioS (Physics of LMs Part 3.3): the information a population holds and
each person's biography with the spans the capacity evaluation scores.

A bioS population is N distinct names out of the N0 = first x middle x last the pools allow and,
per person, independent uniform values: the birth date (12 months x 28 days x 200 years), the
birth city, university, major and employer out of their pools. The company city is the
employer's headquarters: no information of its own, so the employer is scored over both spans
(the joint value (employer, company city) has as many values as the employer; in a permuted
biography the city may come first). The pools themselves are fixed tables, not drawn, so unlike
bioD there is no dictionary term:

    information_bits = name_bits + value_bits = log2 C(N0, N) + N sum_k log2 |V_k|.

`bios.json` holds N0, N, each scored attribute's number of values and the spans it is scored
over, and the terms. Eval set `bios_people` has one row per person, in person order: the
person's first biography (copy 0, exactly as the stream has it: with `domain_token`, after
`<useful>`) as text, the [start, stop) character spans of the name's first occurrence and of
each attribute's value (whole words: a value's unit with its glued punctuation, which only adds
a deterministic token to what is scored), and the values themselves.
"""

import math
from collections.abc import Iterator

import numpy as np
import orjson

from corpus_gen.bios import biographies, stream
from corpus_gen.bios.config import BiosConfig
from corpus_gen.bios.junk import PREFIX
from corpus_gen.bios.people import ATTRIBUTES, DAYS, MONTHS, YEARS, draw_people, person_dicts
from corpus_gen.bios.pools import Pools, load_pools
from corpus_gen.bios.units import (
    COLUMN,
    SLOT_FIELDS,
    spell,
    spelling,
    unit_fields,
    value_matrix,
)
from corpus_gen.core.counting import log2_binomial

FILE = "bios.json"
EVAL_SET = "bios_people"
# what each scored attribute's value is read from: the company city rides with the employer
SCORED = {"birth_date": ("birth_date",), "birth_city": ("birth_city",),
          "university": ("university",), "major": ("major",),
          "employer": ("employer", "company_city")}
_BLOCK = 8192  # people rendered at once


def value_counts(pools: Pools) -> dict[str, int]:
    """|V_k| of each scored attribute."""
    return {"birth_date": len(MONTHS) * DAYS * YEARS, "birth_city": len(pools.cities),
            "university": len(pools.universities), "major": len(pools.majors),
            "employer": len(pools.employers)}


def information(config: BiosConfig) -> dict[str, float]:
    """The terms in bits and their sum (no dictionary term: the pools are fixed)."""
    pools = load_pools(config.data_dir)
    names = log2_binomial(pools.name_space, config.people)
    values = config.people * sum(map(math.log2, value_counts(pools).values()))
    return {"name_bits": names, "value_bits": values, "dictionary_bits": 0.0,
            "information_bits": names + values}


def files(config: BiosConfig) -> dict[str, bytes]:
    if not config.capacity:  # validation allows it on bioS biographies only
        return {}
    pools = load_pools(config.data_dir)
    return {FILE: orjson.dumps({
        "N0": pools.name_space, "people": config.people, "eval_set": EVAL_SET,
        "attributes": {attribute: {"values": count, "spans": list(SCORED[attribute])}
                       for attribute, count in value_counts(pools).items()},
        **information(config)})}


def rows(config: BiosConfig) -> Iterator[dict]:
    """The eval set: each person's copy-0 biography with its spans, in person order."""
    pools = load_pools(config.data_dir)
    units = spelling(pools)
    lengths = np.array([len(unit) + 1 for unit in units.units.strings])  # with the space after
    prefix = PREFIX if config.domain_token else ""  # as training's useful documents
    for lo in range(0, config.people, _BLOCK):
        person = np.arange(lo, min(lo + _BLOCK, config.people))
        drawn = draw_people(config.seed, person, pools)
        doc_index = stream.doc_key(person, qa=False, copy=0)
        order = biographies.orders(config, person, doc_index, np.zeros(len(person), bool))
        plans = biographies.bio_s_plans(config, pools, drawn, doc_index, order)
        ids, offsets = spell(units, plans, value_matrix(drawn))
        fields = unit_fields(units, plans)
        for i, who in enumerate(person_dicts(drawn, pools)):
            a, b = offsets[i], offsets[i + 1]
            yield {"person": lo + i, "text": prefix + " ".join(units.units.strings[ids[a:b]]),
                   **_spans(fields[a:b], lengths[ids[a:b]], len(prefix)),
                   "name": f"{who['first']} {who['middle']} {who['last']}",
                   "values": {attribute: who[attribute] for attribute in ATTRIBUTES}}


def _spans(fields: np.ndarray, lengths: np.ndarray, offset: int) -> dict:
    """Character spans of a document's units, its text starting `offset` characters in: the
    name's first three (first, middle, last) and each attribute's value units."""
    starts = offset + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ends = starts + lengths - 1
    first = np.flatnonzero(fields == COLUMN["first"])[0]
    owner = _OWNER[fields]
    values = {}
    for k, attribute in enumerate(ATTRIBUTES):
        where = np.flatnonzero(owner == k)
        values[attribute] = [int(starts[where[0]]), int(ends[where[-1]])]
    return {"name_span": [int(starts[first]), int(ends[first + 2])], "value_spans": values}


def _field_owners() -> np.ndarray:
    """Each unit field's attribute (its index in ATTRIBUTES; -1: none), for _spans."""
    owner = np.full(max(COLUMN.values()) + 1, -1)
    for k, attribute in enumerate(ATTRIBUTES):
        owner[[COLUMN[field] for field in SLOT_FIELDS[attribute]]] = k
    return owner


_OWNER = _field_owners()
