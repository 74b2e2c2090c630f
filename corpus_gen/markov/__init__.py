"""Markov (Makkuva et al., "Attention with Markov"; "Local to global"): binary switching chains
P = [[1-p, p], [q, 1-q]] and k-th order chains over a small alphabet, with one table for all
sequences or a fresh Dirichlet(beta) table per sequence (the in-context setting); the corpus
records the losses to compare with (references.py)."""

from corpus_gen.core.registry import Family, register
from corpus_gen.markov import family
from corpus_gen.markov.config import MarkovConfig

register(Family("markov", 1, MarkovConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, files=family.files, vocabulary=family.vocabulary,
                compiled=True))
