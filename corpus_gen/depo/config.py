"""The Depo corpus config: graph size, hops, the words, and how much."""

import functools
from dataclasses import dataclass

from corpus_gen.core.config import CorpusConfig, require
from corpus_gen.core.words import Lexicon, distinct_words_possible

MAX_WORDS = 1 << 32  # word codes are numbered in 32 bits (they are packed into sort keys)
MAX_N = 100_000  # words of one document: under words.MAX_ELEMENTS, so a document shuffles at once


@functools.cache
def lexicon(mini_vocab: int, min_len: int, max_len: int) -> Lexicon:
    """One Lexicon per word space, so its tables are built once per process."""
    return Lexicon(mini_vocab, min_len, max_len)


def require_words(mini_vocab: int, min_len: int, max_len: int, max_n: int) -> None:
    """Refuse, by key, words that cannot give max_n distinct ones (shared with Brevo)."""
    require(mini_vocab >= 2, "mini_vocab", mini_vocab, ">= 2")
    require(min_len >= 1, "min_len", min_len, ">= 1")
    require(max_len >= min_len, "max_len", max_len, f">= min_len ({min_len})")
    possible = distinct_words_possible(mini_vocab, min_len, max_len)
    require(possible <= MAX_WORDS, "max_len", max_len,
            f"{possible} possible words; at most 2**32 (lower max_len or mini_vocab)")
    require(possible >= max_n, "max_n", max_n,
            f"only {possible} distinct words of {min_len}..{max_len} letters over mini_vocab "
            f"{mini_vocab}; raise mini_vocab or max_len")


@dataclass
class DepoConfig(CorpusConfig):
    family: str = "depo"
    max_n: int = 375  # N: training cycles have 3..N words, test cycles N
    max_k: int = 8  # K: hops asked, 1..K in training; 1, 2, 4, ..., K in the test set
    mini_vocab: int = 50  # letters of the words
    min_len: int = 1  # letters per word, drawn uniformly in min_len..max_len
    max_len: int = 2
    queries: int = 10  # M: queries per training document (min(n, M) distinct words)
    samples: int = 100000  # training documents
    eval_samples: int = 1000  # test rows per tested k

    def validate(self) -> None:
        super().validate()
        require(3 <= self.max_n <= MAX_N, "max_n", self.max_n, f"must be in 3..{MAX_N}")
        require(1 <= self.max_k < self.max_n, "max_k", self.max_k,
                f"must be in 1..max_n - 1 ({self.max_n - 1})")
        require_words(self.mini_vocab, self.min_len, self.max_len, self.max_n)
        require(self.queries >= 1, "queries", self.queries, ">= 1")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")

    @property
    def lexicon(self) -> Lexicon:
        return lexicon(self.mini_vocab, self.min_len, self.max_len)

    def tested_hops(self) -> list[int]:
        """The test set's k: the powers of two up to K, and K."""
        hops = [1 << i for i in range(self.max_k.bit_length()) if 1 << i <= self.max_k]
        return hops if hops[-1] == self.max_k else [*hops, self.max_k]
