"""bioD (Physics of LMs Part 3.3, knowledge capacity): N people, each a distinct name and K
attribute values of C chunks from per-attribute dictionaries of D chunks of L tokens over a
T-token alphabet, with junk documents mixed in; the information the data holds, in bits, beside
it (see family.py)."""

from corpus_gen.biod import family
from corpus_gen.biod.config import BiodConfig
from corpus_gen.biod.tokens import vocabulary
from corpus_gen.core.registry import Family, register

register(Family("biod", 1, BiodConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, files=family.files, vocabulary=vocabulary))
