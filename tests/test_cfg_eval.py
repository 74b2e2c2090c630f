"""The cfg evaluation task against models whose answers are known: an oracle sampling exactly from
the grammar's next-token distribution scores generation accuracy 1.0 and KL 0; a model uniform
over the terminals and EOS scores accuracy 0 and the KL worked out by hand; a real tiny GPT,
trained on a tiny grammar's strings, beats itself at init; and the whole path from training
through `physlm eval` to `physlm report`."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import trainer.eval.cfg as cfg
from corpus_gen.cfg.family import text
from corpus_gen.cfg.grammar import Grammar, random_grammar
from corpus_gen.cfg.parse import log_probability, membership, next_token_distribution
from corpus_gen.cfg.sample import sample
from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.tokenizer import Tokenizer
from tests.conftest import (
    memorize,
    record_corpus_file,
    record_eval_set,
    tiny_experiment_file,
)
from tests.planted_lm import PlantedLM
from trainer.config import load_experiment
from trainer.engine import train
from trainer.eval.registry import EvalContext, eval_schema, tasks
from trainer.eval.runner import evaluate
from trainer.model import GPT, ModelConfig

# Two strings, "1 2 3 1 2 3 1 2 3" and "3 2 1 3 2 1 3 2 1", each with probability 1/2: the first
# terminal is a coin toss, everything after it (EOS included) is forced.
TWO = Grammar("two", 3, (((( 0, 0, 0), (1, 1, 1)),), (((0, 1, 2),), ((2, 1, 0),))))
# A random depth-3 grammar (strings of 12-24 terminals, ~1,900 distinct in 2,000 samples).
SMALL = random_grammar("small", (1, 3, 3, 3), (2, 3), (2, 3), 0)


def make_corpus(root: Path, grammar: Grammar, samples: int, eval_samples: int) -> Path:
    """A cfg corpus of `grammar` as `physlm gen` writes it (grammar.json, shards, cfg_test,
    tokenizer)."""
    grammar_path = root / f"{grammar.name}.json"
    grammar_path.write_text(grammar.to_json())
    config_path = root / f"{grammar.name}.yaml"
    config_path.write_text(f"family: cfg\ngrammar: {grammar_path}\n")
    config = load_config(config_path, [f"samples={samples}", f"eval_samples={eval_samples}",
                                       "tokenizer.vocab_size=300",
                                       f"tokenizer.sample_records={samples}"], schemas())
    out = root / f"{grammar.name}-corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def two_corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("cfg_two"), TWO, 20, 20)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("cfg_small"), SMALL, 300, 40)


class WordModel(PlantedLM):
    """A planted model over the grammar's words: after "<bos> t1 .. tp" its logits are the log of
    the grammar's true next-token distribution over the terminals and EOS (or, `uniform`, equal
    logits over those T + 1 tokens), -inf on every other token; after anything else (a
    non-terminal, a pad) uniform over the whole vocabulary. The oracle never leaves the
    language, so it never meets a prefix the grammar rules out.
    """

    def __init__(self, grammar: Grammar, spelling: cfg.Spelling, vocab_size: int,
                 uniform: bool = False, max_positions: int | None = None):
        super().__init__(vocab_size, max_positions)
        self.grammar, self.spelling, self.uniform = grammar, spelling, uniform
        self.words = torch.tensor([*spelling.terminals, spelling.eos])

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        words = self.spelling.read(context[1:])
        if context[0] != self.spelling.bos or words is None:
            return
        out[:] = -math.inf
        if self.uniform:
            out[self.words] = 0.0
            return
        truth = torch.tensor(next_token_distribution(self.grammar, words)[-1])
        out[self.words] = truth.log().float()


def context_for(model: nn.Module, corpus: Path, run_dir: Path) -> EvalContext:
    return EvalContext(model, Tokenizer.load(corpus / "tokenizer.model"), corpus, run_dir,
                       torch.device("cpu"))


def planted(corpus: Path, grammar: Grammar, **kwargs) -> WordModel:
    tokenizer = Tokenizer.load(corpus / "tokenizer.model")
    spelling = cfg.Spelling.of(tokenizer, grammar.terminals)
    return WordModel(grammar, spelling, tokenizer.vocab_size, **kwargs)


def test_the_task_is_registered_and_its_shipped_defaults_load(tmp_path):
    task = tasks()["cfg"]
    assert task.run is cfg.run and task.plot is cfg.plot and task.options is cfg.CfgOptions
    experiment = load_experiment(tiny_experiment_file(tmp_path), ["eval=cfg"])
    assert experiment.eval.tasks == ["cfg"] and experiment.eval.cfg == cfg.CfgOptions()


@pytest.mark.parametrize("bad", ["samples=0", "prefix_lengths=[]", "prefix_lengths=[0,0]",
                                 "prefix_lengths=[-1]", "temperature=-1", "kl_strings=-1",
                                 "batch_size=0", "max_new_tokens=-1", "kl_bucket=0"])
def test_bad_options_are_named(tmp_path, bad):
    path = tiny_experiment_file(tmp_path)
    with pytest.raises(ConfigError, match=f"cfg.{bad.split('=')[0]}"):
        load_experiment(path, ["eval=cfg", f"eval.cfg.{bad}"])


def test_the_spelling_reads_terminals_and_refuses_other_tokens(two_corpus):
    tokenizer = Tokenizer.load(two_corpus / "tokenizer.model")
    spelling = cfg.Spelling.of(tokenizer, 3)
    assert spelling.prompt([0, 1, 2, 0]) == tokenizer.encode("<bos> 1 2 3 1")
    assert spelling.read(tokenizer.encode("3 1 2")) == [2, 0, 1]
    assert spelling.read([spelling.terminals[0], spelling.bos]) is None
    assert spelling.read([spelling.eos]) is None and spelling.read([]) == []


def test_verdicts_name_why_a_string_is_no_member(two_corpus):
    spelling = cfg.Spelling.of(Tokenizer.load(two_corpus / "tokenizer.model"), 3)
    word = spelling.terminals
    right = [0, 1, 2] * 3
    assert cfg.verdict(TWO, spelling, right[:4], [word[t] for t in right[4:]], True) == (
        right, None)
    cases = {"non_terminal": ([], [word[0], spelling.bos], True),
             "no_eos": (right[:4], [word[t] for t in right[4:]], False),
             "empty": ([], [], True), "length": (right[:4], [word[0]], True),
             "no_derivation": ([0, 1, 2, 0, 1, 2, 0, 1], [word[0]], True)}
    for reason, (prefix, ids, stopped) in cases.items():
        assert cfg.verdict(TWO, spelling, prefix, ids, stopped)[1] == reason


def test_log_probability_is_the_grammars_and_never_underflows():
    assert log_probability(TWO, [0, 1, 2] * 3) == pytest.approx(-math.log(2))
    drawn = sample(SMALL, 7, np.arange(5))
    for i in range(len(drawn)):
        string = drawn.string(i).tolist()
        choices = len(drawn.rule_list(i))  # P(one derivation) = product of 1/(rules) per node
        assert log_probability(SMALL, string) >= -choices * math.log(3) - 1e-9
    long = random_grammar("deep", (1, 3, 3, 3, 3, 3, 3, 3, 3), (3, 4), (2, 3), 0)
    string = sample(long, 1, np.arange(1)).string(0).tolist()
    assert len(string) > 1000 and math.isfinite(log_probability(long, string))


def test_an_oracle_of_the_true_distribution_scores_one_and_kl_zero(two_corpus, tmp_path):
    model = planted(two_corpus, TWO)
    options = cfg.CfgOptions(samples=40, prefix_lengths=[0, 5], batch_size=16, kl_strings=20,
                             kl_bucket=5)
    results = cfg.run(context_for(model, two_corpus, tmp_path), options)
    for key in ("prefix_0", "prefix_5"):
        assert results[key] == {"accuracy": 1.0, "n": 40, "failures": {}}
    kl = results["next_token"]
    assert kl["kl"] < 1e-5 and kl["outside_mass"] < 1e-6 and kl["illegal_mass"] < 1e-6
    assert (kl["strings"], kl["positions"], kl["too_long"]) == (20, 200, 0)
    assert {k: v["n"] for k, v in kl["per_position"].items()} == {"0": 100, "5": 100}
    diversity = results["diversity"]
    assert diversity["members"] == diversity["n"] == 40
    assert diversity["distinct"] == 2 / 40 and diversity["reference_distinct"] == 2 / 20
    assert diversity["nll"] == pytest.approx(math.log(2))  # each string has probability 1/2
    assert diversity["reference_nll"] == pytest.approx(math.log(2))
    lines = [json.loads(line) for line in
             (tmp_path / "eval" / cfg.GENERATIONS).read_text().splitlines()]
    assert len(lines) == 80 and all(line["member"] for line in lines)
    assert {len(line["continuation"]) for line in lines} == {9, 4}  # EOS cut off


def test_a_uniform_model_scores_zero_and_the_kl_worked_out_by_hand(two_corpus, tmp_path):
    """Uniform over 3 terminals + EOS: KL = log 4 - H(true row); the first row is a coin toss
    (H = log 2), the other 9 are forced (H = 0): (log 2 + 9 log 4) / 10 = 1.9 log 2 nats. Mass
    on illegal tokens: 2/4 at the first position, 3/4 after it: 0.725. A member needs 10 right
    draws of 4 (9 terminals, then EOS): ~2e-6."""
    model = planted(two_corpus, TWO, uniform=True)
    options = cfg.CfgOptions(samples=200, prefix_lengths=[0, 5], batch_size=50, kl_strings=20)
    results = cfg.run(context_for(model, two_corpus, tmp_path), options)
    kl = results["next_token"]
    assert kl["kl"] == pytest.approx(1.9 * math.log(2), abs=1e-6)
    assert kl["illegal_mass"] == pytest.approx(0.725, abs=1e-6) and kl["outside_mass"] < 1e-6
    for key in ("prefix_0", "prefix_5"):  # after 5 terminals: 5 right draws, ~1e-3
        entry = results[key]
        assert entry["accuracy"] <= 0.01 and entry["n"] == 200
        assert sum(entry["failures"].values()) == 200 - round(200 * entry["accuracy"])
        assert set(entry["failures"]) <= {"empty", "length", "no_derivation", "no_eos"}
    failures = results["prefix_0"]["failures"]
    assert 30 <= failures["empty"] <= 70  # EOS first: 1/4 of 200
    assert failures["no_eos"] >= 1  # 10 tokens without EOS: (3/4)^10, ~6% of 200
    assert results["diversity"]["members"] <= 2


def test_positions_that_do_not_fit_are_counted_not_fatal(two_corpus, tmp_path):
    """Learned positions, 6 of them: the 6-token prompt of a 5-terminal prefix leaves no room;
    from BOS, 5 tokens come and never EOS; no 10-token string fits the KL pass."""
    model = planted(two_corpus, TWO, max_positions=6)
    results = cfg.run(context_for(model, two_corpus, tmp_path),
                      cfg.CfgOptions(samples=8, prefix_lengths=[0, 5], kl_strings=4))
    assert results["prefix_5"] == {"accuracy": 0.0, "n": 8, "failures": {"prompt_too_long": 8}}
    assert results["prefix_0"] == {"accuracy": 0.0, "n": 8, "failures": {"no_eos": 8}}
    assert results["next_token"]["too_long"] == 4 and results["next_token"]["kl"] is None
    assert results["diversity"]["distinct"] is None and results["diversity"]["nll"] is None
    cfg.plot(results, tmp_path / "cfg.png")  # a plot with nothing to draw still draws


def test_a_prefix_longer_than_every_held_out_string_is_empty(two_corpus, tmp_path):
    results = cfg.run(context_for(planted(two_corpus, TWO), two_corpus, tmp_path),
                      cfg.CfgOptions(samples=4, prefix_lengths=[9], kl_strings=0))
    assert results == {"prefix_9": {"accuracy": None, "n": 0, "failures": {}}}


def test_a_trained_gpt_beats_itself_at_init(small_corpus, tmp_path, one_thread):
    """A 2-layer GPT trained 150 full-batch steps on 150 strings of SMALL comes much closer to the
    grammar's next-token distribution than at init, where its mass is spread over the whole
    vocabulary (~5 nats away). Generation accuracy stays ~0 at this size: with ~1/4 of the mass
    still on illegal tokens per position, a 17-terminal string is rarely right throughout."""
    tokenizer = Tokenizer.load(small_corpus / "tokenizer.model")
    spelling = cfg.Spelling.of(tokenizer, SMALL.terminals)
    drawn = sample(SMALL, 123, np.arange(150))
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=tokenizer.vocab_size,
                            ctx=32))
    options = cfg.CfgOptions(samples=20, prefix_lengths=[0], batch_size=20, kl_strings=40)
    context = context_for(model, small_corpus, tmp_path)
    at_init = cfg.run(context, options)["next_token"]
    memorize(model, [spelling.prompt(drawn.string(i).tolist()) for i in range(len(drawn))],
             tokenizer.eos_id, steps=150, lr=0.01)
    trained = cfg.run(context, options)["next_token"]
    assert at_init["kl"] > 3.0 and at_init["outside_mass"] > 0.9 and at_init["illegal_mass"] > 0.9
    assert trained["kl"] < 0.25 * at_init["kl"]
    assert trained["outside_mass"] < 0.05 and trained["illegal_mass"] < 0.5
    assert trained["positions"] == at_init["positions"] > 40 * 12


def test_end_to_end_train_evaluate_and_report(small_corpus, tmp_path):
    """Training (the DeepSpeed engine, 3 steps), `physlm eval`'s runner and `physlm report`: the
    report's table shows each prefix length's accuracy, diversity and KL, not the buckets."""
    from launch.cli import _summary_table
    from launch.report import report

    run_dir = tmp_path / "run"
    experiment = load_experiment(tiny_experiment_file(tmp_path),
                                 ["eval=cfg", "train.max_steps=3", "train.ckpt_every=3"])
    train(experiment, run_dir, small_corpus)
    options = cfg.CfgOptions(samples=6, prefix_lengths=[0, 4], batch_size=3, kl_strings=5)
    results = evaluate(run_dir, ["cfg"], eval_schema()(tasks=["cfg"], cfg=options),
                       small_corpus)["cfg"]
    saved = json.loads((run_dir / "eval" / "cfg.json").read_text())
    assert saved == json.loads(json.dumps(results)) and saved["step"] == 3
    assert set(saved) == {"step", "run", "prefix_0", "prefix_4", "diversity", "next_token"}
    assert (run_dir / "eval" / "cfg.png").stat().st_size > 0
    assert len((run_dir / "eval" / cfg.GENERATIONS).read_text().splitlines()) == 12
    for key in ("prefix_0", "prefix_4"):
        assert saved[key]["n"] == 6 and 0 <= saved[key]["accuracy"] <= 1
    assert saved["next_token"]["kl"] > 0 and saved["next_token"]["positions"] > 5 * 12

    table = report([run_dir], tmp_path / "report")
    rows = {line.split("|")[1].strip() for line in table.splitlines()[2:]}
    assert {"cfg/prefix_0/accuracy", "cfg/prefix_4/accuracy", "cfg/diversity/reference_nll",
            "cfg/next_token/kl", "cfg/next_token/illegal_mass"} <= rows
    assert not any("per_position" in row for row in rows)
    summary = _summary_table("cfg", saved)
    assert "| prefix_0 | accuracy |" in summary and "| next_token | kl |" in summary
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["eval"]["tasks"] == ["cfg"]


def test_texts_of_held_out_rows_spell_their_terminals(small_corpus):
    """The task prompts from `terminals`; the corpus's text must say the same thing."""
    tokenizer = Tokenizer.load(small_corpus / "tokenizer.model")
    spelling = cfg.Spelling.of(tokenizer, SMALL.terminals)
    for row in cfg.load_rows(small_corpus):
        assert text(np.array(row["terminals"])) == row["text"]
        assert tokenizer.encode(row["text"]) == spelling.prompt(row["terminals"])
        assert membership(SMALL, row["terminals"]).member


def test_from_bos_needs_no_held_out_string(two_corpus, tmp_path):
    """An empty cfg_test still lets the model generate from BOS; the rest reports n = 0."""
    corpus = tmp_path / "corpus"
    shutil.copytree(two_corpus, corpus)
    (corpus / "eval" / "cfg_test.jsonl").write_text("")
    record_eval_set(corpus, "cfg_test")  # as generated with eval_samples=0
    results = cfg.run(context_for(planted(corpus, TWO), corpus, tmp_path),
                      cfg.CfgOptions(samples=6, prefix_lengths=[0, 5], kl_strings=3))
    assert results["prefix_0"] == {"accuracy": 1.0, "n": 6, "failures": {}}
    assert results["prefix_5"] == {"accuracy": None, "n": 0, "failures": {}}
    assert results["diversity"]["members"] == 6 and results["diversity"]["reference_n"] == 0
    assert results["next_token"]["strings"] == 0 and results["next_token"]["kl"] is None


def test_a_corpus_of_another_family_is_named(two_corpus, tmp_path):
    from corpus_gen.core.errors import CorpusError
    from corpus_gen.core.manifest import FORMAT, MANIFEST, write_json
    from trainer.errors import TrainError

    context = context_for(planted(two_corpus, TWO), two_corpus, tmp_path)
    context.corpus_dir = tmp_path  # the tokenizer of two_corpus, files of its own
    with pytest.raises(TrainError, match="grammar.json: missing; the cfg task needs a cfg corpus"):
        cfg.run(context, cfg.CfgOptions())
    (tmp_path / "grammar.json").write_text(TWO.to_json())
    with pytest.raises(CorpusError, match="no manifest.json; not a finished physlm corpus"):
        cfg.run(context, cfg.CfgOptions())  # a grammar no manifest vouches for
    write_json(tmp_path / MANIFEST, {"format": FORMAT, "shards": [], "tokenizer": {},
                                     "eval": []})
    with pytest.raises(TrainError, match="grammar.json: not listed in .*manifest.json"):
        cfg.run(context, cfg.CfgOptions())
    record_corpus_file(tmp_path, "grammar.json")
    with pytest.raises(TrainError, match="cfg_test.jsonl: missing"):
        cfg.run(context, cfg.CfgOptions())
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "cfg_test.jsonl").write_text('{"id": 0}\n')
    record_eval_set(tmp_path, "cfg_test")
    with pytest.raises(TrainError, match=r"cfg_test.jsonl:1: no 'terminals'; "):
        cfg.run(context, cfg.CfgOptions())


def test_a_grammar_edited_after_generation_is_refused_before_anything_is_scored(
        two_corpus, tmp_path):
    import shutil

    from trainer.errors import TrainError

    corpus = tmp_path / "corpus"
    shutil.copytree(two_corpus, corpus)
    (corpus / "grammar.json").write_text(SMALL.to_json())  # another grammar, same file name
    context = context_for(planted(corpus, TWO), corpus, tmp_path)
    with pytest.raises(TrainError) as error:
        cfg.run(context, cfg.CfgOptions())
    assert str(error.value) == (f"{corpus}/grammar.json: sha256 differs from "
                                f"{corpus}/manifest.json (damaged or modified); physlm gen of "
                                "the corpus's config repairs it")


def test_each_positions_kl_is_its_own(two_corpus, tmp_path):
    model = planted(two_corpus, TWO, uniform=True)  # KL log 2 at position 0, log 4 after
    results = cfg.run(context_for(model, two_corpus, tmp_path), cfg.CfgOptions(
        samples=1, prefix_lengths=[9], kl_strings=20, kl_bucket=1))
    per_position = results["next_token"]["per_position"]
    assert per_position["0"]["kl"] == pytest.approx(math.log(2), abs=1e-6)
    assert per_position["5"]["kl"] == pytest.approx(math.log(4), abs=1e-6)
    assert per_position["0"]["illegal_mass"] == pytest.approx(0.5, abs=1e-6)


def test_temperature_zero_samples_greedily(two_corpus, tmp_path):
    results = cfg.run(context_for(planted(two_corpus, TWO), two_corpus, tmp_path),
                      cfg.CfgOptions(samples=40, prefix_lengths=[0], temperature=0.0,
                                     kl_strings=0))
    # the oracle's ties break the same way every time: one string, always in the language
    assert results["prefix_0"]["accuracy"] == 1.0
    assert results["diversity"]["distinct"] == 1 / 40
