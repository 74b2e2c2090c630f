"""The information a biod corpus holds, in bits (Part 3.3's lower bound on what a model that
generates the population must store): which N of the N0 names are taken, log2 C(N0, N); each
person's K * C chunk indices, N * K * C * log2 D; and each attribute's dictionary, a D-subset
of the T**L chunks, K * log2 C(T**L, D)."""

import math

from corpus_gen.biod.config import BiodConfig
from corpus_gen.core.counting import log2_binomial


def information(config: BiodConfig) -> dict[str, float]:
    """The three terms and their sum."""
    names = log2_binomial(config.name_space, config.people)
    values = config.people * config.attributes * config.chunks * math.log2(config.dictionary)
    dictionaries = config.attributes * log2_binomial(config.chunk_space, config.dictionary)
    return {"name_bits": names, "value_bits": values, "dictionary_bits": dictionaries,
            "information_bits": names + values + dictionaries}
