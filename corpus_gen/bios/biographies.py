"""The keyed draws that shape a bioS biography: its sentence order and, per attribute, its
template. Shared by the stream (family.py) and the capacity eval set, which rewrites each
person's first biography exactly as the stream has it."""

import itertools

import numpy as np

from corpus_gen.bios.config import BiosConfig, parse_variant
from corpus_gen.bios.people import ATTRIBUTES, People
from corpus_gen.bios.pools import Pools
from corpus_gen.bios.templates import MODES, PLANS
from corpus_gen.bios.units import plan_index
from corpus_gen.core.seeding import derive_key, randint

ORDERS = tuple(itertools.permutations(range(len(ATTRIBUTES))))
_ORDER_ARRAY = np.array(ORDERS)
_MALE, _FEMALE, _NAME = (MODES.index(mode) for mode in ("male", "female", "name"))


def _variants(config: BiosConfig, person: np.ndarray):
    """Each person's variant: celebrities' or everyone else's."""
    celebrity = person < config.celebrities
    return celebrity, parse_variant(config.variant), parse_variant(config.celebrity_variant)


def orders(config: BiosConfig, person: np.ndarray, doc_index: np.ndarray, is_qa: np.ndarray
           ) -> np.ndarray:
    """Each document's index in ORDERS: QA documents and permuted biographies take their drawn
    order, the others the canonical one."""
    celebrity, variant, celebrity_variant = _variants(config, person)
    permute = np.where(celebrity, celebrity_variant.permute, variant.permute)
    drawn = randint(derive_key(config.seed, "bios", "order"), doc_index, len(ORDERS))
    return np.where(is_qa | permute, drawn, 0)


def bio_s_plans(config: BiosConfig, pools: Pools, people: People, doc_index: np.ndarray,
                order_index: np.ndarray) -> np.ndarray:
    """(n, 6): the sentence plans of bioS biographies keyed `doc_index` (stream.Slot.doc_index)
    of `people`, in text order: the one of attribute ORDERS[order_index][r] at rank r, from its
    drawn template. The first sentence names the person, the rest use pronouns (or the name
    again, with `fullname`)."""
    celebrity, variant, celebrity_variant = _variants(config, people.index)
    choice = np.stack([randint(derive_key(config.seed, "bios", "template", a), doc_index,
                               len(PLANS[a])) for a in ATTRIBUTES], axis=1)
    fullname = np.where(celebrity, celebrity_variant.fullname, variant.fullname)
    female = people.first >= pools.male_first_names
    order = _ORDER_ARRAY[order_index]
    first = np.arange(len(ATTRIBUTES)) == 0
    mode = np.where(fullname[:, None] | first, _NAME, np.where(female, _FEMALE, _MALE)[:, None])
    return plan_index(order, np.take_along_axis(choice, order, axis=1), mode)
