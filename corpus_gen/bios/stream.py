"""Document order: a global shuffle in which one person's documents stay far apart.

The stream is a sequence of blocks. Block b holds one document of kind `kind` (a biography copy
or a QA document) for each person of the prefix [0, n_b), and the n_b are non-increasing. Within
a block, people in the first half [0, ceil(n_b/2)) come first, the second half after, each half
in its own keyed random order. Consecutive blocks therefore meet where one ends with its second
half and the next starts with its first: the two documents of any person in consecutive blocks
are at least min(floor(n_b/2), ceil(n_{b+1}/2)) positions apart, so they never share a packing
window, and any stretch of the stream is a uniform draw of people. Position -> (person, block) is
computed per position, so a shard never needs the whole order.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.bios.config import MAX_COPIES, BiosConfig, parse_variant
from corpus_gen.core.seeding import derive_key, shuffle_halves


@dataclass(frozen=True)
class Block:
    # "bio", "qa", "inverse" (inverse QA) or "manipulation_<form>"; the last two draw from no
    # key of doc_index
    kind: str
    copy: int  # which copy of this kind the block holds for each person
    people: int  # population: people [0, people)


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
    person: np.ndarray
    block: np.ndarray  # index into blocks()

    def doc_index(self, layout: list[Block]) -> np.ndarray:
        """A key unique to (person, kind, copy), for drawing the document's own randomness."""
        offsets = np.array([(b.kind == "qa") * MAX_COPIES + b.copy for b in layout])
        return self.person * (2 * MAX_COPIES) + offsets[self.block]


def resolve(config: BiosConfig, layout: list[Block], start: int, stop: int) -> Slot:
    ends = np.cumsum([b.people for b in layout])
    position = np.arange(start, stop, dtype=np.int64)
    block = np.searchsorted(ends, position, side="right")
    person = np.empty_like(position)
    for b in np.unique(block).tolist():
        selected = block == b
        offset = position[selected] - (ends[b] - layout[b].people)
        person[selected] = shuffle_halves(offset, layout[b].people,
                                           derive_key(config.seed, "bios", "order", b))
    return Slot(position, person, block)


def total_records(layout: list[Block]) -> int:
    return sum(b.people for b in layout)
