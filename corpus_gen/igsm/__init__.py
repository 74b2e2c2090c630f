"""Synthetic grade-school math (Physics of LMs Part 2.1/2.2): iGSM problems, shortest solutions,
retry data, and a step-by-step solution checker (`corpus_gen.igsm.checker`)."""

from corpus_gen.core.registry import Family, register
from corpus_gen.igsm import family
from corpus_gen.igsm.config import IgsmConfig

register(Family("igsm", 1, IgsmConfig, family.layout, family.records, family.eval_sets))
