"""Depo (Physics of LMs Part 4.1, reasoning depth): the k-th successor of a word on a hidden
cycle whose pairs the context lists in random order."""

from corpus_gen.core.registry import Family, register
from corpus_gen.depo import family
from corpus_gen.depo.config import DepoConfig

register(Family("depo", 3, DepoConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, vocabulary=family.vocabulary, compiled=True))
