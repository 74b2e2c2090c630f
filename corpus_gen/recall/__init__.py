"""Recall (Nichani, Lee, Bietti 2025, "Understanding factual recall in transformers via
associative memories"): a subject and a relation among noise tokens, a separator, then the
answer a*(s, r) from the relation's own block of D answer tokens (see family.py)."""

from corpus_gen.core.registry import Family, register
from corpus_gen.recall import family
from corpus_gen.recall.config import RecallConfig

register(Family("recall", 1, RecallConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, files=family.files, vocabulary=family.vocabulary,
                compiled=True))
