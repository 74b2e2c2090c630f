"""The model config's one error, raised by ModelConfig and by each encoding's option checks."""

from corpus_gen.core.errors import ConfigError


class ModelConfigError(ConfigError, ValueError):
    """A field out of range: a ConfigError so experiment loading reports it like any config key
    (with the `model.` prefix and its file), a ValueError for code that builds a GPT directly."""


def require(condition: bool, field: str, value: object, reason: str) -> None:
    """Raise ModelConfigError(field, value, reason) unless condition holds."""
    if not condition:
        raise ModelConfigError(field, value, reason)
