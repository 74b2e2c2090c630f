"""The iGSM corpus config: difficulty presets, exact-op targets, formats and retry data."""

from dataclasses import dataclass, field

from corpus_gen.core.config import CorpusConfig, require

# difficulty -> (max_op, max_edge, out-of-distribution op targets of the eval sets)
PRESETS = {"med": (15, 20, (20, 21, 22, 23)), "hard": (21, 28, (28, 29, 30, 31, 32))}
HIERARCHIES = ("any", "District", "Zoo", "School", "Ecosystems")


def op_limit(edges: int) -> int:
    """The most operations a question may need with `edges` instance parameters: 2 per edge.
    Every op count up to it is reachable (abstract parameters' steps add to the instance
    parameters' own, so somewhat more is too, but rarely: drawing it would be slow)."""
    return 2 * edges


@dataclass
class IgsmConfig(CorpusConfig):
    family: str = "igsm"
    problems: int = 100000  # training documents
    difficulty: str = "med"  # med | hard: presets for max_op, max_edge and the OOD op targets
    max_op: int = 0  # 0: the preset's; operations of a training problem's shortest solution
    max_edge: int = 0  # 0: the preset's; instance parameters (structure edges) per problem
    op: int | None = None  # set: every training problem has exactly this op count
    format: str = "pq"  # pq: problem then question; qp: question first
    reask: bool = False  # qp only: ask the question again after the problem (qpq)
    hierarchy: str = "any"  # any | District | Zoo | School | Ecosystems
    retry_rate: float = 0.0  # per solution step: insert a wrong step then " [BACK]"
    retry_kind: str = "real"  # real: a parameter not yet computable | fake: a future step
    retry_mask: bool = False  # exclude the inserted erroneous steps from the loss
    test_fraction: float = 0.05  # share of solution templates (by hash) held out for eval
    eval_problems: int = 500  # problems per eval set
    ood_ops: list[int] = field(default_factory=list)  # empty: the preset's OOD op targets

    def validate(self) -> None:
        super().validate()
        require(self.problems >= 1, "problems", self.problems, ">= 1")
        require(self.difficulty in PRESETS, "difficulty", self.difficulty,
                f"must be one of {sorted(PRESETS)}")
        require(self.max_op >= 0, "max_op", self.max_op, "must be >= 1 (or 0 for the preset)")
        require(self.max_edge == 0 or self.max_edge >= 2, "max_edge", self.max_edge,
                "must be >= 2 (or 0 for the preset): a structure has at least two edges")
        edges, limit = self.edges, op_limit(self.edges)
        require(self.max_op <= limit, "max_op", self.max_op,
                f"{self.edges} instance parameters allow at most {limit} operations")
        if self.op is not None:
            require(self.op >= 1, "op", self.op, "must be >= 1 (or null: drawn up to max_op)")
            require(self.op <= limit, "op", self.op,
                    f"max_edge={edges} instance parameters allow at most {limit} operations")
        for target in self.ood_ops:
            require(1 <= target <= limit, "ood_ops", list(self.ood_ops),
                    f"every op target must be in [1, {limit}] (max_edge={edges})")
        require(self.format in ("pq", "qp"), "format", self.format, "must be 'pq' or 'qp'")
        require(not self.reask or self.format == "qp", "reask", self.reask,
                "re-asking the question needs format=qp (question, problem, question)")
        require(self.hierarchy in HIERARCHIES, "hierarchy", self.hierarchy,
                f"unknown hierarchy; known: {list(HIERARCHIES)}")
        require(0.0 <= self.retry_rate < 1.0, "retry_rate", self.retry_rate, "must be in [0, 1)")
        require(self.retry_kind in ("real", "fake"), "retry_kind", self.retry_kind,
                "must be 'real' or 'fake'")
        require(0.0 < self.test_fraction < 1.0, "test_fraction", self.test_fraction,
                "must be strictly between 0 and 1")
        require(self.eval_problems >= 0, "eval_problems", self.eval_problems, ">= 0")

    @property
    def edges(self) -> int:
        return self.max_edge or PRESETS[self.difficulty][1]

    @property
    def ops_max(self) -> int:
        """max_op, or the preset's (capped by what max_edge allows)."""
        return self.max_op or min(PRESETS[self.difficulty][0], op_limit(self.edges))

    @property
    def ood_targets(self) -> tuple[int, ...]:
        """ood_ops, or the preset's targets that max_edge allows."""
        if self.ood_ops:
            return tuple(self.ood_ops)
        return tuple(t for t in PRESETS[self.difficulty][2] if t <= op_limit(self.edges))
