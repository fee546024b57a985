"""RMSprop and its sampler twin pSGLD built alike, for the side-by-side experiments of Gan et
al. (2017): the same lr, β and prior N(0, 1/λ) — weight decay λ/N for the optimizer."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..samplers import PSGLD


def rmsprop_or_psgld(
    method: str,
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    alpha: float,
    num_data: int,
    prior_precision: float,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
) -> torch.optim.Optimizer:
    """``torch.optim.RMSprop`` when ``method`` starts with "rmsprop", else ``PSGLD`` sampling
    p(θ|D)^(1/T). Gan et al.'s own pSGLD (zhegan27/Bayesian_RNN) scales its noise by 2/N
    where the posterior needs √(2/N): it samples at T = 2/N."""
    if method.startswith("rmsprop"):
        return torch.optim.RMSprop(
            params, lr=lr, alpha=alpha, eps=1e-8, weight_decay=prior_precision / num_data
        )
    return PSGLD(
        params,
        lr=lr,
        num_data=num_data,
        alpha=alpha,
        weight_decay=prior_precision,
        temperature=temperature,
        generator=generator,
    )


def sampling_temperature(temperature: float, paper_noise: bool, num_data: int) -> float:
    """``temperature``, or 2/N with ``paper_noise`` (the noise scale of Gan et al.'s code)."""
    return 2.0 / num_data if paper_noise else temperature
