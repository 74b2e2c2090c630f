"""The fact table a*(s, r) of a seed, the laws subjects and relations are drawn from, and the
loss of the relation-only predictor (the "hallucination" plateau)."""

import functools
import math

import numpy as np

from corpus_gen.core.seeding import derive_key, feistel_permute, randint


def zipf_law(n: int, exponent: float) -> np.ndarray:
    """P(i) ~ (i + 1) ** -exponent over [0, n): uniform at exponent 0."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


@functools.lru_cache(maxsize=8)
def fact_table(seed: int, subjects: int, relations: int, per_relation: int,
               distinct: bool) -> np.ndarray:
    """[S, R] int64: a*(s, r) as an answer index in [r * D, (r + 1) * D), the relations'
    blocks disjoint. `distinct`: a keyed permutation's first S values (one-to-one per
    relation); otherwise independent uniform draws (the paper's code)."""
    table = np.empty((subjects, relations), dtype=np.int64)
    index = np.arange(subjects)
    for r in range(relations):
        key = derive_key(seed, "recall", "facts", r)
        local = (feistel_permute(index, per_relation, key) if distinct
                 else randint(key, index, per_relation))
        table[:, r] = r * per_relation + local
    table.flags.writeable = False  # cached: shared by every caller
    return table


def relation_only_loss(table: np.ndarray, subject_law: np.ndarray,
                       relation_law: np.ndarray) -> float:
    """H(answer | relation) in nats: the loss of the best predictor that sees the relation but
    not the subject. At most ln D (uniform over the block), which the paper quotes; equal to
    it when each relation's answers are spread evenly over its block."""
    loss = 0.0
    for r, q in enumerate(relation_law.tolist()):
        mass = np.bincount(table[:, r], weights=subject_law)
        mass = mass[mass > 0]
        loss -= q * float(mass @ np.log(mass))
    return loss


def hallucination_losses(table: np.ndarray, subject_law: np.ndarray,
                         relation_law: np.ndarray, per_relation: int) -> dict[str, float]:
    return {"ln_D": round(math.log(per_relation), 6),
            "relation_only_loss": round(relation_only_loss(table, subject_law, relation_law),
                                        6)}
