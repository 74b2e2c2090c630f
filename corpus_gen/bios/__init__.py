"""Synthetic biographies (Physics of LMs Part 3): bioS, bioR, QA, celebrity/minority mixes."""

from corpus_gen.bios import capacity, family, probe_targets
from corpus_gen.bios.config import BiosConfig
from corpus_gen.core.registry import Family, register

register(Family("bios", 2, BiosConfig, family.layout, family.records, family.eval_sets,
                family.batches, capacity.files, probe_targets=probe_targets.SPEC))
