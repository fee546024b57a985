"""Second-order samplers with momentum: SGHMC and the stochastic gradient Nosé–Hoover thermostat.

Both are written in the variables of ``torch.optim.SGD(momentum=μ)``: a buffer b with
θ ← θ − lr·b, so v = −lr·b is the velocity of Chen et al. (2014) with learning rate
η = lr/N on Ũ (see :mod:`torchbayes.samplers.base`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from ..priors import Prior
from .base import SGMCMC

__all__ = ["SGHMC", "SGNHT"]


def _momentum_buffers(optimizer: SGMCMC, params: list[Tensor]) -> list[Tensor]:
    buffers = []
    for p in params:
        state = optimizer.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        buffers.append(state["momentum_buffer"])
    return buffers


class SGHMC(SGMCMC):
    """Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014, eq. 15 with β̂ = 0).

        b ← μ·b + (g + λθ/N − ∇log p(θ)/N) + √(2(1−μ)T/(lr·N))·ξ,    θ ← θ − lr·b

    i.e. v ← (1−α)v − η∇Ũ + N(0, 2αηT), θ ← θ + v with v = −lr·b, α = 1 − μ, η = lr/N. The
    friction α balances the injected noise. At ``temperature=0`` it is
    ``torch.optim.SGD(lr, momentum=μ, weight_decay=λ/N)`` step for step.

    Args:
        lr, num_data, weight_decay, prior, temperature, generator: as :class:`SGLD`.
        momentum: μ = 1 − α (default 0.9).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        num_data: int,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        prior: Prior | None = None,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        _checks.below_one("momentum", momentum)
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "temperature": temperature,
        }
        super().__init__(params, defaults, num_data, prior, generator)

    def _update(self, group, params, grads) -> None:
        buffers = _momentum_buffers(self, params)
        torch._foreach_mul_(buffers, group["momentum"])
        torch._foreach_add_(buffers, grads)
        lr, temperature = group["lr"], group["temperature"]
        if temperature > 0 and lr > 0:
            std = math.sqrt(2 * (1 - group["momentum"]) * temperature / (lr * self.num_data))
            torch._foreach_add_(buffers, self._noise(params), alpha=std)
        torch._foreach_add_(params, buffers, alpha=-lr)


class SGNHT(SGMCMC):
    """Stochastic gradient Nosé–Hoover thermostat (Ding et al. 2014, Alg. 2).

    A thermostat ξ (one scalar per parameter group) replaces SGHMC's fixed friction and adapts
    so that the kinetic temperature matches T, absorbing unknown gradient noise:

        b ← (1−ξ)·b + (g + λθ/N − ∇log p(θ)/N) + √(2A·T/(lr·N))·ζ,    θ ← θ − lr·b
        ξ ← ξ + lr²·mean(b²) − lr·T/N        (i.e. mean(v²) − ηT with v = −lr·b, η = lr/N)

    Args:
        lr, num_data, weight_decay, prior, temperature, generator: as :class:`SGLD`.
        diffusion: A, the injected-noise level and the thermostat's initial value (default 0.1,
            the friction of SGHMC with momentum 0.9).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        num_data: int,
        diffusion: float = 0.1,
        weight_decay: float = 0.0,
        prior: Prior | None = None,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        if diffusion <= 0:
            raise ValueError(f"diffusion must be positive, got diffusion={diffusion!r}")
        defaults = {
            "lr": lr,
            "diffusion": diffusion,
            "weight_decay": weight_decay,
            "temperature": temperature,
        }
        super().__init__(params, defaults, num_data, prior, generator)

    def _update(self, group, params, grads) -> None:
        buffers = _momentum_buffers(self, params)
        first = self.state[params[0]]
        if "thermostat" not in first:
            first["thermostat"] = torch.tensor(group["diffusion"], dtype=params[0].dtype)
        xi = first["thermostat"]
        lr, temperature = group["lr"], group["temperature"]
        torch._foreach_mul_(buffers, 1.0 - xi)  # a tensor scalar: no host sync
        torch._foreach_add_(buffers, grads)
        if temperature > 0 and lr > 0:
            std = math.sqrt(2 * group["diffusion"] * temperature / (lr * self.num_data))
            torch._foreach_add_(buffers, self._noise(params), alpha=std)
        torch._foreach_add_(params, buffers, alpha=-lr)
        squares = torch.stack(torch._foreach_norm(buffers)).pow(2).sum()
        count = sum(b.numel() for b in buffers)
        xi.add_(lr * lr * squares.to(xi.dtype) / count - lr * temperature / self.num_data)
