"""The learning-rate schedule: linear warmup to the peak, then a cosine down to min_lr_ratio,
held there past max_steps."""

import math

import pytest

from trainer.schedule import lr_factor


def test_warmup_is_linear_then_a_cosine_ends_at_min_lr_ratio():
    # warmup 2 of 6 steps, min 0.1: step 0 is at 1/2, step 1 reaches the peak
    assert lr_factor(0, 2, 6, 0.1) == 0.5
    assert lr_factor(1, 2, 6, 0.1) == 1.0
    assert lr_factor(2, 2, 6, 0.1) == 1.0  # the cosine at progress 0
    assert lr_factor(4, 2, 6, 0.1) == pytest.approx(0.55)  # halfway: 0.1 + 0.9 / 2
    assert lr_factor(5, 2, 6, 0.1) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 3 / 4)))
    assert lr_factor(6, 2, 6, 0.1) == pytest.approx(0.1)  # min_lr_ratio, not 0
    assert lr_factor(9, 2, 6, 0.1) == pytest.approx(0.1)  # and it stays there


def test_without_warmup_the_cosine_starts_at_the_peak_and_may_end_at_zero():
    assert lr_factor(0, 0, 4, 0.0) == 1.0 and lr_factor(4, 0, 4, 0.0) == pytest.approx(0.0)
