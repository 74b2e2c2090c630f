"""Corpus configs: OmegaConf YAML validated against dataclass schemas, with dotted overrides.

Every family's schema extends `CorpusConfig`. Loading picks the schema from the file's `family`
key, merges the file then the command line in struct mode (unknown keys and wrong types fail),
and runs the schema's `validate()`; every failure names the key, the value and where it came from.
"""

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from corpus_gen.core.errors import ConfigError, ConfigValueError, CorpusError

COMMAND_LINE = "command line"


@dataclass
class TokenizerConfig:
    vocab_size: int = 8192  # an upper bound: a small sample yields fewer pieces
    model_type: str = "bpe"  # sentencepiece model: bpe | unigram
    sample_records: int = 20000  # documents, from 64 evenly spaced places of the stream
    # a corpus directory (or tokenizer.model file) whose tokenizer this corpus uses instead of
    # training one: corpora that share it can finetune one run's weights (train.init_from)
    reuse: str | None = None


@dataclass
class CorpusConfig:
    """Keys every family shares."""

    family: str = MISSING
    seed: int = 0
    records_per_shard: int = 10000
    # documents per tar sample: 1, a sample per document; more share one sample's ~2.5 KB of
    # tar and npy headers and padding (shards.py describes both layouts)
    docs_per_sample: int = 1
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # keys added after corpora were made without them, with the value that writes what those
    # corpora hold: left out of the fingerprint at that value, so such a corpus (its cache
    # directory, its runs' saved data positions) keeps its fingerprint
    ADDED_LATER: ClassVar[dict] = {"docs_per_sample": 1}

    def validate(self) -> None:
        """Raise ConfigError for values the schema's types cannot rule out."""
        require(self.records_per_shard >= 1, "records_per_shard", self.records_per_shard, ">= 1")
        require(self.docs_per_sample >= 1, "docs_per_sample", self.docs_per_sample, ">= 1")
        require(self.tokenizer.vocab_size >= 300, "tokenizer.vocab_size",
                self.tokenizer.vocab_size, "must be >= 300 (256 byte pieces + specials)")
        require(self.tokenizer.model_type in ("bpe", "unigram"), "tokenizer.model_type",
                self.tokenizer.model_type, "must be 'bpe' or 'unigram'")
        require(self.tokenizer.sample_records >= 1, "tokenizer.sample_records",
                self.tokenizer.sample_records, ">= 1")


def refuse_unknown_keys(given: DictConfig, known: tuple[str, ...], what: str,
                        source: str) -> None:
    """A ConfigError naming the first top-level key of `given` not in `known` (a `what` file's
    keys: sweep, suite)."""
    for key in given:
        if key not in known:
            raise ConfigError(str(key), OmegaConf.to_container(given)[key],
                              f"unknown {what} key; expected {known}", source)


def require(condition: bool, key: str, value: object, reason: str) -> None:
    """Raise a ConfigError for `key` unless `condition` holds (used by `validate()`)."""
    if not condition:
        raise ConfigError(key, value, reason)


def _omegaconf_error(exc: Exception, given: DictConfig, source: str, prefix: str = ""
                     ) -> ConfigError:
    """The ConfigError for OmegaConf's `exc` on merging or building `given`, worded in config
    keys: OmegaConf's own messages name the schema's Python classes, which users never wrote."""
    return _key_error(given, getattr(exc, "full_key", None) or "?", _reason(exc), source, prefix)


def _key_error(given: DictConfig, key: str, reason: str, source: str, prefix: str
               ) -> ConfigError:
    """The ConfigError for dotted `key` of `given`, with the value given there."""
    value = OmegaConf.select(given, key, default=None, throw_on_missing=False)
    return ConfigError(prefix + key, value, reason, source)


# OmegaConf's words for a value its node's type refuses, as a user would read them
_TYPE_ERRORS = ((re.compile(r"could not be converted to Float$"), "must be a number"),
                (re.compile(r"could not be converted to Integer$"), "must be an integer"),
                (re.compile(r"is not a valid bool \(type \w+\)$"), "must be true or false"),
                (re.compile(r"^Cannot convert '\w+' to string"), "must be a string"),
                (re.compile(r"^Incompatible value 'None' for field of type"), "must not be null"))


def _reason(exc: Exception) -> str:
    parent = getattr(exc, "parent_node", None)
    if isinstance(exc, ConfigKeyError) and isinstance(parent, DictConfig):
        return f"unknown key; known: {_keys(parent)}"
    message = (getattr(exc, "msg", None) or str(exc)).splitlines()[0]
    return next((reason for pattern, reason in _TYPE_ERRORS if pattern.search(message)), message)


def _keys(node: DictConfig) -> str:
    return ", ".join(sorted(str(k) for k in node))


def _shape_error(given: object, schema: object) -> str | None:
    """Why `given` cannot stand at a schema node, when a mapping or list meets the wrong kind, or
    a switch anything but true or false (OmegaConf would read 2 or "on" as true)."""
    if given is None or isinstance(given, type(schema)):
        return None
    if isinstance(schema, bool):
        return "must be true or false"
    if isinstance(schema, DictConfig):
        return f"must be a mapping of keys: {_keys(schema)}"
    if isinstance(schema, ListConfig):
        example = ", ".join(str(item) for item in schema) or "a, b"
        return f"must be a list, e.g. [{example}]"
    return None


def _find_shape_error(given: DictConfig, schema: DictConfig,
                      path: str = "") -> tuple[str, str] | None:
    """The first key (dotted) of `given` whose value has the wrong shape for `schema`: checked
    before merging, as OmegaConf's messages for these name no key or it converts silently."""
    for key in given:
        if key not in schema:
            continue
        here, want = given.get(key), schema.get(key)
        reason = _shape_error(here, want)
        if reason:
            return f"{path}{key}", reason
        if isinstance(here, DictConfig) and isinstance(want, DictConfig):
            found = _find_shape_error(here, want, f"{path}{key}.")
            if found:
                return found
    return None


def read_yaml(path: str | Path) -> DictConfig:
    """A YAML mapping, or a CorpusError naming the file."""
    try:
        _refuse_deep_nesting(path)
        given = OmegaConf.load(path)
    except FileNotFoundError:
        raise CorpusError(f"{path}: config file not found") from None
    except Exception as exc:  # YAML syntax errors come in several exception types
        raise CorpusError(f"{path}: not valid YAML{_yaml_problem(exc)}") from None
    if not isinstance(given, DictConfig):
        raise CorpusError(f"{path}: expected a mapping of config keys at the top level")
    return given


# A YAML file nests at most one level per 2 bytes ("[" or "- "); OmegaConf's loader stops with a
# RecursionError up to ~20,000 levels and crashes the process (a segfault) beyond
_NEST_SAFE_BYTES = 16_384


def _refuse_deep_nesting(path: str | Path) -> None:
    """A RecursionError (from PyYAML's Python composer) for a file large enough to nest deeper
    than OmegaConf's loader survives; other errors are left to that loader, which names them
    as it always has."""
    if Path(path).stat().st_size <= _NEST_SAFE_BYTES:
        return
    try:
        yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        pass


def _yaml_problem(exc: Exception) -> str:
    """A YAML error on one line: where (1-based) and what, without the multi-line excerpt."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return ": " + " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    return (f" at line {mark.line + 1}, column {mark.column + 1}: {problem}"
            + (f" ({context})" if context else ""))


def parse_overrides(overrides: list[str]) -> DictConfig:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, None, "an override must look like key=value", COMMAND_LINE)
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(str(overrides), None, str(exc).splitlines()[0], COMMAND_LINE) from None


def build_config(schema: type, layers: list[tuple[DictConfig, str]], prefix: str = "") -> Any:
    """Merge `layers` (config, where it came from) in order onto `schema` in struct mode, then
    validate. Errors name the key (under `prefix`), the value and the layer it came from."""
    merged = OmegaConf.structured(schema)
    for given, source in layers:
        found = _find_shape_error(given, merged)
        if found:
            raise _key_error(given, *found, source, prefix)
        try:
            merged = OmegaConf.merge(merged, given)
        except (OmegaConfBaseException, TypeError) as exc:  # TypeError: a mapping onto a list
            raise _omegaconf_error(exc, given, source, prefix) from None
    try:
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise _omegaconf_error(exc, merged, layers[-1][1], prefix) from None
    try:
        config.validate()
    except (ConfigError, ConfigValueError) as exc:
        source = next((s for given, s in reversed(layers)
                       if OmegaConf.select(given, exc.key, default=None) is not None),
                      layers[0][1])
        raise ConfigError(prefix + exc.key, exc.value, exc.reason, source) from None
    return config


def load_config(path: str | Path, overrides: list[str], schemas: dict[str, type]) -> CorpusConfig:
    """Load a corpus config file, apply `key=value` overrides, validate against its family."""
    given, cli = read_yaml(path), parse_overrides(overrides)
    return corpus_config([(given, str(path)), (cli, COMMAND_LINE)], schemas)


def corpus_config(layers: list[tuple[DictConfig, str]], schemas: dict[str, type],
                  prefix: str = "") -> CorpusConfig:
    """The corpus config the layers describe, with the schema of their `family`."""
    family, source = None, layers[0][1]
    for given, where in layers:
        if "family" in given:
            family, source = given["family"], where
    if family not in schemas:
        raise ConfigError(prefix + "family", family,
                          f"unknown corpus family; known: {sorted(schemas)}", source)
    return build_config(schemas[family], layers, prefix)


def config_dict(config: CorpusConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def fingerprint(config: CorpusConfig, version: str) -> str:
    """Identifies the corpus a config generates: same config and code version, same bytes."""
    given = config_dict(config)
    for key, value in config.ADDED_LATER.items():
        if given[key] == value:
            del given[key]
    payload = json.dumps({"config": given, "version": version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
