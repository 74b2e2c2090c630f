"""Brevo (Physics of LMs Part 4.1, reasoning breadth): every ancestor of a node of a random DAG
whose edges the context lists in random order, in a topological order."""

from corpus_gen.brevo import family
from corpus_gen.brevo.config import BrevoConfig
from corpus_gen.core.registry import Family, register

register(Family("brevo", 4, BrevoConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, vocabulary=family.vocabulary, compiled=True))
