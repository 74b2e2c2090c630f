"""A sweep's experiments, composed in milliseconds each instead of built from the files each.

Building an experiment (`load_experiment`: read the files, merge every group onto its schema in
OmegaConf, convert, validate) takes ~50 ms; a 10,000-point sweep spent minutes on it. Most of a
point's overrides are leaves (`train.lr=0.001`, `train.seed=3`), so a `Composer` builds the base
experiment once per distinct set of the other ("structural") overrides, converts each leaf
value once with OmegaConf against its group, and gives each point an experiment of its own
whose groups are copies of the base's with its leaves set, validated as `build_config`
validates, and the groups it leaves alone shared with the base: planning treats experiments as
read-only (launch/plan.py replaces what it changes). Before trusting a leaf key it checks,
once, that changing the key alone changes nothing else (an interpolation `${.max_steps}`
elsewhere would): one ordinary build compared with the composed copy. Anything else (a group
replaced or a mapping merged over a leaf, a value the fast path cannot convert or validate) is
built the ordinary way, which also raises its error exactly as before.
"""

import copy
import dataclasses
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from corpus_gen.core.config import parse_overrides
from corpus_gen.core.errors import ConfigError, CorpusError
from trainer.config import GROUPS, Experiment, load_experiment

_UNCONVERTIBLE = object()  # a leaf value its group's OmegaConf node refuses
_MISSING = object()  # no such key


@dataclasses.dataclass(frozen=True)
class _Leaf:
    item: str  # the override as given: train.lr=0.001
    group: str  # train
    key: str  # inside the group: lr
    value: object  # parsed from YAML, before the schema's conversion


class Composer:
    """Experiments of `base` (an experiment file) with lists of dotted overrides, each equal to
    `load_experiment(base, overrides)`."""

    def __init__(self, base: Path):
        self.base = base
        self._parsed: dict[str, _Leaf | None] = {}  # override -> its leaf, None: structural
        self._bases: dict[tuple[str, ...], Experiment | None] = {}  # None: does not build
        self._nodes: dict[tuple[tuple[str, ...], str], DictConfig] = {}  # typed group nodes
        self._values: dict[tuple[tuple[str, ...], str], object] = {}  # converted leaf values
        self._local: dict[tuple[tuple[str, ...], str, str], bool] = {}  # leaf key checked

    def experiment(self, overrides: list[str]) -> Experiment:
        composed = self._compose(overrides)
        return composed if composed is not None else load_experiment(self.base, overrides)

    def _compose(self, overrides: list[str]) -> Experiment | None:
        """The experiment as a copy of its base with its leaves set; None where only an
        ordinary build can say what it is."""
        leaves = [leaf for item in overrides if (leaf := self._leaf(item)) is not None]
        structural = tuple(item for item in overrides if self._leaf(item) is None)
        base = self._base(structural)
        if base is None or _overlap(structural, leaves):
            return None
        values = []
        for leaf in leaves:
            value = self._value(structural, base, leaf)
            if value is _UNCONVERTIBLE or not self._is_local(structural, base, leaf, value):
                return None
            values.append(value)
        experiment = _with_leaves(base, leaves, values)
        try:
            for group in dict.fromkeys(leaf.group for leaf in leaves):
                getattr(experiment, group).validate()
        except ConfigError:  # the ordinary build says which layer set the value
            return None
        return experiment

    def _leaf(self, item: str) -> _Leaf | None:
        """`group.key=value` with a value that replaces the key's whole (not a mapping merged
        into it); None for anything else."""
        if item not in self._parsed:
            key, value = _parse(item)
            group, _, inner = key.partition(".")
            leaf = group in GROUPS and inner and "[" not in key and "${" not in item \
                and value is not _MISSING and not isinstance(value, DictConfig)
            self._parsed[item] = _Leaf(item, group, inner, plain(value)) if leaf else None
        return self._parsed[item]

    def _base(self, structural: tuple[str, ...]) -> Experiment | None:
        if structural not in self._bases:
            try:
                self._bases[structural] = load_experiment(self.base, list(structural))
            except CorpusError:  # ConfigError too: the ordinary build raises it, in full
                self._bases[structural] = None
        return self._bases[structural]

    def _value(self, structural: tuple[str, ...], base: Experiment, leaf: _Leaf) -> object:
        """The leaf's value as its group's schema converts it, once per value."""
        if (structural, leaf.item) in self._values:
            return self._values[structural, leaf.item]
        current = _get(getattr(base, leaf.group), leaf.key)
        value = _UNCONVERTIBLE
        if current is not _MISSING and not dataclasses.is_dataclass(current):
            node = self._node(structural, base, leaf.group)
            try:
                OmegaConf.update(node, leaf.key, leaf.value, merge=True)
                converted = OmegaConf.select(node, leaf.key)
                value = OmegaConf.to_object(converted) \
                    if isinstance(converted, DictConfig | ListConfig) else converted
            except (OmegaConfBaseException, TypeError, ValueError):
                del self._nodes[structural, leaf.group]  # possibly half updated
        self._values[structural, leaf.item] = value
        return value

    def _node(self, structural: tuple[str, ...], base: Experiment, group: str) -> DictConfig:
        if (structural, group) not in self._nodes:
            self._nodes[structural, group] = OmegaConf.structured(getattr(base, group))
        return self._nodes[structural, group]

    def _is_local(self, structural: tuple[str, ...], base: Experiment, leaf: _Leaf,
                  value: object) -> bool:
        """Whether setting the leaf's key changes nothing but the key: checked once per key, by
        the ordinary build of the first value that differs from the base's."""
        known = (structural, leaf.group, leaf.key)
        if value == _get(getattr(base, leaf.group), leaf.key):
            return True  # an unchanged value changes nothing
        if known in self._local:
            return self._local[known]
        composed = _with_leaves(base, [leaf], [value])
        try:
            self._local[known] = load_experiment(self.base, [*structural, leaf.item]) == composed
        except CorpusError:  # not valid alone; another value of the key may tell
            return False
        return self._local[known]


def _overlap(structural: tuple[str, ...], leaves: list[_Leaf]) -> bool:
    """Whether a merged override and a leaf touch the same key (their order then matters); a
    whole group replaced by a config's name (`corpus=bios_s_single`) is applied first always."""
    merged = [key for key, value in map(_parse, structural)
              if key not in GROUPS or isinstance(value, DictConfig)]
    return any(path == key or path.startswith(f"{key}.") or key.startswith(f"{path}.")
               for path in (f"{leaf.group}.{leaf.key}" for leaf in leaves) for key in merged)


def _parse(item: str) -> tuple[str, object]:
    """An override's dotted key and its value as the command line's YAML reads it."""
    key = item.split("=", 1)[0]
    try:
        return key, OmegaConf.select(parse_overrides([item]), key, default=_MISSING)
    except (ConfigError, OmegaConfBaseException):
        return key, _MISSING


def plain(value: object) -> object:
    """A value read from YAML as plain Python (lists and mappings out of OmegaConf's nodes)."""
    return OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value


def _with_leaves(base: Experiment, leaves: list[_Leaf], values: list[object]) -> Experiment:
    """A new experiment: copies of the groups the leaves set, the base's other groups shared."""
    groups = {leaf.group: copy.deepcopy(getattr(base, leaf.group)) for leaf in leaves}
    for leaf, value in zip(leaves, values):
        _set(groups[leaf.group], leaf.key, copy.deepcopy(value))
    return dataclasses.replace(base, **groups)


def _get(node: object, key: str) -> object:
    for part in key.split("."):
        if not dataclasses.is_dataclass(node) or not hasattr(node, part):
            return _MISSING
        node = getattr(node, part)
    return node


def _set(node: object, key: str, value: object) -> None:
    *parents, last = key.split(".")
    for part in parents:
        node = getattr(node, part)
    setattr(node, last, value)
