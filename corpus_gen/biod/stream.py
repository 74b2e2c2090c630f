"""Document order: which stream positions are useful (a person's rendering) and which junk,
and whose rendering each useful one is, computed per position so a shard never needs the whole
order.

With J junk documents per useful one, the stream is blocks of J + 1 positions, one of them, at
a keyed random place, useful: exactly N * R useful documents in N * R * (J + 1). The useful
documents in order are R blocks of one rendering of every person, laid out as bios lays out its
copies (corpus_gen/bios/stream.py): the first half of the people, then the second, each half
in its own keyed random order, so two renderings of a person are always at least about N / 2
useful documents apart and never share a packing window.
"""

from dataclasses import dataclass

import numpy as np

from corpus_gen.biod.config import BiodConfig
from corpus_gen.core.seeding import derive_key, junk_mix, shuffle_halves


@dataclass(frozen=True)
class Slots:
    """Stream positions resolved (parallel arrays); person and rendering are -1 at junk."""

    position: np.ndarray
    useful: np.ndarray  # bool
    person: np.ndarray
    rendering: np.ndarray


def total_records(config: BiodConfig) -> int:
    return config.people * config.renderings * (config.junk_ratio + 1)


def resolve(config: BiodConfig, start: int, stop: int) -> Slots:
    position = np.arange(start, stop, dtype=np.int64)
    block, useful = junk_mix(position, config.junk_ratio,  # block: the useful document's index
                             derive_key(config.seed, "biod", "mix"))
    person = np.full(len(position), -1, dtype=np.int64)
    rendering = np.where(useful, block // config.people, -1)
    for r in np.unique(rendering[useful]).tolist():
        chosen = rendering == r
        person[chosen] = shuffle_halves(block[chosen] % config.people, config.people,
                                         derive_key(config.seed, "biod", "stream", r))
    return Slots(position, useful, person, rendering)
