"""Document order: a global shuffle in which one person's documents stay far apart.

The stream is a sequence of blocks. Block b holds one document of kind `kind` (a biography copy
or a QA document) for each person of the prefix [0, n_b), and the n_b are non-increasing. Within
a block, people in the first half [0, ceil(n_b/2)) come first, the second half after, each half
in its own keyed random order. Consecutive blocks therefore meet where one ends with its second
half and the next starts with its first: the two documents of any person in consecutive blocks
are at least min(floor(n_b/2), ceil(n_{b+1}/2)) positions apart, so they never share a packing
window, and any stretch of the stream is a uniform draw of people. Position -> (person, block) is
computed per position, so a shard never needs the whole order.

With junk (`junk_ratio` J > 0), the stream is runs of J + 1 positions, one of them, at a keyed
random place, useful: the useful documents, in the order above, are the runs' useful places, so
run u holds useful document u (as bioD mixes its junk, corpus_gen/biod/stream.py). Each junk
document is a biography of a person drawn, per position, from outside the population:
[people, name space), whose names the name bijection gives no real person.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.bios.config import MAX_COPIES, BiosConfig, parse_variant
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.seeding import derive_key, junk_mix, randint, shuffle_halves


@dataclass(frozen=True)
class Block:
    # "bio", "qa", "inverse" (inverse QA) or "manipulation_<form>"; the last two draw from no
    # key of doc_index
    kind: str
    copy: int  # which copy of this kind the block holds for each person
    people: int  # population: people [0, people)


# A junk document's block: not in blocks(), Slot.block points one past them at junk. Copy 0: a
# junk person's document draws its template and order as a real person's first biography does.
JUNK = Block("junk", 0, 0)


def blocks(config: BiosConfig) -> list[Block]:
    copies = parse_variant(config.variant).copies
    celebrity_copies = parse_variant(config.celebrity_variant).copies if config.celebrities else 0
    result = []
    if config.mode != "qa":
        result += [Block("bio", c, config.people) for c in range(copies)]
        result += [Block("bio", c, config.celebrities) for c in range(copies, celebrity_copies)]
    if config.mode != "pretrain":
        result += [Block("qa", c, config.qa_train_people) for c in range(config.qa_copies)]
        result += [Block("inverse", c, config.qa_train_people) for c in range(config.inverse_qa)]
        result += [Block(f"manipulation_{form}", c, config.qa_train_people)
                   for form in config.manipulation_forms for c in range(config.manipulation_qa)]
    return result


@dataclass(frozen=True)
class Slot:
    """Stream positions resolved to documents (parallel arrays)."""

    position: np.ndarray
    person: np.ndarray  # at junk: a person of [people, name space)
    block: np.ndarray  # index into blocks(); len(blocks()) at junk (JUNK)
    junk: np.ndarray  # bool

    def doc_index(self, layout: list[Block]) -> np.ndarray:
        """A key unique to (person, kind, copy), for drawing the document's own randomness
        (`layout`: blocks() followed by JUNK where the slots hold junk)."""
        qa = np.array([b.kind == "qa" for b in layout])[self.block]
        return doc_key(self.person, qa, np.array([b.copy for b in layout])[self.block])


def doc_key(person: np.ndarray, qa: np.ndarray | bool, copy: np.ndarray | int) -> np.ndarray:
    """The key of a person's copy-th biography (qa False) or QA document (qa True)."""
    return person * (2 * MAX_COPIES) + qa * MAX_COPIES + copy


def resolve(config: BiosConfig, layout: list[Block], start: int, stop: int) -> Slot:
    ends = np.cumsum([b.people for b in layout])
    position = np.arange(start, stop, dtype=np.int64)
    # useful: the index of the useful document of each position's run
    useful, at_useful = junk_mix(position, config.junk_ratio,
                                 derive_key(config.seed, "bios", "mix"))
    junk = ~at_useful
    block = np.searchsorted(ends, useful, side="right")
    block[junk] = len(layout)
    person = np.empty_like(position)
    for b in np.unique(block).tolist():
        if b == len(layout):
            person[junk] = junk_people(config, position[junk])
            continue
        selected = block == b
        offset = useful[selected] - (ends[b] - layout[b].people)
        person[selected] = shuffle_halves(offset, layout[b].people,
                                           derive_key(config.seed, "bios", "order", b))
    return Slot(position, person, block, junk)


def junk_people(config: BiosConfig, position: np.ndarray) -> np.ndarray:
    """The person each junk position writes about: a keyed uniform draw from [people, name
    space), outside the population, so a name no real person has (the names are a bijection of
    the person index); the same person, rarely drawn twice, is the same document."""
    outside = load_pools(config.data_dir).name_space - config.people
    return config.people + randint(derive_key(config.seed, "bios", "junk"), position, outside)


def total_records(layout: list[Block], junk_ratio: int = 0) -> int:
    """The stream's documents: the useful ones, and junk_ratio junk documents per useful one."""
    return sum(b.people for b in layout) * (junk_ratio + 1)
