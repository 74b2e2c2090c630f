"""GPT variants for physlm: config, positional-encoding registry, attention backends, KV cache."""

from trainer.model.config import ModelConfig
from trainer.model.gpt import GPT
from trainer.model.kv_cache import KVCache
from trainer.model.positional import POSITIONAL

__all__ = ["GPT", "POSITIONAL", "KVCache", "ModelConfig"]
