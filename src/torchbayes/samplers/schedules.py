"""Step-size schedules for samplers, as ``torch.optim.lr_scheduler.LambdaLR`` factories."""

from __future__ import annotations

import math

import torch

from .. import _checks

__all__ = ["cyclical_cosine", "polynomial_decay"]


def polynomial_decay(
    optimizer: torch.optim.Optimizer, b: float = 1.0, gamma: float = 0.55
) -> torch.optim.lr_scheduler.LambdaLR:
    """ε_t = a·(b + t)^−γ relative to the initial lr a·b^−γ (Welling & Teh 2011; γ ∈ (0.5, 1]
    satisfies Σε_t = ∞, Σε_t² < ∞)."""
    _checks.positive("b", b)
    if not 0.5 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0.5, 1], got gamma={gamma!r}")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: ((b + t) / b) ** -gamma)


def cyclical_cosine(
    optimizer: torch.optim.Optimizer, steps_per_cycle: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Cyclical SG-MCMC (Zhang et al. 2020, eq. 1): α_k = α_0/2·(cos(π·mod(k, K)/K) + 1).

    Large steps at the start of each cycle explore a new mode; samples are usually collected
    in the small-step end of each cycle (pair with a :class:`~torchbayes.collect.Collector`).
    """
    _checks.at_least("steps_per_cycle", steps_per_cycle, 1)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda k: 0.5 * (math.cos(math.pi * (k % steps_per_cycle) / steps_per_cycle) + 1.0),
    )
