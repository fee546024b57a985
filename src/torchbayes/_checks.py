"""Argument validation shared by every public constructor: errors name the argument and value."""

from __future__ import annotations

import math

from torch import Tensor


def _as_float(value: float | Tensor) -> float:
    return float(value.detach().min()) if isinstance(value, Tensor) else float(value)


def positive(name: str, value: float | Tensor) -> None:
    """Raise ``ValueError`` unless every entry of ``value`` is finite and > 0."""
    v = _as_float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be positive and finite, got {name}={value!r}")


def non_negative(name: str, value: float | Tensor) -> None:
    """Raise ``ValueError`` unless every entry of ``value`` is finite and >= 0."""
    v = _as_float(value)
    if not (v >= 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be non-negative and finite, got {name}={value!r}")


def probability(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``0 <= value <= 1``."""
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {name}={value!r}")


def below_one(name: str, value: float, *, zero_allowed: bool = True) -> None:
    """Raise ``ValueError`` unless ``0 <= value < 1`` (``0 < value < 1`` without
    ``zero_allowed``): rates, fractions and decay factors that must leave something."""
    low_ok = value >= 0.0 if zero_allowed else value > 0.0
    if not (low_ok and value < 1.0):
        interval = "[0, 1)" if zero_allowed else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {name}={value!r}")


def at_least(name: str, value: int, low: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer >= ``low``."""
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {name}={value!r}")


def one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {name}={value!r}")
