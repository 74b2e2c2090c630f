"""Mano (Physics of LMs Part 4.1): modular arithmetic in prefix notation, answered without a
chain of thought. Expressions of l operators over Z_modulus, each operator written with one of
two synonym tokens; the answer is the expression's value (see expressions.py)."""

from corpus_gen.core.registry import Family, register
from corpus_gen.mano import family
from corpus_gen.mano.config import ManoConfig

register(Family("mano", 2, ManoConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, vocabulary=family.vocabulary, compiled=True))
