"""k-hop induction (Sanford, Hsu, Telgarsky 2024, "Transformers, parallel computation, and
logarithmic depth"): sequences over a small alphabet with no letter twice in a row, each letter
labelled with the letter reached by k hops of "the letter after the previous occurrence of this
letter"; k, drawn per sequence, is its first token. The largest k a model solves grows with its
depth (the paper: 1, 3, 5, 8, 15 for 2-6 layers at width 128)."""

from corpus_gen.core.registry import Family, register
from corpus_gen.khop import family
from corpus_gen.khop.config import KhopConfig

register(Family("khop", 1, KhopConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, vocabulary=family.vocabulary))
