"""What the probe task reads off a cfg corpus (Part 1, NT probing): whether the parse tree can be
read linearly off the hidden states. The subjects are the held-out strings of
`eval/cfg_test.jsonl`, each read as a document starts (BOS at position 0, terminal t at token
t + 1), their parse trees rebuilt from the rule choices the corpus recorded (`sample.replay`). At
the token of each probed terminal:

- ancestor: the symbol of the terminal's ancestor at nonterminal level l (the paper's NT{l+1});
- boundary: whether the terminal ends that ancestor's span.

The columns are the levels of more than one symbol (the root's is skipped): NT2 .. NT6 for the
depth-6 cfg3 grammars. Both kinds read the same positions.
"""

from collections import Counter
from dataclasses import dataclass
from itertools import islice

import numpy as np

from corpus_gen.cfg.grammar import Grammar, load_grammar
from corpus_gen.cfg.sample import Samples, replay
from corpus_gen.core import probe_targets as probes
from corpus_gen.core.config import require
from corpus_gen.core.errors import CorpusError

TEST_SET = "cfg_test"
HELD_OUT = f"eval/{TEST_SET}.jsonl"
FIELDS = {"id": int, "text": str, "terminals": list, "rules": list}


@dataclass
class CfgProbeOptions:
    """The cfg family's fields of the experiment's `eval.probe` group."""

    max_strings: int = 500  # strings probed, the first of eval/cfg_test.jsonl (0: all)
    positions_per_string: int = 20  # terminals probed per string, drawn (0: every one)

    def validate(self) -> None:
        require(self.max_strings >= 0 and self.max_strings != 1, "max_strings",
                self.max_strings,
                "must be 0 (all) or >= 2: probes need probe-train and probe-test strings")
        require(self.positions_per_string >= 0, "positions_per_string",
                self.positions_per_string, "must be >= 0 (0: every terminal of a string)")


def read_strings(request: probes.ProbeRequest) -> tuple[Grammar, list[dict], Samples]:
    """The corpus's grammar, the first `max_strings` (0: all) rows of its held-out strings
    (id, text, terminals, rules) and their parse trees' labels (`Samples.labels`, positions of
    the strings back to back)."""
    corpus_dir = request.corpus_dir
    path, held_out = corpus_dir / "grammar.json", corpus_dir / HELD_OUT
    needs = ("the probe task needs a cfg corpus's grammar and held-out strings (eval_samples "
             f">= 2); run physlm verify {corpus_dir}")
    request.verified_file(path, needs)
    rows = request.read_eval_set(TEST_SET, FIELDS, needs)
    grammar = load_grammar(str(path))
    strings = list(islice(rows, request.options.max_strings or None))
    try:
        samples = replay(grammar, [s["rules"] for s in strings], labels=True)
    except (KeyError, ValueError) as exc:
        raise CorpusError(f"{held_out}: rule choices that do not fit {path} ({exc})") from None
    for i, string in enumerate(strings):
        if samples.string(i).tolist() != string["terminals"]:
            raise CorpusError(f"{held_out}: string {string['id']}: its rule choices derive "
                              f"other terminals than it lists; is {path} its grammar?")
    return grammar, strings, samples


def _reading(request: probes.ProbeRequest, strings: list[dict], samples: Samples
             ) -> tuple[probes.Reading, np.ndarray, Counter]:
    """The strings' tokens and the tokens read (terminal t of a string is token t + 1), up to
    `positions_per_string` terminals a string (drawn, seeded by the string's row), only those
    within the model's context; per row, its terminal's index in the labels (strings back to
    back); the terminals skipped by reason."""
    limit = request.max_positions or np.inf
    cap, seed = request.options.positions_per_string, request.options.seed
    tokens, positions, flat, skipped = [], [], [], Counter()
    for i, string in enumerate(strings):
        ids = request.tokenizer.encode(string["text"])
        n = len(string["terminals"])
        if len(ids) != n + 1:
            raise CorpusError(f"{request.corpus_dir / HELD_OUT}: string "
                              f"{string['id']} tokenizes into {len(ids)} tokens, not {n + 1} "
                              "(BOS and one per terminal)")
        usable = min(n, limit - 1)  # terminal t at token t + 1 < limit
        skipped["too_long"] += n - usable
        picked = np.arange(usable)
        if cap and usable > cap:
            picked = np.sort(np.random.default_rng([seed, i]).choice(usable, cap, replace=False))
        tokens.append(ids)
        positions.append((picked + 1).tolist())
        flat.append(samples.offsets[i] + picked)
    return (probes.Reading(tokens, positions), np.concatenate(flat).astype(np.int64), skipped)


def nt_levels(grammar: Grammar) -> list[int]:
    """The nonterminal levels probed: those of more than one symbol (not the root's)."""
    return [level for level in range(grammar.depth) if grammar.sizes[level] > 1]


def nt_name(level: int) -> str:
    """The paper's name of nonterminal level `level` (0: the root, NT1)."""
    return f"NT{level + 1}"


def targets(request: probes.ProbeRequest) -> probes.ProbeTargets:
    grammar, strings, samples = read_strings(request)
    levels = nt_levels(grammar)
    if not levels:
        raise CorpusError(f"{request.corpus_dir / 'grammar.json'}: no nonterminal level has "
                          "more than one symbol: nothing to probe")
    reading, flat, skipped = _reading(request, strings, samples)
    kinds = {}
    for kind in request.kinds:
        table = samples.labels.ancestor if kind == "ancestor" else samples.labels.boundary
        labels = {nt_name(level): table[level][flat].astype(np.int64).tolist()
                  for level in levels}
        kinds[kind] = probes.KindTargets(labels, dict(+skipped))
    return probes.ProbeTargets("strings", "NT level", kinds, reading, {"grammar": grammar.name})


SPEC = probes.ProbeSpec({"ancestor": "NT ancestor of the terminal at each position",
                         "boundary": "NT boundary: the terminal ends the level's span"},
                        targets, CfgProbeOptions)
