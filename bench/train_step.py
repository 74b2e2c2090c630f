"""The one training step every benchmark times: bench_train_cpu.py, cpu_profile.py and the GPU
proof's throughput section.

forward (under autocast when asked), cross-entropy on the fp32 logits computed outside the
model (the same way for physlm and HF), backward, optimizer step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def phased_step(forward: Callable[[], Tensor], targets: Tensor,
                optimizer: torch.optim.Optimizer, autocast: torch.dtype | None = None
                ) -> tuple[float, float, float]:
    """One step; seconds of forward with the loss, backward, and the optimizer.

    forward: the logits [B, T, V] of the batch whose next tokens are `targets` [B, T];
    autocast: the dtype of torch.autocast around the forward (None: none). On CUDA the phases
    are synchronized before each clock read, so each phase's seconds are its own.
    """
    sync = torch.cuda.synchronize if targets.is_cuda else (lambda: None)
    optimizer.zero_grad(set_to_none=True)
    cast = (torch.autocast(targets.device.type, dtype=autocast) if autocast is not None
            else contextlib.nullcontext())
    sync()
    began = time.perf_counter()
    with cast:
        logits = forward()
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    sync()
    forwarded = time.perf_counter()
    loss.backward()
    sync()
    backward = time.perf_counter()
    optimizer.step()
    sync()
    return forwarded - began, backward - forwarded, time.perf_counter() - backward
