"""The markov corpus config: which chain (a binary switching chain, one k-th order table from the
seed, or a fresh table per sequence), its order and alphabet, the first tokens' law and how much."""

from dataclasses import dataclass

from corpus_gen.core.config import CorpusConfig, require

TABLES = ("switching", "fixed", "fresh")
INITIAL = ("stationary", "uniform")
MAX_CONTEXT_CELLS = 1 << 16  # alphabet ** (order + 1): a table's entries, drawn per document


@dataclass
class MarkovConfig(CorpusConfig):
    family: str = "markov"
    # switching: P = [[1-p, p], [q, 1-q]] (order 1, alphabet 2); fixed: one table whose rows are
    # Dirichlet(beta), drawn from the seed; fresh: a new such table per sequence (in-context)
    table: str = "switching"
    p: float = 0.5  # switching: P(0 -> 1)
    q: float = 0.8  # switching: P(1 -> 0)
    order: int = 1  # k: the next token's law depends on the k tokens before it
    alphabet: int = 2  # tokens "0" .. str(alphabet - 1)
    beta: float = 1.0  # fixed and fresh tables: each row ~ Dirichlet(beta, ..., beta)
    # the first k tokens: the chain's stationary law (of its k-grams), or uniform
    initial: str = "stationary"
    seq_len: int = 255  # T tokens a document; with the trainer's <eos> it fills ctx 256
    samples: int = 100000  # training sequences, each drawn fresh
    eval_samples: int = 256  # markov_test rows (their own stream)
    # fresh tables: sequences of the Monte Carlo estimate of the Bayes (add-beta) loss
    reference_samples: int = 4096

    def validate(self) -> None:
        super().validate()
        require(self.table in TABLES, "table", self.table, f"one of {TABLES}")
        require(0.0 <= self.p <= 1.0, "p", self.p, "a probability in [0, 1]")
        require(0.0 <= self.q <= 1.0, "q", self.q, "a probability in [0, 1]")
        require(self.order >= 1, "order", self.order, ">= 1")
        require(2 <= self.alphabet <= 10, "alphabet", self.alphabet,
                "between 2 and 10 (tokens are the digits 0..9)")
        if self.table == "switching":
            require(self.order == 1, "order", self.order, "1 for table=switching")
            require(self.alphabet == 2, "alphabet", self.alphabet, "2 for table=switching")
        require(self.alphabet ** (self.order + 1) <= MAX_CONTEXT_CELLS, "order", self.order,
                f"alphabet ** (order + 1) <= {MAX_CONTEXT_CELLS} (the table's entries)")
        require(self.beta > 0.0, "beta", self.beta, "> 0 (a Dirichlet concentration)")
        require(self.initial in INITIAL, "initial", self.initial, f"one of {INITIAL}")
        require(self.initial == "uniform" or self.table != "fresh", "initial", self.initial,
                "'uniform' for table=fresh (each sequence's table has its own stationary law)")
        require(self.initial == "uniform" or self.table != "switching" or self.p + self.q > 0,
                "initial", self.initial,
                "'uniform' when p = q = 0 (the chain then has no unique stationary law)")
        require(self.order < self.seq_len <= 1 << 20, "seq_len", self.seq_len,
                "more than order and at most 1048576")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")
        require(self.reference_samples >= 2, "reference_samples", self.reference_samples, ">= 2")

    def contexts(self) -> int:
        """S: how many k-grams (a table's rows)."""
        return self.alphabet ** self.order
