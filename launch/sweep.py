"""Sweeps: one experiment expanded over axes into runs with stable, readable names.

```yaml
name: igsm_depth_width            # default: the file's name
experiment: igsm_cpu              # the base: a shipped experiment or a path (from this file)
overrides: {train.max_steps: 400} # for every run
grid:                             # axes crossed with each other, the first outermost
  model.pos: [rope, learned]      # a key and its values
  shape:                          # a labelled axis: each point sets several keys together
    L2_d384: {model.n_layer: 2, model.d_model: 384}
    L8_d192: {model.n_layer: 8, model.d_model: 192}
zip: {}                           # axes advanced together (equal lengths), crossed with grid
seeds: [0, 1]                     # train.seed: the `seed` axis, innermost
slurm: {...}                      # resources for physlm submit (launch/slurm_config.py)
```

A run is named by its axis values, `shape-L2_d384.pos-rope.seed-0` (a key axis by its last
part, or its whole key where two would read the same), so the name of a run never changes when
other axes are added. A whole group can be an axis too (`corpus: [bios_s_single, ...]`
replaces the experiment's corpus group, as `corpus=...` does on the command line).
"""

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from corpus_gen.core.config import COMMAND_LINE, read_yaml, refuse_unknown_keys
from corpus_gen.core.errors import ConfigError
from launch.sweep_compose import Composer, plain
from trainer.config import Experiment

SWEEP_KEYS = ("name", "experiment", "overrides", "grid", "zip", "seeds", "slurm")
SEED_AXIS = "seed"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+=-]")  # what a directory name may hold as it is
NAME_MAX = 255  # bytes in a file or directory name (Linux's NAME_MAX; macOS's too)


@dataclass
class Axis:
    name: str  # as plan.json and the report name it: the key (`model.pos`) or the label
    key: str  # where it is in the sweep file, for errors: `grid.model.pos`
    labels: list[str]  # each point as run names read it
    values: list[object]  # each point as plan.json records it (JSON scalars)
    overrides: list[list[str]]  # each point's dotted overrides
    short: str = ""  # the axis as run names read it: `pos`


@dataclass
class SweepPoint:
    name: str
    axes: dict[str, object]
    experiment: Experiment


@dataclass
class Sweep:
    name: str
    axes: list[str]
    points: list[SweepPoint]
    slurm: dict
    source: str


def is_sweep(path: Path) -> bool:
    """A sweep file names its base `experiment`; no experiment or suite has that key."""
    return "experiment" in read_yaml(path)


def load_sweep(path: Path, overrides: list[str]) -> Sweep:
    """The sweep file's runs, each a validated experiment; the command line's overrides last."""
    import configs

    source = str(path)
    given = read_yaml(path)
    refuse_unknown_keys(given, SWEEP_KEYS, "sweep", source)
    name = str(given.get("name", path.stem))
    if safe_name(name) != name:  # it names directories, W&B groups and Slurm jobs
        raise ConfigError("name", name, "must be a plain name: letters, digits and _ . + = -",
                          source)
    if len(name.encode()) > NAME_MAX:
        raise ConfigError("name", name, f"is {len(name.encode())} bytes; it names a directory, "
                          f"and a directory's name holds at most {NAME_MAX}", source)
    if "experiment" not in given:
        raise ConfigError("experiment", None, "a sweep names its base experiment", source)
    base = configs.find("experiment", str(given.experiment), relative_to=path.parent)
    if base is None:
        known = ", ".join(configs.names("experiment"))
        raise ConfigError("experiment", given.experiment, "no such file, and no shipped "
                          f"experiment of that name (known: {known})", source)
    if "runs" in read_yaml(base):
        raise ConfigError("experiment", given.experiment, "is a suite; a sweep's base is one "
                          "experiment", source)
    common = _overrides("overrides", given.get("overrides"), source)
    for key in ("grid", "zip"):
        if given.get(key) is not None and not isinstance(given[key], DictConfig):
            raise ConfigError(key, plain(given[key]), "must be a mapping of axes (an axis: a "
                              "key and its values, or a label and the keys it sets)", source)
    grid = [_axis(f"grid.{k}", str(k), v, source) for k, v in (given.get("grid") or {}).items()]
    zipped = [_axis(f"zip.{k}", str(k), v, source) for k, v in (given.get("zip") or {}).items()]
    if zipped and len({len(axis.values) for axis in zipped}) > 1:
        raise ConfigError("zip", {a.name: len(a.values) for a in zipped},
                          "zipped axes must have equally many values", source)
    seeds = [_seed_axis(given.seeds, source)] if "seeds" in given else []
    axes = grid + zipped + seeds
    if not axes:
        raise ConfigError("grid", None, "a sweep needs at least one axis (grid, zip or seeds)",
                          source)
    _shorten(axes)
    combinations = _points(grid, zipped, seeds)
    names = [".".join(f"{axis.short}-{axis.labels[i]}" for axis, i in point)
             for point in combinations]
    for run, point in zip(names, combinations):  # each names a directory
        if len(run.encode()) > NAME_MAX:
            axis, i = max(point, key=lambda pair: len(pair[0].labels[pair[1]].encode()))
            raise ConfigError(axis.key, axis.labels[i], f"makes a run name of "
                              f"{len(run.encode())} bytes, and a directory's name holds at "
                              f"most {NAME_MAX}: give the axis shorter values, or short labels "
                              "(a labelled axis: `NAME: {LABEL: {KEY: VALUE}}`)", source)
    first: dict[str, int] = {}  # run name -> the first point of that name
    for index, run in enumerate(names):  # before any run is built: a clash is the file's error
        if first.setdefault(run, index) != index:
            other = combinations[first[run]]  # the axis the two points differ on
            axis = next(a for (a, i), (_, j) in zip(combinations[index], other) if i != j)
            raise ConfigError(axis.key, run, f"two runs would be named {run}; give the axis "
                              "distinct values or labels", source)
    composer = Composer(base)  # the base built once, each point's own keys set on a copy
    points = []
    for run, point in zip(names, combinations):
        experiment = _experiment(composer, common, point, overrides, source)
        experiment.name = f"{name}-{run}"
        points.append(SweepPoint(run, {axis.name: axis.values[i] for axis, i in point},
                                 experiment))
    return Sweep(name, [axis.name for axis in axes], points, plain(given.get("slurm") or {}),
                 source)


def _axis(key: str, name: str, value: object, source: str) -> Axis:
    """One axis: a list of a key's values, or a mapping of labels to several keys' values."""
    if name == SEED_AXIS:
        raise ConfigError(key, plain(value), "`seed` is the seeds axis: list seeds under "
                          "`seeds:`", source)
    if isinstance(value, ListConfig):
        values = plain(value)
        if not values:
            raise ConfigError(key, [], "an axis needs at least one value", source)
        return Axis(name, key, [_label(v) for v in values], [_scalar(v) for v in values],
                    [[_override(name, v)] for v in values])
    if isinstance(value, DictConfig):
        if not value:
            raise ConfigError(key, {}, "an axis needs at least one value", source)
        labels, overrides = [], []
        for label, sets in value.items():
            if not isinstance(sets, DictConfig) or not sets:
                raise ConfigError(f"{key}.{label}", plain(sets), "a labelled point is a "
                                  "mapping of dotted keys to values", source)
            labels.append(safe_name(str(label)))
            overrides.append([_override(str(k), plain(v)) for k, v in sets.items()])
        return Axis(name, key, labels, list(labels), overrides)
    raise ConfigError(key, plain(value), "an axis is a list of values or a mapping of labels "
                      "to overrides", source)


def _seed_axis(value: object, source: str) -> Axis:
    seeds = plain(value)
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError("seeds", seeds, "must be a non-empty list of whole numbers", source)
    return Axis(SEED_AXIS, "seeds", [str(s) for s in seeds], seeds,
                [[f"train.seed={s}"] for s in seeds])


def _shorten(axes: list[Axis]) -> None:
    """A key axis reads as its last part (`pos` for model.pos) unless two would read alike."""
    short = [axis.name.rsplit(".", 1)[-1] for axis in axes]
    for axis, label in zip(axes, short):
        axis.short = safe_name(label if short.count(label) == 1 else axis.name)


def _points(grid: list[Axis], zipped: list[Axis], seeds: list[Axis]) -> list[list[tuple]]:
    """Every run's (axis, index) pairs: grid axes crossed, the zipped ones together, seeds
    innermost."""
    dimensions = [[[(axis, i)] for i in range(len(axis.values))] for axis in grid]
    if zipped:
        dimensions.append([[(axis, i) for axis in zipped] for i in range(len(zipped[0].values))])
    dimensions += [[[(axis, i)] for i in range(len(axis.values))] for axis in seeds]
    return [[pair for part in combination for pair in part]
            for combination in itertools.product(*dimensions)]


def _experiment(composer: Composer, common: list[str], point: list[tuple],
                command_line: list[str], source: str) -> Experiment:
    """The base experiment with the sweep's overrides, its axis values, then the command line's;
    a key the schema lacks is named where the sweep file sets it."""
    own = [(axis.key, o) for axis, i in point for o in axis.overrides[i]]
    try:
        return composer.experiment(common + [o for _, o in own] + command_line)
    except ConfigError as exc:
        if exc.source != COMMAND_LINE or any(o.startswith(f"{exc.key}=") for o in command_line):
            raise
        where = next((key for key, o in own if o.startswith(f"{exc.key}=")), "overrides")
        raise ConfigError(f"{where}: {exc.key}", exc.value, exc.reason, source) from None


def _overrides(key: str, value: object, source: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, DictConfig):
        raise ConfigError(key, plain(value), "must be a mapping of dotted keys to values",
                          source)
    return [_override(str(k), plain(v)) for k, v in value.items()]


def _override(key: str, value: object) -> str:
    # JSON is YAML: strings stay strings ("1e-3" too), lists and mappings keep their shape
    return f"{key}={json.dumps(value)}"


def _label(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | dict):
        return safe_name(json.dumps(value, separators=(",", ":")))
    return safe_name(str(value))


def _scalar(value: object) -> object:
    return value if isinstance(value, str | int | float | bool) or value is None \
        else json.dumps(value)


def safe_name(text: str) -> str:
    """`text` as a directory's name: each character a name may not hold as it is, `_`."""
    return _UNSAFE.sub("_", text).strip(".") or "_"


