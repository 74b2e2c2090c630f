"""The built-in positional encodings' registrations and options (torch-free: see registry.py).

Each options class is the `model.<encoding>` group and checks its own values in
`validate(config)`, naming its own keys (`theta`), which ModelConfig puts under the group
(`rope.theta`), or a key of the model itself (`d_model`). The torch modules are in positional.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainer.model.errors import require
from trainer.model.registry import Encoding, register_encoding

if TYPE_CHECKING:
    from trainer.model.config import ModelConfig


@dataclass
class RopeOptions:
    theta: float = 10000.0  # the base of the rotation frequencies theta^(-i / (rotated / 2))
    # partial rotary (GPT-NeoX's rotary_pct): the first fraction of each head's channels rotate,
    # the rest pass unchanged; Part 4.1's Canon models rotate a quarter
    fraction: float = 1.0

    def validate(self, config: ModelConfig) -> None:
        require(0 < self.fraction <= 1, "fraction", self.fraction, "must be in (0, 1]")
        if self.fraction == 1:
            require(config.head_dim % 2 == 0, "d_model", config.d_model,
                    f"rope needs an even head dim; d_model / n_head = {config.head_dim}")
        else:
            rotated = config.head_dim * self.fraction
            require(rotated == round(rotated) and rotated >= 2 and round(rotated) % 2 == 0,
                    "fraction", self.fraction, f"must rotate an even number >= 2 of the "
                    f"head's {config.head_dim} channels, not {rotated:g}")
        require(0 < self.theta < math.inf, "theta", self.theta, "must be > 0 and finite")

    def rotated(self, head_dim: int) -> int:
        """How many of a head's channels rotate."""
        return round(head_dim * self.fraction)


@dataclass
class RelativeOptions:
    """T5-style distance buckets: exact below buckets // 2, log-spaced up to max_distance."""

    buckets: int = 32
    max_distance: int = 128

    def validate(self, config: ModelConfig) -> None:
        require(self.buckets >= 2, "buckets", self.buckets, "must be >= 2")
        require(self.max_distance > self.buckets // 2, "max_distance", self.max_distance,
                f"must exceed buckets // 2 = {self.buckets // 2}")


POSITIONAL = "trainer.model.positional"
register_encoding(Encoding("none", f"{POSITIONAL}:NoPE"))
register_encoding(Encoding("learned", f"{POSITIONAL}:Learned"))
register_encoding(Encoding("rope", f"{POSITIONAL}:Rotary", RopeOptions))
register_encoding(Encoding("alibi", f"{POSITIONAL}:ALiBi"))
register_encoding(Encoding("relative", f"{POSITIONAL}:RelativeBias", RelativeOptions,
                           flash_compatible=False))
# Part 1's content-free encodings: per-layer tables over relative's buckets (its own group, so
# that a sweep over model.pos can set them apart), and fixed uniform windows
register_encoding(Encoding("pos_only", f"{POSITIONAL}:PositionOnly", RelativeOptions,
                           flash_compatible=False))
register_encoding(Encoding("uniform", f"{POSITIONAL}:Uniform", flash_compatible=False))
