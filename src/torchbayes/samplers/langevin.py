"""First-order Langevin samplers: SGLD and preconditioned SGLD."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from ..priors import Prior
from .base import SGMCMC

__all__ = ["PSGLD", "SGLD"]


class SGLD(SGMCMC):
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011; Gan et al. 2017 eq. 6).

        θ ← θ − lr·(g + λθ/N − ∇log p(θ)/N) + N(0, 2·lr·T/N)

    i.e. θ ← θ − (ε/2)∇Ũ(θ) + N(0, εT) with ε = 2·lr/N (see :mod:`torchbayes.samplers.base`
    for the convention). At ``temperature=0`` it is ``torch.optim.SGD(lr, weight_decay=λ/N)``.

    Args:
        params: parameters or parameter groups, as for any optimizer.
        lr: learning rate of the SGD twin on the mean loss.
        num_data: N, the number of training examples.
        weight_decay: λ, the precision of a N(0, 1/λ) prior (0: flat prior).
        prior: any torchbayes prior instead of ``weight_decay``.
        temperature: T (1 = posterior, 0 = optimizer).
        generator: a ``torch.Generator`` for the noise (saved in ``state_dict``).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        num_data: int,
        weight_decay: float = 0.0,
        prior: Prior | None = None,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = {"lr": lr, "weight_decay": weight_decay, "temperature": temperature}
        super().__init__(params, defaults, num_data, prior, generator)

    def _update(self, group, params, grads) -> None:
        torch._foreach_add_(params, grads, alpha=-group["lr"])
        std = self._noise_std(group)
        if std > 0:
            torch._foreach_add_(params, self._noise(params), alpha=std)


class PSGLD(SGMCMC):
    """Preconditioned SGLD with an RMSprop preconditioner (Li et al. 2016; Gan et al. 2017 Alg. 1).

        V ← βV + (1−β) g∘g,   G = 1 ⊘ (λ_ε + √V)
        θ ← θ − lr·G∘(g + λθ/N − ∇log p(θ)/N) + N(0, 2·lr·T·G/N)

    At ``temperature=0`` it is ``torch.optim.RMSprop(lr, alpha=β, eps=λ_ε)`` (with
    ``weight_decay=λ/N``). The Γ(θ) correction term of Algorithm 1 is dropped, as Li et al.
    recommend (it vanishes as β → 1 and is costly to estimate).

    Args:
        lr, num_data, weight_decay, prior, temperature, generator: as :class:`SGLD`.
        alpha: β, the decay of the squared-gradient average (default 0.99).
        eps: λ_ε, the preconditioner's floor (default 1e-8).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        num_data: int,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        prior: Prior | None = None,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        _checks.below_one("alpha", alpha)
        _checks.positive("eps", eps)
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "eps": eps,
            "weight_decay": weight_decay,
            "temperature": temperature,
        }
        super().__init__(params, defaults, num_data, prior, generator)

    def _update(self, group, params, grads) -> None:
        square_avgs = []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros(())
                state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            square_avgs.append(state["square_avg"])
        alpha = group["alpha"]
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
        avg = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(avg, group["eps"])
        torch._foreach_addcdiv_(params, grads, avg, value=-group["lr"])
        std = self._noise_std(group)
        if std > 0:  # noise N(0, 2·lr·T·G/N) with G = 1/avg
            noise = self._noise(params)
            torch._foreach_sqrt_(avg)
            torch._foreach_addcdiv_(params, noise, avg, value=std)
