"""Corpus families plug in here by name; each lives in its own subpackage of corpus_gen.

A family is a schema plus three pure functions of the config: the layout (how many training
documents), the documents at stream positions [start, stop), and the evaluation sets. Any
subpackage of corpus_gen (other than core) that calls `register` is found automatically.
"""

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import corpus_gen
from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.records import Record


@dataclass(frozen=True)
class Layout:
    records: int  # training documents in the stream
    summary: dict[str, int] = field(default_factory=dict)  # family facts for the datasheet
    user_symbols: tuple[str, ...] = ()  # reserved tokenizer symbols


@dataclass(frozen=True)
class Family:
    name: str
    schema: type[CorpusConfig]
    layout: Callable[[CorpusConfig], Layout]
    records: Callable[[CorpusConfig, int, int], Iterator[Record]]
    eval_sets: Callable[[CorpusConfig], dict[str, Callable[[], Iterator[dict]]]]


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    _FAMILIES[family.name] = family
    return family


def families() -> dict[str, Family]:
    if not _FAMILIES:
        for module in pkgutil.iter_modules(corpus_gen.__path__):
            if module.ispkg and module.name != "core":
                importlib.import_module(f"corpus_gen.{module.name}")
    return _FAMILIES


def get_family(name: str) -> Family:
    return families()[name]


def schemas() -> dict[str, type[CorpusConfig]]:
    return {name: family.schema for name, family in families().items()}
