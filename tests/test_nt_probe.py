"""NT probing (`trainer.eval.probe` on a cfg corpus, Part 1; the family's targets in
`corpus_gen.cfg.probe_targets`): the held-out strings' parse-tree labels at each terminal's
token, probes of planted models (the true NT ancestors and boundaries planted at each terminal's
token: accuracy 1.0 on every level; planted one token late or noise: not, or at the majority
baseline), the model's context and the per-string cap on positions, the refusals, and
`physlm eval --task probe` on a tiny GPT trained on a cfg corpus."""

import json
import shutil

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from corpus_gen.cfg.grammar import load_grammar
from corpus_gen.cfg.probe_targets import HELD_OUT, read_strings
from corpus_gen.cfg.sample import replay
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.tokenizer import Tokenizer
from tests.conftest import ROOT, record_eval_set, tiny_experiment_file
from trainer.config import load_experiment
from trainer.engine import train
from trainer.errors import TrainError
from trainer.eval.probe import ProbeOptions, family_probes, figure, probe_request, run
from trainer.eval.registry import EvalContext
from trainer.model import ModelConfig

STRINGS = 200  # held-out strings of the corpus (cfg3b: 165-372 terminals each)
LEVELS = ["NT2", "NT3", "NT4", "NT5", "NT6"]  # cfg3b: depth 6, the root (NT1) skipped
SYMBOLS = 3  # per level, and terminals


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A cfg3b corpus of STRINGS held-out strings (and as many training strings)."""
    config = load_config(ROOT / "configs/corpus/cfg3b.yaml",
                         [f"samples={STRINGS}", f"eval_samples={STRINGS}",
                          "records_per_shard=100", "tokenizer.sample_records=100"], schemas())
    out = tmp_path_factory.mktemp("nt_probe") / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return Tokenizer.load(corpus / "tokenizer.model")


@pytest.fixture(scope="module")
def strings(corpus):
    """The held-out strings, read here as the brief of the corpus says, not by the task."""
    return [json.loads(line) for line in (corpus / HELD_OUT).read_text().splitlines()]


@pytest.fixture(scope="module")
def labels(corpus, strings):
    """Per string: ancestors [depth, terminals] and boundaries [depth, terminals]."""
    grammar = load_grammar(str(corpus / "grammar.json"))
    samples = replay(grammar, [s["rules"] for s in strings], labels=True)
    cuts = samples.offsets
    return [(samples.labels.ancestor[:, a:b], samples.labels.boundary[:, a:b])
            for a, b in zip(cuts[:-1], cuts[1:])]


class PlantedStrings(nn.Module):
    """What extraction uses of a GPT, with a residual stream planted per string: a row whose
    tokens begin one of `token_lists` gets that string's `codes` [tokens, d_model] at its
    tokens; identity blocks carry it to every layer. The strings are long enough that the rows
    extraction feeds (each string up to its last probed token) name their string alone."""

    def __init__(self, token_lists: list[list[int]], codes: list[np.ndarray], n_layer: int = 2,
                 max_positions: int | None = None):
        super().__init__()
        self.config = ModelConfig(n_layer=n_layer, n_head=1, d_model=codes[0].shape[1],
                                  vocab_size=1)
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(n_layer))
        self.tok_emb = nn.Embedding(1, 1)
        self.positional = nn.Module()
        self.positional.max_positions = max_positions
        self.token_lists = token_lists
        self.codes = [torch.tensor(code, dtype=torch.float32) for code in codes]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.zeros(*ids.shape, self.config.d_model)
        for b, row in enumerate(ids.tolist()):
            length = len(row)
            while length and row[length - 1] == 0:  # right padding (no cfg token is id 0)
                length -= 1
            owners = [i for i, tokens in enumerate(self.token_lists)
                      if tokens[:length] == row[:length]]
            assert len(owners) == 1, owners
            x[b, :length] = self.codes[owners[0]][:length]
        for block in self.blocks:
            x = block(x)
        return x


def truth(ancestors: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """[terminals, features]: each level's ancestor one-hot, then each level's boundary."""
    one_hot = np.eye(SYMBOLS)[ancestors.T].reshape(ancestors.shape[1], -1)
    return np.concatenate([one_hot, boundaries.T], axis=1)


def plant(tokenizer, strings, labels, code, shift: int = 0, **kwargs) -> PlantedStrings:
    """`code(i, ancestors, boundaries)` [terminals, d] of string i, planted with terminal t at
    token t + 1 + shift (BOS at token 0; zeros where nothing is planted)."""
    token_lists = [tokenizer.encode(s["text"]) for s in strings]
    codes = []
    for i, (tokens, (ancestors, boundaries)) in enumerate(zip(token_lists, labels)):
        assert len(tokens) == ancestors.shape[1] + 1  # BOS, then one token per terminal
        planted = code(i, ancestors, boundaries)
        full = np.zeros((len(tokens), planted.shape[1]))
        full[1 + shift:] = planted[: len(tokens) - 1 - shift]
        codes.append(full)
    return PlantedStrings(token_lists, codes, **kwargs)


def context_for(model: nn.Module, tokenizer: Tokenizer, corpus) -> EvalContext:
    return EvalContext(model, tokenizer, corpus, corpus, torch.device("cpu"))


def test_the_corpus_is_what_the_probes_need(corpus, tokenizer, strings, labels):
    assert family_probes(corpus)[0] == "cfg" and len(strings) == STRINGS
    request = probe_request(context_for(plant(tokenizer, strings[:1], labels[:1], lambda _, a, b:
                                              truth(a, b)), tokenizer, corpus),
                            ProbeOptions(max_strings=30), ["ancestor"])
    grammar, read, samples = read_strings(request)
    assert grammar.sizes == [1, 3, 3, 3, 3, 3, 3] and read == strings[:30]
    assert np.array_equal(samples.labels.ancestor[:, : samples.offsets[1]], labels[0][0])
    assert min(len(s["terminals"]) for s in strings) >= 100
    ancestors, boundaries = labels[0]
    assert (ancestors[0] == 0).all() and boundaries[0].tolist() == [False] * (
        len(boundaries[0]) - 1) + [True]  # the root spans the string
    assert boundaries[:, -1].all()  # the last terminal ends every span


def test_true_ancestors_and_boundaries_planted_at_each_terminal_are_read_exactly(
        tokenizer, strings, labels, corpus):
    model = plant(tokenizer, strings, labels, lambda _, a, b: truth(a, b))
    result = run(context_for(model, tokenizer, corpus), ProbeOptions(max_strings=0))
    assert result["grammar"] == "cfg3b"
    assert result["strings"] == {"train": 160, "test": 40}
    assert result["positions"] == {"train": 160 * 20, "test": 40 * 20}  # 20 terminals a string
    for kind in ("ancestor", "boundary"):
        entry = result[kind]
        assert entry["layers"] == [0, 1, 2] and entry["skipped"] == {}
        assert entry["accuracy"] == {level: [1.0, 1.0, 1.0] for level in LEVELS}, kind
        assert entry["n_test"] == dict.fromkeys(LEVELS, 800)
        assert result["summary"][f"{kind}_mean"] == 1.0
    assert all(0.3 < c < 0.7 for c in result["ancestor"]["chance"].values())
    boundary_chance = [result["boundary"]["chance"][level] for level in LEVELS]
    assert boundary_chance[0] > 0.95 and 0.5 < boundary_chance[-1] < 0.75  # NT6: rules of 2-3
    assert figure(result).axes[0].get_xticklabels()[0].get_text().startswith("NT2\nchance")

    # the same labels one token late: the probe reads the terminal's own token, not the next
    late = run(context_for(plant(tokenizer, strings, labels, lambda _, a, b: truth(a, b),
                                 shift=1), tokenizer, corpus), ProbeOptions(max_strings=0))
    # (the previous terminal's labels still tell the coarse levels: NT2 ancestor 1.0 there)
    assert late["ancestor"]["accuracy"]["NT6"][0] < 0.7
    assert late["boundary"]["accuracy"]["NT6"][0] < 0.9


def test_noise_at_each_terminal_sits_at_the_majority_baseline(tokenizer, strings, labels,
                                                              corpus):
    rng = np.random.default_rng(0)
    model = plant(tokenizer, strings, labels,
                  lambda _, a, b: rng.normal(size=(a.shape[1], 16)))
    result = run(context_for(model, tokenizer, corpus), ProbeOptions(max_strings=0))
    for kind in ("ancestor", "boundary"):
        for level in LEVELS:
            chance = result[kind]["chance"][level]
            assert all(abs(a - chance) < 0.06 for a in result[kind]["accuracy"][level]), (
                kind, level, chance, result[kind]["accuracy"][level])


def test_only_terminals_within_the_context_are_probed_and_the_cap_is_optional(
        tokenizer, strings, labels, corpus):
    model = plant(tokenizer, strings[:10], labels[:10], lambda _, a, b: truth(a, b),
                  max_positions=50)
    result = run(context_for(model, tokenizer, corpus),
                 ProbeOptions(max_strings=10, positions_per_string=0, test_fraction=0.5))
    # tokens 1 .. 49 hold terminals 0 .. 48: 49 a string, the rest past the context
    assert result["positions"] == {"train": 5 * 49, "test": 5 * 49}
    too_long = sum(len(s["terminals"]) - 49 for s in strings[:10])
    assert result["boundary"]["skipped"] == result["ancestor"]["skipped"] == {
        "too_long": too_long}
    assert result["summary"]["ancestor_mean"] == result["summary"]["boundary_mean"] == 1.0
    capped = run(context_for(model, tokenizer, corpus),
                 ProbeOptions(max_strings=10, positions_per_string=7, test_fraction=0.5,
                              kinds=["boundary"], layers=[2]))
    assert capped["positions"] == {"train": 35, "test": 35} and "ancestor" not in capped
    assert capped["boundary"]["layers"] == [2]


@pytest.mark.parametrize("key, value, reason", [
    ("max_strings", 1, "must be 0 (all) or >= 2"),
    ("max_strings", -1, "must be 0 (all) or >= 2"),
    ("positions_per_string", -1, "must be >= 0 (0: every terminal of a string)"),
    ("kinds", ["boundary", "ancestor", "boundary"], "names a kind twice"),
    ("kinds", ["nt"], "must be p, q (bios corpus) or ancestor, boundary (cfg corpus)"),
])
def test_options_out_of_range_are_refused_naming_the_key(key, value, reason):
    with pytest.raises(ConfigError) as error:
        ProbeOptions(**{key: value}).validate()
    assert error.value.key == key and error.value.reason.startswith(reason)


def test_refusals_name_what_is_wrong_in_one_line(tokenizer, strings, labels, corpus, tmp_path):
    model = plant(tokenizer, strings[:3], labels[:3], lambda _, a, b: truth(a, b))
    with pytest.raises(ConfigError) as error:
        run(context_for(model, tokenizer, corpus), ProbeOptions(kinds=["p"]))
    assert str(error.value) == ("eval.probe.kinds=['p']: p is no probe of a cfg corpus: it has "
                                "ancestor, boundary")
    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    (damaged / HELD_OUT).write_text((corpus / HELD_OUT).read_text().splitlines()[0] + "\n")
    record_eval_set(damaged, "cfg_test")  # a corpus generated with one held-out string
    with pytest.raises(TrainError, match=r"damaged: 1 strings to probe; the probe task needs at "
                                         r"least 2 \(probe-train and probe-test\)$"):
        run(context_for(model, tokenizer, damaged), ProbeOptions())
    (damaged / HELD_OUT).unlink()
    with pytest.raises(TrainError, match=r"damaged/eval/cfg_test.jsonl: missing; the probe task "
                                         r"needs a cfg corpus's grammar and held-out strings "
                                         r"\(eval_samples >= 2\); run physlm verify \S*damaged$"):
        run(context_for(model, tokenizer, damaged), ProbeOptions())
    manifest = json.loads((damaged / "manifest.json").read_text())
    del manifest["family"]  # a grammar.json beside the shards does not make it a cfg corpus
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TrainError, match=r"damaged: a None corpus, whose family registers no "
                                         r"probe targets; the probe task reads bios or cfg "
                                         r"corpora$"):
        run(context_for(model, tokenizer, damaged), ProbeOptions())


def test_strings_whose_rule_choices_derive_other_terminals_are_refused_naming_the_file(
        tokenizer, strings, labels, corpus, tmp_path):
    model = plant(tokenizer, strings[:3], labels[:3], lambda _, a, b: truth(a, b))
    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    rows = [dict(s) for s in strings[:3]]
    rows[1]["terminals"] = rows[1]["terminals"][::-1]
    (damaged / HELD_OUT).write_text("".join(json.dumps(row) + "\n" for row in rows))
    record_eval_set(damaged, "cfg_test")
    with pytest.raises(CorpusError, match=r"damaged/eval/cfg_test.jsonl: string 1: its rule "
                                          r"choices derive other terminals than it lists; is "
                                          r"\S*damaged/grammar.json its grammar\?$"):
        run(context_for(model, tokenizer, damaged), ProbeOptions())


@pytest.fixture(scope="module")
def run_dir(corpus, tmp_path_factory):
    """A tiny GPT (2 layers, context 64) trained for two steps on the cfg corpus."""
    directory = tmp_path_factory.mktemp("nt_probe_run")
    experiment = load_experiment(tiny_experiment_file(directory),
                                 ["train.max_steps=2", "train.ckpt_every=2"])
    train(experiment, directory / "run", corpus)
    return directory / "run"


def test_physlm_eval_probes_a_gpt_trained_on_a_cfg_corpus(run_dir, tmp_path, capsys):
    from launch.cli import main

    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    config = OmegaConf.load(run_copy / "config.yaml")
    config.eval.probe.max_strings = 40
    OmegaConf.save(config, run_copy / "config.yaml")
    assert main(["eval", str(run_copy), "--task", "probe"]) == 0, capsys.readouterr().err
    written = json.loads((run_copy / "eval" / "probe.json").read_text())
    assert (written["step"], written["run"], written["grammar"]) == (2, "run", "cfg3b")
    assert written["strings"] == {"train": 32, "test": 8}
    assert written["positions"] == {"train": 32 * 20, "test": 8 * 20}
    for kind in ("ancestor", "boundary"):
        entry = written[kind]
        assert entry["layers"] == [0, 1, 2] and list(entry["accuracy"]) == LEVELS
        assert entry["skipped"] == {}  # rotary positions: no context limit on reading
        assert all(0.0 <= v <= 1.0 for values in entry["accuracy"].values() for v in values)
        best = [max(entry["accuracy"][level]) for level in LEVELS]
        assert written["summary"][f"{kind}_mean"] == pytest.approx(np.mean(best))
        assert set(written["best_layer"]) >= {f"{kind}_{level}" for level in LEVELS}
    assert (run_copy / "eval" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
