"""CFG languages (Part 1): does the model generate the grammar's language, diversely, and does
its next-token distribution match the grammar's true one?

Reads a cfg corpus: `grammar.json` and the held-out strings of `eval/cfg_test.jsonl`. A document
is "<bos> t1 .. tn" then the tokenizer's EOS, each word one token (see corpus_gen/cfg/family.py).
Results, in `<run>/eval/cfg.json`:

- `prefix_<c>` for each prefix length c of `prefix_lengths` (0: from BOS alone; the paper cuts
  held-out strings after 50 terminals): `samples` prompts "<bos> + the first c terminals" of
  held-out strings longer than c (cycled when fewer), each continued by sampling at
  `temperature` until EOS; `accuracy` is the share of prefix + continuation that the grammar
  generates (the exact DP of corpus_gen.cfg.parse). A continuation is a non-member, counted in
  `failures` by reason, when it holds a token that is no terminal (`non_terminal`: BOS, a byte
  piece, ...), stops without EOS at the token budget (`no_eos`; `max_new_tokens`, and for
  learned absolute positions no more than the positions leave), has no room at all among the
  model's positions (`prompt_too_long`), is empty (`empty`), has a length no string of the
  language has (`length`), or has none of the grammar's derivations (`no_derivation`).
- `diversity`, from the strings generated from BOS (present when 0 is a prefix length):
  `distinct`, the share of distinct strings among the member strings, and `nll`, their mean
  -log P_grammar(x) in nats (P the inside probability: the sum over all derivations). The same
  for as many held-out strings (the grammar's own samples) is `reference_distinct` and
  `reference_nll`, which estimates the entropy of the grammar's distribution over strings
  (E_P[-log P(X)] = H(P)). For the model's distribution Q over its member strings,
  E_Q[-log P(X)] = H(Q) + KL(Q || P) >= H(Q): an `nll` below the reference bounds the model's
  entropy below the grammar's (it keeps to likelier strings, less diverse); one near it is what
  sampling as the grammar does gives. Whether generated strings occur verbatim in the training
  shards is not measured: reading every shard is costly, and for cfg3 languages a repeat is
  vanishingly rare (`distinct` measures collapse).
- `next_token`: for `kl_strings` held-out strings, one forward pass over "<bos> t1 .. tn" gives
  the model's next-token distribution after BOS + p terminals, p = 0..n (p = n predicts EOS);
  `kl` is KL(true || model) in nats with the model's softmax (temperature 1, whatever sampling
  used) over its whole vocabulary (mass on tokens that are neither terminals nor EOS is lost
  from those entries), pooled over all positions of all strings (learned positions: strings
  that do not fit are skipped and counted in `too_long`); `outside_mass` is the model's mean
  mass on such tokens and
  `illegal_mass` its mean mass on every token the grammar gives probability 0 there (outside
  tokens included); `per_position` the same per bucket of `kl_bucket` positions.

Every generation, with its verdict, also goes to `<run>/eval/cfg_generations.jsonl`.
"""

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from corpus_gen.cfg.family import user_symbols
from corpus_gen.cfg.grammar import Grammar, GrammarError, load_grammar
from corpus_gen.core.config import require
from corpus_gen.core.io import atomic_write
from corpus_gen.core.tokenizer import CorpusTokenizer
from trainer.errors import TrainError
from trainer.eval.eval_sets import read_eval_set, verified_corpus_file
from trainer.eval.registry import EvalContext, Task, register

# torch, trainer.eval.generation (which imports it) and the parser (which compiles with numba)
# are imported inside the functions that use them: reading an experiment imports every task module
# for its options, and stays fast and torch-free
if TYPE_CHECKING:
    import torch

GENERATIONS = "cfg_generations.jsonl"
TEST_SET = "cfg_test"


@dataclass
class CfgOptions:
    """The experiment's `eval.cfg` group."""

    samples: int = 200  # continuations generated per prefix length
    prefix_lengths: list[int] = field(default_factory=lambda: [0, 50])  # terminals of the prompt
    batch_size: int = 64
    temperature: float = 1.0  # 0: greedy (diversity is then meaningless)
    max_new_tokens: int = 0  # 0: enough for the grammar's longest string and its EOS
    kl_strings: int = 100  # held-out strings scored for KL (0: none)
    kl_bucket: int = 25  # positions per bucket of next_token.per_position
    seed: int = 0  # of the sampling

    def validate(self) -> None:
        for key in ("samples", "batch_size", "kl_bucket"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        for key in ("max_new_tokens", "kl_strings"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(math.isfinite(self.temperature) and self.temperature >= 0, "temperature",
                self.temperature, "must be >= 0 and finite")
        require(len(self.prefix_lengths) >= 1, "prefix_lengths", list(self.prefix_lengths),
                "must list at least one prefix length")
        require(len(set(self.prefix_lengths)) == len(self.prefix_lengths), "prefix_lengths",
                list(self.prefix_lengths), "must not repeat a length")
        for length in self.prefix_lengths:
            require(length >= 0, "prefix_lengths", length, "must be >= 0 (0: from BOS alone)")


@dataclass(frozen=True)
class Spelling:
    """How the corpus's tokenizer spells a grammar's words: BOS, terminal k, and EOS."""

    bos: int
    terminals: tuple[int, ...]  # token id of terminal k
    eos: int

    @classmethod
    def of(cls, tokenizer: CorpusTokenizer, terminals: int) -> "Spelling":
        """From the reserved pieces the cfg family gives every word (one token each)."""
        pieces = user_symbols(terminals)
        ids = [tokenizer.token_id(piece) for piece in pieces]
        missing = [piece for piece, i in zip(pieces, ids) if i is None]
        if missing:
            raise TrainError(f"the tokenizer has no piece {missing[0]!r}: the cfg task needs the "
                             "tokenizer of the cfg corpus whose grammar it reads")
        return cls(ids[0], tuple(ids[1:]), tokenizer.eos_id)

    def prompt(self, terminals: list[int]) -> list[int]:
        return [self.bos, *(self.terminals[t] for t in terminals)]

    @cached_property
    def _index(self) -> dict[int, int]:
        return {token: k for k, token in enumerate(self.terminals)}

    def read(self, ids: list[int]) -> list[int] | None:
        """Token ids as terminal indices; None when one is no terminal."""
        terminals = [self._index.get(token, -1) for token in ids]
        return None if -1 in terminals else terminals


def load_rows(corpus_dir: Path) -> list[dict]:
    """The held-out strings of `eval/cfg_test.jsonl`, verified."""
    return list(read_eval_set(corpus_dir, TEST_SET, {"terminals": list},
                              "the cfg task needs a cfg corpus"))


def read_grammar(corpus_dir: Path) -> Grammar:
    path = verified_corpus_file(corpus_dir, corpus_dir / "grammar.json",
                                "the cfg task needs a cfg corpus")
    try:
        return load_grammar(str(path))
    except GrammarError as exc:
        raise TrainError(str(exc)) from None


def verdict(grammar: Grammar, spelling: Spelling, prefix: list[int], ids: list[int],
            stopped: bool) -> tuple[list[int] | None, str | None]:
    """The whole string (terminal indices) of a prefix and a generated continuation (cut before
    EOS; `stopped`: EOS came), and why it is no member (None: a member; else `non_terminal`,
    `no_eos` or the membership DP's kind: `empty`, `length`, `no_derivation`)."""
    continuation = spelling.read(ids)
    if continuation is None:
        return None, "non_terminal"
    if not stopped:
        return None, "no_eos"
    from corpus_gen.cfg.parse import membership

    string = prefix + continuation
    found = membership(grammar, string)
    return string, None if found.member else found.kind


def _prompts(rows: list[dict], length: int, samples: int) -> list[dict]:
    """`samples` held-out rows longer than `length` terminals, cycled when there are fewer (from
    BOS alone no held-out string is needed: a placeholder row when there are none)."""
    longer = [row for row in rows if len(row["terminals"]) > length]
    if not longer and length == 0:
        longer = [{"id": None, "terminals": []}]
    return [longer[i % len(longer)] for i in range(samples)] if longer else []


def score_prefix(context: EvalContext, grammar: Grammar, spelling: Spelling, rows: list[dict],
                 length: int, options: CfgOptions, generator: "torch.Generator",
                 log: list[dict]) -> tuple[dict, list[list[int]]]:
    """The results of one prefix length and the member strings generated; each generation is
    appended to `log`."""
    from trainer.eval.generation import generate

    limit = context.model.positional.max_positions or math.inf
    longest = int(grammar.yield_bounds[0][1][0])
    wanted = options.max_new_tokens or max(1, longest - length + 1)  # the +1: EOS
    budget = int(min(wanted, limit - (length + 1)))
    prompts = _prompts(rows, length, options.samples)
    failures: Counter[str] = Counter()
    members: list[list[int]] = []
    for start in range(0, len(prompts), options.batch_size):
        batch = prompts[start : start + options.batch_size]
        prefixes = [row["terminals"][:length] for row in batch]
        if budget < 1:
            outputs: list[list[int] | None] = [None] * len(batch)
        else:
            outputs = list(generate(context.model, [spelling.prompt(p) for p in prefixes], budget,
                                    eos_id=spelling.eos, temperature=options.temperature,
                                    generator=generator))
        for row, prefix, ids in zip(batch, prefixes, outputs):
            if ids is None:
                string, reason = None, "prompt_too_long"
            else:
                string, reason = verdict(grammar, spelling, prefix, ids, len(ids) < budget)
            if reason is None:
                members.append(string)
            else:
                failures[reason] += 1
            log.append({"prefix": length, "id": row.get("id"), "member": reason is None,
                        "reason": reason, "continuation": ids})
    n = len(prompts)
    result = {"accuracy": len(members) / n if n else None, "n": n,
              "failures": dict(sorted(failures.items(), key=lambda kv: (-kv[1], kv[0])))}
    return result, members


def diversity(grammar: Grammar, generated: list[list[int]], n: int, reference: list[list[int]]
              ) -> dict:
    """Distinct share and mean -log P_grammar (nats) of the `generated` member strings (of `n`
    generations), and of the grammar's own `reference` samples (module docstring)."""
    from corpus_gen.cfg.parse import log_probability

    def measure(strings: list[list[int]]) -> tuple[float | None, float | None]:
        if not strings:
            return None, None
        distinct = len({tuple(s) for s in strings}) / len(strings)
        return distinct, -float(np.mean([log_probability(grammar, s) for s in strings]))

    distinct, nll = measure(generated)
    reference_distinct, reference_nll = measure(reference)
    return {"n": n, "members": len(generated), "distinct": distinct, "nll": nll,
            "reference_n": len(reference), "reference_distinct": reference_distinct,
            "reference_nll": reference_nll}


def model_log_probs(model: "torch.nn.Module", spelling: Spelling, strings: list[list[int]],
                    batch_size: int) -> list[np.ndarray]:
    """Per string of n terminals, [n + 1, T + 2] float64: the model's log-probability, after
    BOS + p terminals, of each terminal, of EOS, and (last) of every other token together (log
    of the mass the full-vocabulary softmax leaves outside the grammar's words). One teacher-
    forced pass over "<bos> t1 .. tn" per batch; rows are right-padded (causal: pads come after
    every position read). The model runs in eval mode and gets its previous mode back."""
    import torch

    from trainer.eval.generation import evaluating

    device = model.tok_emb.weight.device
    columns = torch.tensor([*spelling.terminals, spelling.eos], device=device)
    out: list[np.ndarray] = [np.empty(0)] * len(strings)
    order = sorted(range(len(strings)), key=lambda i: len(strings[i]))
    with evaluating(model):
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = max(len(strings[i]) for i in batch) + 1
            ids = torch.tensor([spelling.prompt(strings[i]) + [spelling.eos] *
                                (width - 1 - len(strings[i])) for i in batch], device=device)
            logprobs = model(ids).log_softmax(-1)  # [B, width, V]
            words = logprobs[..., columns].double()
            rest = torch.log1p(-words.exp().sum(-1).clamp(max=1.0))[..., None]
            table = torch.cat((words, rest), -1).cpu().numpy()
            for row, i in enumerate(batch):
                out[i] = table[row, : len(strings[i]) + 1]
    return out


def next_token(context: EvalContext, grammar: Grammar, spelling: Spelling, rows: list[dict],
               options: CfgOptions) -> dict:
    """KL(true || model) and the model's mass outside the grammar, pooled over the positions of
    `kl_strings` held-out strings, and per bucket of positions (module docstring)."""
    from corpus_gen.cfg.parse import next_token_distribution

    limit = context.model.positional.max_positions or math.inf
    chosen = rows[: options.kl_strings]
    strings = [row["terminals"] for row in chosen if len(row["terminals"]) + 1 <= limit]
    tables = model_log_probs(context.model, spelling, strings, options.batch_size)
    kl, outside, illegal, positions = [], [], [], []
    for string, logq in zip(strings, tables):
        true = next_token_distribution(grammar, string)  # [n + 1, T + 1]
        q = np.exp(logq)
        legal = true > 0
        logp = np.log(np.where(legal, true, 1.0))
        terms = np.where(legal, true * (logp - np.where(legal, logq[:, :-1], 0.0)), 0.0)
        kl.append(terms.sum(-1))
        outside.append(q[:, -1])
        illegal.append(q[:, -1] + np.where(legal, 0.0, q[:, :-1]).sum(-1))
        positions.append(np.arange(len(string) + 1))
    if not strings:
        return {"kl": None, "outside_mass": None, "illegal_mass": None, "strings": 0,
                "positions": 0, "too_long": len(chosen), "per_position": {}}
    kl_all, outside_all, illegal_all = map(np.concatenate, (kl, outside, illegal))
    bucket = np.concatenate(positions) // options.kl_bucket
    per_position = {}
    for b in np.unique(bucket):
        here = bucket == b
        per_position[str(int(b) * options.kl_bucket)] = {
            "kl": float(kl_all[here].mean()), "illegal_mass": float(illegal_all[here].mean()),
            "n": int(here.sum())}
    return {"kl": float(kl_all.mean()), "outside_mass": float(outside_all.mean()),
            "illegal_mass": float(illegal_all.mean()), "strings": len(strings),
            "positions": len(kl_all), "too_long": len(chosen) - len(strings),
            "per_position": per_position}


def run(context: EvalContext, options: CfgOptions) -> dict:
    import torch

    grammar = read_grammar(context.corpus_dir)
    rows = load_rows(context.corpus_dir)
    spelling = Spelling.of(context.tokenizer, grammar.terminals)
    generator = torch.Generator(device=context.model.tok_emb.weight.device)
    generator.manual_seed(options.seed)
    results: dict = {}
    log: list[dict] = []
    for length in options.prefix_lengths:
        results[f"prefix_{length}"], members = score_prefix(context, grammar, spelling, rows,
                                                            length, options, generator, log)
        if length == 0:
            reference = [row["terminals"] for row in rows[: options.samples]]
            results["diversity"] = diversity(grammar, members, results["prefix_0"]["n"],
                                             reference)
    if options.kl_strings:
        results["next_token"] = next_token(context, grammar, spelling, rows, options)
    context.out.mkdir(parents=True, exist_ok=True)
    atomic_write(context.out / GENERATIONS,
                 "".join(json.dumps(entry) + "\n" for entry in log).encode())
    return results


def plot(results: dict, path: Path) -> None:
    """Left: generation accuracy per prefix length (n on each bar). Right: KL(true || model)
    per bucket of positions, with the pooled mean in the legend."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    prefixes = sorted((int(key.removeprefix("prefix_")), value) for key, value in results.items()
                      if key.startswith("prefix_") and isinstance(value, dict))
    for x, (_, entry) in enumerate(prefixes):
        accuracy = entry.get("accuracy")
        left.bar(x, accuracy or 0.0, color="tab:blue")
        label = "no prompt" if accuracy is None else f"{accuracy:.1%}"
        left.text(x, (accuracy or 0.0) + 0.02, f"{label}\nn={entry['n']}", ha="center",
                  fontsize=8)
    left.set_xticks(range(len(prefixes)))
    left.set_xticklabels(["BOS" if length == 0 else f"{length} terminals"
                          for length, _ in prefixes])
    left.set_ylim(0, 1.15)
    left.set_xlabel("prompt")
    left.set_ylabel("generation accuracy")
    left.set_title("sampled continuations in the language")
    left.grid(axis="y", alpha=0.3)

    entry = results.get("next_token") or {}
    buckets = entry.get("per_position") or {}
    if buckets:
        starts = sorted(buckets, key=int)
        right.plot([int(s) for s in starts], [buckets[s]["kl"] for s in starts], marker="o",
                   color="tab:red", label=f"KL, mean {entry['kl']:.3g} nats "
                                         f"({entry['strings']} strings)")
        right.legend(fontsize=8)
        right.set_ylim(bottom=0)
    right.set_xlabel("position (terminals before the predicted token; bucket start)")
    right.set_ylabel("KL(true || model), nats")
    right.set_title("next-token distribution vs the grammar's")
    right.grid(alpha=0.3)
    run = f"{results['run']}, " if results.get("run") else ""
    fig.suptitle(f"CFG ({run}step {results.get('step', '?')})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


register(Task("cfg", CfgOptions, run, plot))
