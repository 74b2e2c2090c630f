"""Biod documents as token ids: a biography is the name's tokens, then each attribute in the
document's order, its token `<ak>` then the value's C chunks of L tokens. All biographies have
the same length, so a batch of them is one (B, width) array built by gathers."""

from dataclasses import dataclass

import numpy as np

from corpus_gen.biod import population
from corpus_gen.biod.config import BiodConfig
from corpus_gen.biod.tokens import token_ids
from corpus_gen.core.seeding import derive_key, randint


@dataclass(frozen=True)
class Biographies:
    tokens: np.ndarray  # (B, width) token ids
    values: np.ndarray  # (B, K, C) chunk indices
    orders: np.ndarray  # (B, K) the attributes in the order the documents state them


def spell(config: BiodConfig, names: np.ndarray, values: np.ndarray, orders: np.ndarray
          ) -> Biographies:
    """The biographies of people with these name codes, (B, K, C) values and (B, K) orders."""
    ids = token_ids(config)
    name_tokens = population.digits(names, list(config.name_pools)) + ids.pools
    chunks = population.dictionaries(config)[np.arange(config.attributes)[:, None], values]
    stated = np.take_along_axis(chunks.reshape(len(names), config.attributes, -1),
                                orders[:, :, None], axis=1)  # (B, K, C * L), in order
    attributes = (ids.attributes + orders)[:, :, None]
    body = np.concatenate([attributes, stated + ids.alphabet], axis=2)
    return Biographies(np.concatenate([name_tokens, body.reshape(len(names), -1)], axis=1),
                       values, orders)


def people(config: BiodConfig, person: np.ndarray, rendering: int) -> Biographies:
    """The `rendering`-th biographies of these people."""
    return spell(config, population.name_codes(config, person),
                 population.person_values(config, person),
                 population.person_orders(config, person, rendering))


def junk(config: BiodConfig, position: np.ndarray) -> np.ndarray:
    """(B, width) token ids of the junk documents at these stream positions, each drawn fresh:
    `random`, uniform alphabet tokens; `biod`, the biography of a person outside the
    population (a name at a permutation place >= N, which no one has; random values and
    order). The place's modulo bias is below (N0 - N) / 2**64."""
    def key(what: str) -> int:
        return derive_key(config.seed, "biod", "junk", what)

    if config.junk == "random":
        width = config.biography_len
        counters = position[:, None] * width + np.arange(width)
        return token_ids(config).alphabet + randint(key("tokens"), counters, config.alphabet)
    outside = config.people + randint(key("names"), position, config.name_space - config.people)
    return spell(config, population.name_codes(config, outside),
                 population.values(config, key("values"), position),
                 population.orders(key("order"), position, config.attributes)).tokens


def spans(config: BiodConfig, orders: np.ndarray, prefix: int
          ) -> tuple[list[int], np.ndarray]:
    """The name's [start, stop) and (B, K, 2) each attribute k's value [start, stop) in
    biographies of these orders after `prefix` tokens."""
    names = len(config.name_pools)
    stride = 1 + config.chunks * config.chunk_len
    place = np.argsort(orders, axis=1)  # where attribute k stands in the order
    start = prefix + names + place * stride + 1
    return [prefix, prefix + names], np.stack([start, start + stride - 1], axis=2)
