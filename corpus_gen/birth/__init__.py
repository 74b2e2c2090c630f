"""Birth of a Transformer (Bietti et al. 2023): tiny-shakespeare character bigrams with K
triggers, each followed within a sequence always by that sequence's output for it (family.py)."""

from corpus_gen.birth import family
from corpus_gen.birth.config import BirthConfig
from corpus_gen.core.registry import Family, register

register(Family("birth", 1, BirthConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, vocabulary=family.vocabulary, compiled=True))
