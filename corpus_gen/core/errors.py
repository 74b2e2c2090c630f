"""User-facing errors: one line naming the culprit (file, key, value or shard)."""


class CorpusError(Exception):
    """A problem with the user's input or the output directory, reported without a traceback."""


class ConfigError(CorpusError):
    """A config key is unknown, mistyped or out of range."""

    def __init__(self, key: str, value: object, reason: str, source: str | None = None):
        self.key, self.value, self.reason, self.source = key, value, reason, source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}={value!r}: {reason}")


class ConfigValueError(ValueError):
    """A value a config schema's `validate()` refuses, by key, raised by libraries that are not
    corpora (the model): not a CorpusError. build_config reports it as the ConfigError of the key
    under its group, naming the file it came from."""

    def __init__(self, key: str, value: object, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key}={value!r}: {reason}")
