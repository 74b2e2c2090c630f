"""The CFG corpus config: which grammar (shipped, a file, or drawn by parameters) and how much."""

from dataclasses import dataclass, field

from corpus_gen.cfg.grammar import (
    Grammar,
    GrammarError,
    load_grammar,
    parameter_problem,
    random_grammar,
)
from corpus_gen.core.config import CorpusConfig, require


@dataclass
class RandomGrammarConfig:
    """A grammar drawn by the cfg3 generator's parameters (used when grammar=random)."""

    sizes: list[int] = field(default_factory=lambda: [1, 3, 3, 3, 3, 3, 3])  # root first,
    # terminals last: symbols per level
    rules: list[int] = field(default_factory=lambda: [3, 4])  # rules per symbol, min and max
    rule_length: list[int] = field(default_factory=lambda: [2, 3])  # children per rule, min, max
    seed: int = 0


@dataclass
class CfgConfig(CorpusConfig):
    family: str = "cfg"
    grammar: str = "cfg3f"  # a shipped grammar (cfg3b ... cfg3k), a grammar JSON file, or random
    random: RandomGrammarConfig = field(default_factory=RandomGrammarConfig)
    samples: int = 100000  # training strings, each drawn fresh
    eval_samples: int = 1000  # held-out strings (cfg_test), drawn from a stream of their own

    def validate(self) -> None:
        super().validate()
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")
        if self.grammar == "random":
            spec = self.random
            require(len(spec.sizes) >= 2 and spec.sizes[0] == 1 and min(spec.sizes) >= 1,
                    "random.sizes", list(spec.sizes),
                    "symbols per level, root (1) first, terminals last, each >= 1")
            for key in ("rules", "rule_length"):
                pair = list(getattr(spec, key))
                require(len(pair) == 2 and 1 <= pair[0] <= pair[1], f"random.{key}", pair,
                        "must be [min, max] with 1 <= min <= max")
            # bounded before the grammar is drawn, naming the knob (limits: grammar.py)
            problem = parameter_problem(tuple(spec.sizes), tuple(spec.rules),
                                        tuple(spec.rule_length))
            if problem:
                knob, reason = problem
                require(False, f"random.{knob}", list(getattr(spec, knob)), reason)
        try:
            self.load_grammar()
        except GrammarError as exc:
            require(False, "grammar", self.grammar, str(exc))

    def load_grammar(self) -> Grammar:
        if self.grammar != "random":
            return load_grammar(self.grammar)
        spec = self.random
        return random_grammar(f"random-{spec.seed}", tuple(spec.sizes), tuple(spec.rules),
                              tuple(spec.rule_length), spec.seed)
