from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from corpus_gen.core.config import load_config
from corpus_gen.core.registry import schemas

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="session")
def train_corpus(tmp_path_factory) -> Path:
    """A tiny bios corpus with QA in the stream (mix) in 4 shards, shared by training tests.
    Tests that damage it work on a copy."""
    from corpus_gen.core.generate import generate_corpus

    config = load_config(ROOT / "configs/corpus/bios_s_multi5_permute.yaml",
                         ["people=40", "mode=mix", "records_per_shard=60",
                          "tokenizer.vocab_size=600", "tokenizer.sample_records=300"], schemas())
    out = tmp_path_factory.mktemp("train_corpus") / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def record_eval_set(corpus: Path, name: str) -> None:
    """Record `eval/<name>.jsonl` in the corpus's manifest (a bare one where there is none) with
    the file's sha256, as physlm gen would: a set a test wrote or edited, which evaluation then
    trusts."""
    _record(corpus, "eval", f"eval/{name}.jsonl")


def record_corpus_file(corpus: Path, name: str) -> None:
    """Record the family's file `name` (grammar.json) in the corpus's manifest, likewise."""
    _record(corpus, "files", name)


def _record(corpus: Path, kind: str, listed: str) -> None:
    from corpus_gen.core.io import read_json_file, sha256_file
    from corpus_gen.core.manifest import FORMAT, MANIFEST, write_json

    path = corpus / MANIFEST
    manifest = (read_json_file(path) if path.exists()
                else {"format": FORMAT, "shards": [], "tokenizer": {}, "eval": []})
    entries = [e for e in manifest.get(kind, []) if e["name"] != listed]
    manifest[kind] = [*entries, {"name": listed, "sha256": sha256_file(corpus / listed)}]
    write_json(path, manifest)


def tiny_experiment_file(directory: Path) -> Path:
    """An experiment YAML of a 2-layer, 32-wide GPT that trains in milliseconds per step."""
    path = directory / "exp.yaml"
    path.write_text("name: t\nmodel:\n  n_layer: 2\n  n_head: 2\n  d_model: 32\n"
                    "train:\n  ctx: 64\n  micro_batch: 4\n  lr: 0.003\n  warmup_steps: 2\n"
                    "  log_every: 1\n  wandb:\n    mode: disabled\n")
    return path


@pytest.fixture
def tiny_experiment(tmp_path):
    """`tiny_experiment(*overrides)`: the tiny experiment, loaded with dotted overrides."""
    from trainer.config import load_experiment

    return lambda *overrides: load_experiment(tiny_experiment_file(tmp_path), list(overrides))


def memorize(model: torch.nn.Module, documents: list[list[int]], eos: int, steps: int,
             lr: float = 0.02) -> None:
    """Full-batch AdamW on token documents, each from position 0 and ending in EOS: a model that
    has seen them, in seconds (the DeepSpeed engine is tested elsewhere)."""
    width = max(map(len, documents)) + 1
    tokens = torch.tensor([d + [eos] + [0] * (width - len(d) - 1) for d in documents])
    targets = torch.tensor([d + [eos] + [-100] * (width - len(d) - 1) for d in documents])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.fixture
def one_thread():
    """Training on one thread: on a busy machine torch's threads spin (several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
