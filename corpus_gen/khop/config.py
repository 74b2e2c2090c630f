"""The khop corpus config: letters per sequence, alphabet, the largest hop count and the law of
the hop count k, and how much."""

from dataclasses import dataclass, field

from corpus_gen.core.config import CorpusConfig, require

MAX_ALPHABET = 26  # letters "a" .. "z"


@dataclass
class KhopConfig(CorpusConfig):
    family: str = "khop"
    # letters a document (after its hop token); 98: the paper's sequences (its seq_len 100 draws
    # 100 letters and keeps 98), a document then 99 tokens and with the trainer's <eos> ctx 100
    seq_len: int = 98
    alphabet: int = 4  # letters "a" .. ; no letter follows itself
    max_hops: int = 16  # K: sequences of k = 0 .. K hops, tokens "k0" .. "kK"
    # the law of k: empty, uniform over 0 .. K; else K + 1 weights (k = 0 first), normalised
    hop_weights: list[float] = field(default_factory=list)
    samples: int = 100000  # training sequences, each drawn fresh
    eval_samples: int = 64  # khop_test rows for each k in 0 .. K (their own stream)

    def validate(self) -> None:
        super().validate()
        require(2 <= self.alphabet <= MAX_ALPHABET, "alphabet", self.alphabet,
                f"between 2 and {MAX_ALPHABET} (letters a..z; no letter may follow itself)")
        require(2 <= self.seq_len <= 1 << 20, "seq_len", self.seq_len,
                "between 2 and 1048576")
        require(self.max_hops >= 0, "max_hops", self.max_hops, ">= 0")
        # the pointer of a hop moves back at least one letter and never reaches letter 0, so a
        # k-hop target exists only from letter k + 1 on (alphabet 2: exactly there)
        require(self.max_hops <= self.seq_len - 2, "max_hops", self.max_hops,
                f"at most seq_len - 2 = {self.seq_len - 2}: a k-hop target needs k + 1 "
                "letters before it")
        weights = list(self.hop_weights)
        require(not weights or len(weights) == self.max_hops + 1, "hop_weights", weights,
                f"empty (uniform) or max_hops + 1 = {self.max_hops + 1} weights")
        require(all(w >= 0 for w in weights) and (not weights or sum(weights) > 0),
                "hop_weights", weights, "non-negative with a positive sum")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")

    def hop_law(self) -> list[float]:
        """P(k) for k = 0 .. K."""
        weights = list(self.hop_weights) or [1.0] * (self.max_hops + 1)
        return [w / sum(weights) for w in weights]
