"""The biod vocabulary and where each kind of token starts in it: `<eos>` (id 0, as in every
fixed vocabulary), the name pools' tokens `n<j>_<v>`, the attribute tokens `<a<k>>`, the
alphabet `t<t>`, then the domain token `<useful>` (listed whether or not a corpus uses it, so
corpora with and without junk share a vocabulary)."""

from dataclasses import dataclass

import numpy as np

from corpus_gen.biod.config import BiodConfig
from corpus_gen.core.vocabulary import EOS

USEFUL = "<useful>"


def vocabulary(config: BiodConfig) -> tuple[str, ...]:
    return (EOS, *(f"n{j}_{v}" for j, pool in enumerate(config.name_pools) for v in range(pool)),
            *(f"<a{k}>" for k in range(config.attributes)),
            *(f"t{t}" for t in range(config.alphabet)), USEFUL)


@dataclass(frozen=True)
class TokenIds:
    """The first token id of each kind, in `vocabulary`'s order."""

    pools: np.ndarray  # int64, the first id of each name pool
    attributes: int  # <a0>
    alphabet: int  # t0
    useful: int  # <useful>


def token_ids(config: BiodConfig) -> TokenIds:
    sizes = np.array(config.name_pools, dtype=np.int64)
    attributes = 1 + int(sizes.sum())
    alphabet = attributes + config.attributes
    return TokenIds(1 + np.cumsum(sizes) - sizes, attributes, alphabet,
                    alphabet + config.alphabet)
