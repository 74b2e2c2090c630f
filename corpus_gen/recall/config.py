"""The recall corpus config: the fact table's shape, the sequence length, the laws of subjects
and relations, and how much."""

from dataclasses import dataclass

from corpus_gen.core.config import CorpusConfig, require

MAX_FACTS = 1 << 22  # S * R: the fact table is a file and the test set has a row per fact


@dataclass
class RecallConfig(CorpusConfig):
    family: str = "recall"
    subjects: int = 16  # S
    relations: int = 4  # R
    answers_per_relation: int = 8  # D: relation r answers from its own block of D tokens
    # a*(., r) one-to-one within each relation (needs S <= D); false: each a*(s, r) drawn
    # uniformly from the block, as the paper's code does (subjects may share an answer)
    distinct_answers: bool = False
    noise_tokens: int = 20  # the paper's code uses S + R
    seq_len: int = 32  # T: the prompt, T - 1 subject/relation/noise slots then the separator
    subject_zipf: float = 0.0  # P(s) ~ (s + 1) ** -exponent; 0: uniform
    relation_zipf: float = 0.0
    samples: int = 100000  # training sequences, each drawn fresh

    def validate(self) -> None:
        super().validate()
        for key in ("subjects", "relations", "answers_per_relation", "noise_tokens", "samples"):
            require(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        facts = self.subjects * self.relations
        require(facts <= MAX_FACTS, "subjects", self.subjects,
                f"S * R = {facts:,} facts; at most {MAX_FACTS:,}")
        if self.distinct_answers:
            space = self.answers_per_relation * self.relations
            require(facts <= space, "subjects", self.subjects,
                    f"with distinct_answers, S * R = {facts:,} must be <= the answer space "
                    f"D * R = {space:,}")
        require(self.seq_len >= 4, "seq_len", self.seq_len,
                ">= 4: the subject, the relation, a noise token and the separator")
        require(self.seq_len <= 4096, "seq_len", self.seq_len, "<= 4096")
        for key in ("subject_zipf", "relation_zipf"):
            require(0 <= getattr(self, key) <= 16, key, getattr(self, key),
                    "a Zipf exponent in [0, 16] (0: uniform)")
