"""The mano corpus config: the longest expression, its operators, the modulus and how much."""

from dataclasses import dataclass

from corpus_gen.core.config import CorpusConfig, require

OPERATORS = "+-*/"  # in vocabulary order; "/" multiplies by the modular inverse


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def valid_single_op_expressions(ops: str, modulus: int) -> int:
    """How many different expressions of one operator there are ("/" never by 0)."""
    return sum(modulus * (modulus - (op == "/")) for op in ops)


@dataclass
class ManoConfig(CorpusConfig):
    family: str = "mano"
    max_ops: int = 10  # L: training draws l ~ U{1..L} operators; the test set has every l
    ops: str = "+-*"  # operators among "+-*/"
    modulus: int = 23  # a prime p: numbers 0..p-1 are tokens, arithmetic is mod p
    samples: int = 100000  # training expressions, each drawn fresh
    eval_samples: int = 500  # mano_test rows per l (their own stream)

    def validate(self) -> None:
        super().validate()
        require(self.max_ops >= 1, "max_ops", self.max_ops, ">= 1")
        require(self.max_ops <= 64, "max_ops", self.max_ops,
                "<= 64 (a draw's step counter, one per token, has 8 bits)")
        require(len(self.ops) >= 1 and all(op in OPERATORS for op in self.ops)
                and len(set(self.ops)) == len(self.ops), "ops", self.ops,
                f"one or more distinct operators among {OPERATORS!r}")
        require(is_prime(self.modulus) and self.modulus <= 65521, "modulus", self.modulus,
                "a prime between 2 and 65521 (division needs every nonzero number invertible)")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")
        # training redraws any test instance, so the test rows may take at most half of the
        # smallest space (one operator) for the redraws to end
        most = valid_single_op_expressions(self.ops, self.modulus) // 2
        require(self.eval_samples <= most, "eval_samples", self.eval_samples,
                f"<= {most}: half the different one-operator expressions, which training "
                "must still be able to draw")

    def operators(self) -> str:
        """The configured operators in vocabulary order."""
        return "".join(op for op in OPERATORS if op in self.ops)
