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
) -> torch.optim.Optimizer:
    """``torch.optim.RMSprop`` when ``method`` starts with "rmsprop", else ``PSGLD``."""
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
        generator=generator,
    )
