"""The model's plug-in points: positional encodings and block options, registered by name.

An entry is the options dataclass of the experiment's `model.<name>` group (with
`validate(config)`) and where its torch code lives, as "module:attribute". Reading and checking a
config needs the options only, so this module and every registration import no torch (reading
an experiment file stays fast); an entry's `load()` imports the torch side when a model is
built. One plug-in module that calls `register_encoding` or
`register_block_option` when imported is all a new encoding or option takes: the `model` schema
(`trainer.model.config.model_schema`) gets its group from here. The built-in encodings register
in `trainer.model.positional_options`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


def _load(reference: str) -> object:
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Encoding:
    """A positional encoding, chosen by `model.pos: <name>`."""

    name: str
    implementation: str  # "module:Class", a trainer.model.positional.Positional subclass
    options: type | None = None  # the `model.<name>` group, or None when it has no options
    flash_compatible: bool = True  # flash_attn can run it (rotations and ALiBi slopes only)

    def load(self) -> type:
        return _load(self.implementation)


@dataclass(frozen=True)
class BlockOption:
    """An option of every block, configured by the `model.<name>` group, whose defaults mean
    off: a block then computes what it computed before the option existed, with the same
    parameters, so checkpoints saved without the option load and resume."""

    name: str
    # "module:function", (config, layer) -> the block's trainer.model.gpt.BlockHook, or None
    # when the options leave it off
    implementation: str
    options: type

    def load(self) -> object:
        return _load(self.implementation)


_ENCODINGS: dict[str, Encoding] = {}
_BLOCK_OPTIONS: dict[str, BlockOption] = {}


def _refuse_taken(name: str) -> None:
    # both kinds share the `model.<name>` namespace
    if name in _ENCODINGS or name in _BLOCK_OPTIONS:
        raise ValueError(f"model option group {name!r} is registered twice")


def register_encoding(encoding: Encoding) -> Encoding:
    _refuse_taken(encoding.name)
    _ENCODINGS[encoding.name] = encoding
    return encoding


def register_block_option(option: BlockOption) -> BlockOption:
    _refuse_taken(option.name)
    _BLOCK_OPTIONS[option.name] = option
    return option


def encodings() -> dict[str, Encoding]:
    importlib.import_module("trainer.model.positional_options")  # the built-ins, once
    return _ENCODINGS


def block_options() -> dict[str, BlockOption]:
    return _BLOCK_OPTIONS


def option_groups() -> dict[str, type]:
    """The `model.<name>` groups, name -> options dataclass: the encodings that have options,
    then the block options, each in name order."""
    groups = {name: e.options for name, e in sorted(encodings().items()) if e.options}
    return groups | {name: o.options for name, o in sorted(block_options().items())}
