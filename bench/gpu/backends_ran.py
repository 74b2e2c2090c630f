"""Which attention backend really ran: `pick_backend` may fall back from the one a config asks
for (flex takes no gradients on CPU, flash_attn needs CUDA and bf16/fp16), so rows record what
ran, not what was asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from trainer.model import attention


@contextmanager
def recording() -> Iterator[list[str]]:
    """The backend of every attention call made inside the block, in call order (the entries of
    trainer.model.attention.BACKENDS wrapped for the block's duration). Eager models only: a
    model compiled inside the block would trace the wrappers."""
    calls: list[str] = []
    originals = dict(attention.BACKENDS)

    def recorded(name: str, backend: Callable) -> Callable:
        def call(q, k, v, mask, dropout_p):
            calls.append(name)
            return backend(q, k, v, mask, dropout_p)
        return call

    attention.BACKENDS.update({name: recorded(name, fn) for name, fn in originals.items()})
    try:
        yield calls
    finally:
        attention.BACKENDS.update(originals)


def summary(calls: list[str]) -> str:
    """The backends of `calls`, each once, in order ("sdpa", or "sdpa+math" for a mix)."""
    return "+".join(dict.fromkeys(calls)) or "none"
