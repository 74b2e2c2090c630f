"""Corpus families plug in here by name; each lives in its own subpackage of corpus_gen.

A family is a schema plus three pure functions of the config: the layout (how many training
documents), the documents at stream positions [start, stop), and the evaluation sets. A family
whose documents are spelled in text units also gives them in batches (`UnitBatch`), which the
shard writer tokenizes a batch at a time. Any subpackage of corpus_gen (other than core) that
calls `register` is found automatically.
"""

import importlib
import itertools
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.probe_targets import ProbeSpec
from corpus_gen.core.records import BATCH, Batch, Record


@dataclass(frozen=True)
class Layout:
    records: int  # training documents in the stream
    summary: dict[str, int | float] = field(default_factory=dict)  # facts for the datasheet
    user_symbols: tuple[str, ...] = ()  # reserved tokenizer symbols


@dataclass(frozen=True)
class Family:
    name: str
    # The generator version: it enters the corpus fingerprint, so a corpus written by older code
    # is never reused. Bump it whenever the family's output changes (tests/test_golden.py fails
    # until the new version's digests are recorded).
    version: int
    schema: type[CorpusConfig]
    layout: Callable[[CorpusConfig], Layout]
    records: Callable[[CorpusConfig, int, int], Iterator[Record]]
    eval_sets: Callable[[CorpusConfig], dict[str, Callable[[], Iterator[dict]]]]
    batches: Callable[[CorpusConfig, int, int], Iterator[Batch]] | None = None
    # small files the family writes beside the shards, by name (a CFG corpus's grammar.json)
    files: Callable[[CorpusConfig], dict[str, bytes]] | None = None
    # a fixed vocabulary: the token names by id, each document's text those names joined by
    # single spaces (integer-token tasks), among them "<eos>", the end of document that the
    # trainer appends and documents never hold (see vocabulary.py); the corpus then has
    # vocab.json and no tokenizer.* options. None: a SentencePiece tokenizer trained on the corpus
    vocabulary: Callable[[CorpusConfig], Sequence[str]] | None = None
    # what the probe evaluation task reads off this family's corpora: its kinds of probe, its
    # eval.probe options and, per corpus, the hidden states to read with their labels
    # (corpus_gen/core/probe_targets.py)
    probe_targets: ProbeSpec | None = None
    # the generator runs numba kernels: the shard writer then assembles its `UnitBatch`es' JSON
    # with one too (corpus_gen/core/unit_json.py). numba's ~1 s load per process is paid by the
    # family's own kernels already; a family without them writes its JSON in Python instead
    compiled: bool = False

    def document_batches(self, config: CorpusConfig, start: int, stop: int) -> Iterator[Batch]:
        """The documents at stream positions [start, stop), in batches of at most BATCH (a
        family whose documents are a few tokens may hand out larger ones)."""
        if self.batches is not None:
            yield from self.batches(config, start, stop)
            return
        records = self.records(config, start, stop)
        while batch := list(itertools.islice(records, BATCH)):
            yield batch


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    _FAMILIES[family.name] = family
    return family


def import_submodules(package: str, packages_only: bool = False, skip: tuple[str, ...] = ()
                      ) -> None:
    """Import every submodule of `package`: how plug-ins (families, tasks) register."""
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if (module.ispkg or not packages_only) and module.name not in skip:
            importlib.import_module(f"{package}.{module.name}")


def families() -> dict[str, Family]:
    # always import (cheap once cached): one family imported directly must not hide the others
    import_submodules("corpus_gen", packages_only=True, skip=("core",))
    return _FAMILIES


def get_family(name: str) -> Family:
    return families()[name]


def schemas() -> dict[str, type[CorpusConfig]]:
    return {name: family.schema for name, family in families().items()}
