import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.registry import schemas


@pytest.fixture
def bios_config(tmp_path):
    """Build a validated bios config from keyword overrides (small tokenizer for speed)."""

    def make(**overrides):
        path = tmp_path / "bios.yaml"
        path.write_text("family: bios\n")
        items = {"people": 300, "tokenizer.vocab_size": 1000, "tokenizer.sample_records": 500}
        items.update(overrides)
        return load_config(path, [f"{k}={v}" for k, v in items.items()], schemas())

    return make
