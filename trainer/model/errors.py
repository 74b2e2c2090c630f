"""The model config's one error, raised by ModelConfig and by each encoding's option checks."""

from corpus_gen.core.errors import ConfigValueError


class ModelConfigError(ConfigValueError):
    """A field out of range, named by key: a ValueError for code that builds a GPT directly, not a
    CorpusError; experiment loading (build_config) reports it as the ConfigError of `model.<key>`
    in its file."""


def require(condition: bool, field: str, value: object, reason: str) -> None:
    """Raise ModelConfigError(field, value, reason) unless condition holds."""
    if not condition:
        raise ModelConfigError(field, value, reason)
