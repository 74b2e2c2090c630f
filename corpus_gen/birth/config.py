"""The birth corpus config: sequence length, the triggers and their outputs, the loss, how much."""

from dataclasses import dataclass

from corpus_gen.birth.bigrams import characters, trained_outputs
from corpus_gen.core.config import CorpusConfig, require

TRIGGER_MODES = ("frequent", "drawn")
OUTPUT_MODES = ("uniform", "bigram", "held_out")
LOSSES = ("context_outputs", "all")


@dataclass
class BirthConfig(CorpusConfig):
    family: str = "birth"
    seq_len: int = 256  # T tokens a sequence (train with ctx >= T: the window holds it and <eos>)
    triggers: int = 5  # K; 0: plain bigram sequences (then loss: all)
    # frequent: the K most frequent characters in every sequence; drawn: K distinct ones per
    # sequence from the unigram law
    trigger_mode: str = "frequent"
    # each trigger's output, fixed within a sequence: uniform over the vocabulary, from the
    # trigger's bigram conditional, or uniform over the ids below the held-out share (the
    # birth_ood set's outputs are the held-out ids)
    output_mode: str = "uniform"
    held_out_share: float = 0.25  # of the ids, the last ones (the official split: 'j'..'z')
    # context_outputs: the loss on the outputs from each trigger's second occurrence on (the
    # official loss_head_only); all: every token
    loss: str = "context_outputs"
    samples: int = 100000  # training sequences, each drawn fresh
    eval_samples: int = 1000  # sequences of each eval set (their own streams)

    def validate(self) -> None:
        super().validate()
        vocabulary = characters()
        require(0 <= self.triggers <= vocabulary, "triggers", self.triggers,
                f"between 0 and the vocabulary's {vocabulary} characters")
        require(self.seq_len >= max(2, 2 * self.triggers), "seq_len", self.seq_len,
                f">= 2 and >= 2 x triggers ({2 * self.triggers}): room for each trigger and "
                "its output")
        require(self.seq_len <= 1 << 20, "seq_len", self.seq_len, "<= 1048576")
        require(self.trigger_mode in TRIGGER_MODES, "trigger_mode", self.trigger_mode,
                f"one of {', '.join(TRIGGER_MODES)}")
        require(self.output_mode in OUTPUT_MODES, "output_mode", self.output_mode,
                f"one of {', '.join(OUTPUT_MODES)}")
        require(0 < self.held_out_share < 1
                and 1 <= trained_outputs(self.held_out_share) < vocabulary,
                "held_out_share", self.held_out_share,
                f"a share in (0, 1) that leaves at least one of the {vocabulary} ids on each side")
        require(self.loss in LOSSES, "loss", self.loss, f"one of {', '.join(LOSSES)}")
        require(self.triggers > 0 or self.loss == "all", "loss", self.loss,
                "must be 'all' with triggers=0 (no outputs to count)")
        require(self.samples >= 1, "samples", self.samples, ">= 1")
        require(self.eval_samples >= 0, "eval_samples", self.eval_samples, ">= 0")
