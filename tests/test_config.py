import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.registry import schemas


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
    with pytest.raises(CorpusError, match="corpus.yaml: not valid YAML"):
        _load(tmp_path, "family: [bios\n")
    with pytest.raises(ConfigError, match="key=value"):
        _load(tmp_path, "family: bios\n", ["people"])
