"""Context-free grammar languages (Physics of LMs Part 1): the cfg3 grammars and random ones by
parameters, a vectorised sampler with parse trees, and exact membership, parsing and next-token
distributions (`corpus_gen.cfg.parse`)."""

from corpus_gen.cfg import family, probe_targets
from corpus_gen.cfg.config import CfgConfig
from corpus_gen.core.registry import Family, register

register(Family("cfg", 1, CfgConfig, family.layout, family.records, family.eval_sets,
                batches=family.batches, files=family.files,
                probe_targets=probe_targets.SPEC))
