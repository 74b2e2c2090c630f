import math
import os
from pathlib import Path

import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.registry import schemas
from trainer.config import load_experiment

QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "experiment" / "quickstart.yaml"


def _load(tmp_path, text, overrides=()):
    path = tmp_path / "corpus.yaml"
    path.write_text(text)
    return load_config(path, list(overrides), schemas()), str(path)


def test_file_and_overrides_compose(tmp_path):
    config, _ = _load(tmp_path, "family: bios\npeople: 50\nvariant: multi5_permute\n",
                      ["people=20000", "seed=3", "tokenizer.vocab_size=4000"])
    assert (config.people, config.seed, config.variant) == (20000, 3, "multi5_permute")
    assert config.tokenizer.vocab_size == 4000


@pytest.mark.parametrize("text, overrides, key, source_is_file", [
    ("family: bios\npeple: 5\n", [], "peple", True),
    ("family: bios\npeople: many\n", [], "people", True),
    ("family: bios\ntokenizer:\n  vocab: 5\n", [], "tokenizer.vocab", True),
    ("family: bios\n", ["peple=5"], "peple", False),
    ("family: bios\n", ["people=abc"], "people", False),
    ("family: bios\nvariant: multi5_shuffle\n", [], "variant", True),
    ("family: bios\n", ["variant=triple"], "variant", False),
    ("family: bios\npeople: 1\n", [], "people", True),
    ("family: bios\nstyle: r\nvariant: single_permute\n", [], "variant", True),
    ("family: bios\nmode: finetune\n", [], "mode", True),
    ("family: bios\npeople: 10\ncelebrities: 10\n", [], "celebrities", True),
    ("family: novels\n", [], "family", True),
])
def test_bad_keys_and_values_name_the_key_the_value_and_the_source(
        tmp_path, text, overrides, key, source_is_file):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text, overrides)
    error = caught.value
    assert error.key == key
    assert error.source == (str(tmp_path / "corpus.yaml") if source_is_file else "command line")
    assert key in str(error) and error.source in str(error)


def test_bad_value_message_shows_the_value(tmp_path):
    with pytest.raises(ConfigError, match="people='many'"):
        _load(tmp_path, "family: bios\npeople: many\n")


def test_missing_and_malformed_files_are_named(tmp_path):
    with pytest.raises(CorpusError, match="nope.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml", [], schemas())
    with pytest.raises(CorpusError) as err:
        _load(tmp_path, "family: [bios\n")
    assert str(err.value) == (f"{tmp_path / 'corpus.yaml'}: not valid YAML at line 2, column 1: "
                              "did not find expected ',' or ']' (while parsing a flow sequence)")
    with pytest.raises(CorpusError, match=r"line 1, column 10: mapping values are not allowed"):
        _load(tmp_path, "family: b: c\n")
    with pytest.raises(ConfigError, match="key=value"):
        _load(tmp_path, "family: bios\n", ["people"])


def test_unknown_corpus_keys_list_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, "family: bios\ntokenizer:\n  vocab: 5\n")
    assert caught.value.reason == ("unknown key; known: model_type, reuse, sample_records, "
                                   "vocab_size")


@pytest.mark.parametrize("override, key, value, reason", [
    ("train.beta1=3", "train.beta1", 3.0, "must be in [0, 1)"),
    ("train.beta2=1", "train.beta2", 1.0, "must be in [0, 1)"),
    ("train.grad_clip=-1", "train.grad_clip", -1.0, "must be >= 0 and finite (0: no clipping)"),
    ("train.weight_decay=-0.1", "train.weight_decay", -0.1, "must be >= 0 and finite"),
    ("train.lr=inf", "train.lr", math.inf, "must be > 0 and finite"),
    ("train.eval_every=-1", "train.eval_every", -1, "must be >= 0 (0: off)"),
    ("train.seed=-1", "train.seed", -1, "must be in [0, 2**32)"),
    ("train.resume=restart", "train.resume", "restart",
     "must be auto, reschedule, none or overwrite"),
    ("model.dropout=1.5", "model.dropout", 1.5, "must be in [0, 1)"),
    ("model.init_std=0", "model.init_std", 0.0, "must be > 0 and finite"),
    ("train.lora.rank=-1", "train.lora.rank", -1, "must be >= 0 (0: full finetuning)"),
    ("train.lora.dropout=1", "train.lora.dropout", 1.0, "must be in [0, 1)"),
    ("eval.qa.max_people=-1", "eval.qa.max_people", -1, "must be >= 0 (0: all)"),
    ("eval.manipulation.forms=[cot,prose]", "eval.manipulation.forms", "prose",
     "unknown form; known: plain, cot"),
    ("train.wandb=3", "train.wandb", 3,
     "must be a mapping of keys: entity, group, mode, project, tags"),
    ("eval.tasks=qa", "eval.tasks", "qa", "must be a list, e.g. [qa]"),
    ("eval.qa.splits.x=3", "eval.qa.splits", {"x": 3}, "must be a list, e.g. [test, train]"),
    ("train.lr=abc", "train.lr", "abc", "must be a number"),
    ("train.max_steps=1.5", "train.max_steps", 1.5, "must be an integer"),
    ("train.compile=maybe", "train.compile", "maybe", "must be true or false"),
    ("train.compile=2", "train.compile", 2, "must be true or false"),  # not read as true
    ("model.norm=[1]", "model.norm", [1], "must be a string"),
    ("train.max_steps=null", "train.max_steps", None, "must not be null"),
])
def test_out_of_range_experiment_values_name_the_key(override, key, value, reason):
    with pytest.raises(ConfigError) as caught:
        load_experiment(QUICKSTART, [override])
    error = caught.value
    assert (error.key, error.value, error.reason, error.source) == (
        key, value, reason, "command line")


def test_nan_learning_rate_is_refused():
    with pytest.raises(ConfigError, match=r"^command line: train.lr=nan: must be > 0 and finite$"):
        load_experiment(QUICKSTART, ["train.lr=nan"])


def test_every_resume_mode_loads():
    for mode in ("auto", "reschedule", "none", "overwrite"):
        assert load_experiment(QUICKSTART, [f"train.resume={mode}"]).train.resume == mode


def test_a_warmup_longer_than_the_run_is_refused_naming_both_keys():
    with pytest.raises(ConfigError) as caught:
        load_experiment(QUICKSTART, ["train.warmup_steps=100", "train.max_steps=50"])
    assert str(caught.value) == ("command line: train.warmup_steps=100: must not exceed "
                                 "max_steps (50): the run would end still warming up")
    # a warmup as long as the run is a run that warms up throughout: allowed
    assert load_experiment(QUICKSTART, ["train.warmup_steps=50",
                                        "train.max_steps=50"]).train.warmup_steps == 50


def test_model_errors_name_the_file_they_come_from(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model:\n  base: gpt_tiny\n  dropout: 1.5\n")
    with pytest.raises(ConfigError, match=rf"^{path}: model.dropout=1.5: must be in \[0, 1\)$"):
        load_experiment(path, [])


def test_a_flat_positional_key_of_earlier_versions_says_where_it_went(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model:\n  pos: relative\n  relative_buckets: 8\n")
    with pytest.raises(ConfigError) as err:
        load_experiment(path, [])
    assert str(err.value) == (f"{path}: model.relative_buckets=8: now model.relative.buckets or "
                              "model.pos_only.buckets (each positional encoding owns its options)")
    with pytest.raises(ConfigError, match=r"^command line: model.rope_theta=5: now "
                                          r"model.rope.theta \("):
        load_experiment(QUICKSTART, ["model.rope_theta=5"])
    assert load_experiment(QUICKSTART, ["model.rope.theta=5"]).model.rope.theta == 5


def test_eval_task_errors_name_the_file_they_come_from(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("eval:\n  base: igsm\n  igsm:\n    batch_size: 0\n")
    with pytest.raises(ConfigError, match=rf"^{path}: eval.igsm.batch_size=0: must be >= 1$"):
        load_experiment(path, [])


@pytest.mark.parametrize("text,key", [("model: nosuch\n", "model"),
                                      ("model:\n  base: nosuch\n", "model.base")])
def test_unknown_named_configs_name_the_experiment_key_and_the_known_ones(tmp_path, text, key):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_experiment(path, [])
    assert (err.value.source, err.value.key, err.value.value) == (str(path), key, "nosuch")
    assert "gpt_tiny" in err.value.reason and "\n" not in str(err.value)


def test_groups_name_a_users_own_file_relative_to_the_experiment_or_a_shipped_config(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "deep.yaml").write_text("n_layer: 3\n")
    (tmp_path / "parts" / "short.yaml").write_text("max_steps: 7\nwarmup_steps: 1\n")
    path = tmp_path / "exp.yaml"
    path.write_text("model: parts/deep.yaml\ntrain:\n  base: parts/short.yaml\n  lr: 0.01\n"
                    "eval: qa\n")
    experiment = load_experiment(path, [])
    assert experiment.model.n_layer == 3 and experiment.train.max_steps == 7
    assert experiment.train.lr == 0.01 and experiment.eval.tasks == ["qa"]


def test_a_whole_group_replaced_on_the_command_line(tmp_path):
    experiment = load_experiment(QUICKSTART, ["model.n_layer=3", "model=gpt2_small"])
    assert (experiment.model.n_layer, experiment.model.d_model) == (3, 768)
    (tmp_path / "mine.yaml").write_text("max_steps: 9\nwarmup_steps: 1\n")
    cwd = os.getcwd()
    try:  # a path on the command line is the working directory's
        os.chdir(tmp_path)
        assert load_experiment(QUICKSTART, ["train=mine.yaml"]).train.max_steps == 9
    finally:
        os.chdir(cwd)
    for override, reason in (("train=5", "must be a config name or a mapping"),
                             ("eval=bios_s_single", "no such file, and no shipped eval config")):
        with pytest.raises(ConfigError) as err:
            load_experiment(QUICKSTART, [override])
        assert err.value.source == "command line" and reason in err.value.reason
