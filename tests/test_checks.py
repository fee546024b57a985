"""The shared argument checks: boundaries, non-finite values, and the message naming the value."""

import math

import pytest

from torchbayes import _checks


@pytest.mark.parametrize("value", [0.0, 0.5, 0.999])
def test_below_one_accepts_the_half_open_interval(value):
    _checks.below_one("rate", value)


@pytest.mark.parametrize("value", [-0.1, 1.0, 2.0, math.nan, math.inf])
def test_below_one_refuses_everything_else_and_names_the_value(value):
    with pytest.raises(ValueError, match=r"rate must lie in \[0, 1\), got rate="):
        _checks.below_one("rate", value)


def test_below_one_without_zero_is_the_open_interval():
    _checks.below_one("fraction", 1e-9, zero_allowed=False)
    with pytest.raises(ValueError, match=r"fraction must lie in \(0, 1\), got fraction=0.0"):
        _checks.below_one("fraction", 0.0, zero_allowed=False)
