"""torch's deterministic mode for compiled training on CPU, entered and left exactly."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.utils.deterministic


@contextmanager
def deterministic_kernels(on: bool) -> Iterator[None]:
    """While `on`: torch's deterministic mode (warn-only: no op is refused). Inductor's CPU
    kernels sum the gradient of a lookup (the embedding's backward) with atomic adds from every
    thread, in an order that varies from run to run; in this mode they use torch's own kernel
    there, so a compiled run resumed on CPU repeats the uninterrupted one bit for bit.
    fill_uninitialized_memory goes off meanwhile: the mode would otherwise fill every new empty
    tensor with NaN, work that changes no result here. Both settings are process-wide: on exit,
    normal or not, they return to exactly what they were. Off: changes nothing."""
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory)
    if on:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]
