"""The Brevo corpus config: graph size, the node words, which node is asked, and how much."""

from dataclasses import dataclass

from corpus_gen.core.config import CorpusConfig, require
from corpus_gen.core.words import Lexicon
from corpus_gen.depo.config import MAX_N, lexicon, require_words

QUERIES = ("nonroot", "last")


@dataclass
class BrevoConfig(CorpusConfig):
    family: str = "brevo"
    max_n: int = 110  # N: training graphs have 3..N nodes, test graphs N
    mini_vocab: int = 110  # letters of the node words (brevo1: N one-letter words)
    min_len: int = 1  # letters per node word, drawn uniformly in min_len..max_len
    max_len: int = 1
    # the node asked: nonroot, uniform among the nodes with a parent; last, uniform among the
    # last quarter of nodes with a parent (the official generator's intent)
    query: str = "nonroot"
    samples: int = 100000  # training documents
    eval_samples: int = 1000  # test rows

    def validate(self) -> None:
        super().validate()
        require(3 <= self.max_n <= MAX_N, "max_n", self.max_n, f"must be in 3..{MAX_N}")
        require_words(self.mini_vocab, self.min_len, self.max_len, self.max_n)
        require(self.query in QUERIES, "query", self.query, f"must be one of {QUERIES}")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")

    @property
    def lexicon(self) -> Lexicon:
        return lexicon(self.mini_vocab, self.min_len, self.max_len)
