"""Post-training weight quantization for evaluation (`physlm eval --quantize int8|int4`).

"Fake" quantization: each weight is rounded to a symmetric integer grid and stored back in the
model's dtype as scale * integer, so an evaluation measures exactly what the quantized weights
compute, with the float kernels. Round to nearest (ties to even), no zero point, the grid
symmetric: int8 [-127, 127], int4 [-7, 7] (-8 unused, as in symmetric schemes generally: the
grid has a zero and is the same on both sides).

- int8: one scale per row (per output channel of a Linear, per entry of an embedding table),
  max|row| / 127.
- int4: one scale per group of `group_size` consecutive weights along each row (the input
  dimension), max|group| / 7; a row whose length `group_size` does not divide ends in a
  shorter group (bias tables of n_head columns are one group).

What is quantized: the weight of every nn.Linear (attention qkv and output, MLP, the output
head) and of every nn.Embedding (the token table, learned position tables, relative-position
bias tables). Biases and norm weights stay float (a handful of values per layer, and the norms
rescale the whole stream), and so do the Canon convolutions (nn.Conv1d, [C, 1, K]: four taps
per channel). A tied output head is the token table, quantized once.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from trainer.errors import TrainError

BITS = {"int8": 8, "int4": 4}  # --quantize's choices
DEFAULT_GROUP_SIZE = 64  # int4's --group-size


@dataclass(frozen=True)
class Quantization:
    bits: int  # 8 or 4
    group_size: int | None  # weights per scale along a row; None: the whole row (per channel)

    @property
    def levels(self) -> int:
        """The largest integer of the symmetric grid: 127 for int8, 7 for int4."""
        return 2 ** (self.bits - 1) - 1

    def record(self) -> dict:
        """What the results record under `quantize`."""
        if self.group_size is None:
            return {"bits": self.bits, "scheme": "per-channel"}
        return {"bits": self.bits, "scheme": "per-group", "group_size": self.group_size}


def suffix(scheme: Quantization | None) -> str:
    """What an evaluation's files and W&B keys carry after the task's name: "" on float weights,
    `@int8`, `@int4g64` (the group size) on quantized ones (`qa@int8.json`), which so never
    replace the float results."""
    if scheme is None:
        return ""
    return f"@int{scheme.bits}" + (f"g{scheme.group_size}" if scheme.group_size else "")


def quantization(name: str | None, group_size: int | None) -> Quantization | None:
    """The scheme `--quantize NAME [--group-size N]` asks for (None: none, float weights); a
    TrainError naming the flag for anything else."""
    if name is not None and name not in BITS:
        raise TrainError(f"--quantize {name}: unknown scheme; choose {' or '.join(BITS)}")
    if group_size is not None and name != "int4":
        raise TrainError(f"--group-size {group_size}: applies to --quantize int4 only (int8 has "
                         "one scale per output channel)")
    if name is None:
        return None
    if name == "int8":
        return Quantization(8, None)
    size = DEFAULT_GROUP_SIZE if group_size is None else group_size
    if size < 1:
        raise TrainError(f"--group-size {size}: must be >= 1")
    return Quantization(4, size)


def fake_quantize(weight: Tensor, levels: int, group_size: int | None) -> Tensor:
    """`weight` [rows, ...] rounded to scale * integer in [-levels, levels], one scale per row or
    per `group_size` consecutive weights of a row, in `weight`'s dtype. Computed in float32: the
    grid's integers are exact there."""
    rows = weight.detach().float().reshape(weight.shape[0], -1)
    width = rows.shape[1]
    size = width if group_size is None else min(group_size, width)
    groups = -(-width // size)
    # zeros pad the last group: they leave its max|w| alone and are cut off again below
    padded = torch.nn.functional.pad(rows, (0, groups * size - width)).view(-1, groups, size)
    scale = padded.abs().amax(dim=-1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero group stays 0
    grid = torch.round(padded / scale).clamp(-levels, levels)
    return (grid * scale).view(rows.shape[0], -1)[:, :width].reshape(weight.shape).to(weight.dtype)


def quantized_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weights quantization rounds, by name: every nn.Linear's and nn.Embedding's, each
    tensor once (a tied head is the token table)."""
    found: dict[int, tuple[str, nn.Parameter]] = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            found.setdefault(id(module.weight), (f"{name}.weight", module.weight))
    return dict(found.values())


@torch.no_grad()
def quantize_model(model: nn.Module, scheme: Quantization) -> None:
    """Round `model`'s quantized weights (`quantized_weights`) in place."""
    for weight in quantized_weights(model).values():
        weight.copy_(fake_quantize(weight, scheme.levels, scheme.group_size))
