"""GPT variants for physlm: config, registries of encodings and block options, the model.

`ModelConfig` and the registries import no torch, so that reading an experiment file does not;
`GPT` and `KVCache` import it when first asked for (PEP 562).
"""

import importlib

from trainer.model.config import ModelConfig
from trainer.model.registry import block_options, encodings

_TORCH = {"GPT": "trainer.model.gpt", "KVCache": "trainer.model.kv_cache"}

__all__ = ["GPT", "KVCache", "ModelConfig", "block_options", "encodings"]


def __getattr__(name: str) -> object:
    if name not in _TORCH:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_TORCH[name]), name)
