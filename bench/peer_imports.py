"""Importing a peer's code with stand-ins for modules it imports but the benchmark never uses."""

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stubbed_modules(stubs: dict[str, types.ModuleType]) -> Iterator[None]:
    """`stubs` stand in `sys.modules` while the body imports; what was there before returns."""
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
