"""The biod corpus config: the population (N people, names from pools), the K attributes'
values (C chunks from a dictionary of D chunks of L tokens over a T-token alphabet), the
renderings per person, and the junk mixed in."""

import math
from dataclasses import dataclass, field

from corpus_gen.core.config import CorpusConfig, require

MAX_NAME_SPACE = 1 << 62  # names are codes of a keyed bijection on int64 (seeding.feistel_permute)
MAX_PEOPLE = 1 << 26  # the eval set has a row per person
MAX_POOL_TOKENS = 1 << 20  # name tokens in the vocabulary, all pools together
MAX_ALPHABET = 1 << 20
MAX_DICTIONARY = 1 << 22  # D: biod.json lists every chunk; randint's modulo bias stays < 2**-40
MAX_DOCUMENT = 1 << 16  # tokens of a biography
JUNK_KINDS = ("random", "biod")


@dataclass
class BiodConfig(CorpusConfig):
    family: str = "biod"
    people: int = 10000  # N: each person a distinct name and K values
    # a name is one token from each pool; N0 = the product (bioS: first x middle x last)
    name_pools: list[int] = field(default_factory=lambda: [400, 400, 1000])
    attributes: int = 4  # K: attribute k's token <ak> precedes its value
    chunks: int = 1  # C: chunks per value, drawn uniformly with replacement
    dictionary: int = 16  # D: distinct chunks in each attribute's dictionary
    chunk_len: int = 1  # L: tokens per chunk
    alphabet: int = 16  # T: the chunks' tokens t0 .. t{T-1}
    renderings: int = 1  # R: documents per person, each with its own attribute order
    junk_ratio: int = 0  # J: junk documents per useful document (the paper's 1:7 is J = 7)
    # random: random alphabet tokens, a biography's length; biod: a biography of a person
    # outside the population (a name no one has, random values)
    junk: str = "random"
    domain_token: bool = False  # "<useful>" first in every useful document

    def validate(self) -> None:
        super().validate()
        pools = list(self.name_pools)
        require(len(pools) >= 1 and all(p >= 1 for p in pools), "name_pools", pools,
                "one or more pools, each >= 1 token")
        require(sum(pools) <= MAX_POOL_TOKENS, "name_pools", pools,
                f"at most {MAX_POOL_TOKENS:,} name tokens in all")
        require(self.name_space <= MAX_NAME_SPACE, "name_pools", pools,
                f"a name space of {self.name_space:,}; at most 2**62")
        require(self.people >= 1, "people", self.people, ">= 1")
        require(self.people <= self.name_space, "people", self.people,
                f"N larger than the name space N0 = {self.name_space:,}")
        require(self.people <= MAX_PEOPLE, "people", self.people, f"at most {MAX_PEOPLE:,}")
        for key in ("attributes", "chunks", "chunk_len", "dictionary", "renderings"):
            require(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        require(2 <= self.alphabet <= MAX_ALPHABET, "alphabet", self.alphabet,
                f"between 2 and {MAX_ALPHABET:,}")
        # bounds L before T**L is computed
        require(self.biography_len <= MAX_DOCUMENT, "attributes", self.attributes,
                f"a biography of {self.biography_len:,} tokens (names + K * (1 + C * L)); "
                f"at most {MAX_DOCUMENT:,}")
        require(self.dictionary <= self.chunk_space, "dictionary", self.dictionary,
                f"more than the T**L = {self.alphabet}**{self.chunk_len} possible chunks")
        require(self.dictionary <= MAX_DICTIONARY, "dictionary", self.dictionary,
                f"at most {MAX_DICTIONARY:,}")
        require(self.junk_ratio >= 0, "junk_ratio", self.junk_ratio, ">= 0")
        require(self.junk in JUNK_KINDS, "junk", self.junk, f"one of {', '.join(JUNK_KINDS)}")
        require(self.junk != "biod" or self.junk_ratio == 0 or self.people < self.name_space,
                "junk", self.junk, "biod junk needs a name outside the population: "
                "people < the name space N0")

    @property
    def name_space(self) -> int:
        """N0: the number of possible names."""
        return math.prod(self.name_pools)

    @property
    def chunk_space(self) -> int:
        """T**L: the number of possible chunks."""
        return self.alphabet ** self.chunk_len

    @property
    def biography_len(self) -> int:
        """Tokens of a biography: the name, then per attribute its token and its value."""
        return len(self.name_pools) + self.attributes * (1 + self.chunks * self.chunk_len)
