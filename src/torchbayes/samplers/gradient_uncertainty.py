"""Sampling with gradient uncertainty (Park et al. 2018, Algorithm 1).

SGD until the examples of a minibatch stop agreeing on where to go; then the current
parameters are a posterior sample and the step gets Gaussian noise, which moves the chain
on to another one. Agreement is measured by the per-example gradients gᵢ:

    u_t = (1/(m(m−1))) Σ_{i≠j} ⟨gᵢ, gⱼ⟩ = (m²‖ḡ‖² − Σᵢ‖gᵢ‖²) / (m(m−1))      (eq. 2)

an unbiased estimate of ‖∇L(θ)‖², the squared full-data gradient — large far from a mode,
≈ 0 (or negative) near one, where the minibatch gradient is mostly noise. Σᵢ‖gᵢ‖² comes from
:class:`~torchbayes.per_example.PerExampleGradNorms` without per-example gradient copies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from ..collect import Collector
from ..per_example import pairwise_agreement
from ..priors import Prior
from .base import SGMCMC

__all__ = ["GradientUncertainty"]


class GradientUncertainty(SGMCMC):
    """SGD that samples where gradients disagree (Park et al. 2018, Algorithm 1).

        u_t < τ:   keep θ_t as a sample;  θ ← θ − lr·(ḡ + λθ/N − ∇log p(θ)/N) + N(0, σ²)
        else:      θ ← θ − lr·(ḡ + λθ/N − ∇log p(θ)/N)

    with u_t the gradient agreement of the minibatch (module docstring). Give either a fixed
    ``threshold`` τ (in the units of ‖∇L‖², the mean loss's squared gradient norm) or a
    ``quantile`` q: then τ_t is the q-quantile of u over the last ``window`` steps, so about a
    fraction q of the steps sample whatever the scale of the gradients. No noise is injected
    until ``window`` values have been seen.

    Call :meth:`step` with ``sq_norms``, the per-example squared gradient norms ‖gᵢ‖² of the
    minibatch whose mean-loss gradient is in ``.grad``. :attr:`sampled` tells whether the
    step sampled; with a ``collector`` the sample is kept there, before the noise moves it.

    Args:
        params: parameters or parameter groups, as for any optimizer.
        lr: SGD learning rate on the mean loss.
        num_data: N, the number of training examples (scales the prior, as in the other samplers).
        noise_std: σ of the injected noise N(0, σ²).
        threshold: fixed τ; or ``None`` with ``quantile``.
        quantile: q ∈ (0, 1) for the adaptive threshold.
        window: how many past statistics the adaptive threshold looks at.
        weight_decay, prior, generator: as :class:`~torchbayes.samplers.SGLD`.
        collector: a :class:`~torchbayes.collect.Collector` that keeps the samples.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        num_data: int,
        noise_std: float,
        threshold: float | None = None,
        quantile: float | None = None,
        window: int = 100,
        weight_decay: float = 0.0,
        prior: Prior | None = None,
        generator: torch.Generator | None = None,
        collector: Collector | None = None,
    ) -> None:
        _checks.non_negative("noise_std", noise_std)
        if (threshold is None) == (quantile is None):
            raise ValueError(
                f"give exactly one of threshold= and quantile=, got threshold={threshold!r}, "
                f"quantile={quantile!r}"
            )
        if quantile is not None:
            _checks.below_one("quantile", quantile, zero_allowed=False)
        _checks.at_least("window", window, 2)
        defaults = {
            "lr": lr,
            "noise_std": noise_std,
            "weight_decay": weight_decay,
            "temperature": 1.0,  # unused: the noise scale is noise_std
        }
        super().__init__(params, defaults, num_data, prior, generator)
        self.threshold, self.quantile, self.window = threshold, quantile, window
        self.collector = collector
        self.history: deque[float] = deque(maxlen=window)
        self.sampled = False
        self.statistic = float("nan")
        self.num_steps = 0
        self.num_sampled = 0

    def current_threshold(self) -> float:
        """τ for the next step (``-inf`` while the adaptive window is still filling)."""
        if self.threshold is not None:
            return self.threshold
        if len(self.history) < self.window:
            return float("-inf")
        return _quantile(self.history, self.quantile)

    @torch.no_grad()
    def step(self, closure=None, sq_norms: Tensor | None = None):
        """One step. ``closure`` may return ``(loss, sq_norms)`` instead of passing ``sq_norms``."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            if isinstance(loss, tuple):
                loss, sq_norms = loss
        if sq_norms is None:
            raise ValueError(
                "step needs sq_norms, the per-example squared gradient norms of the minibatch "
                "(see torchbayes.per_example.PerExampleGradNorms)"
            )
        groups = [
            (group, [p for p in group["params"] if p.grad is not None])
            for group in self.param_groups
        ]
        params = [p for _, ps in groups for p in ps]
        if not params:
            raise ValueError("no parameter has a gradient: call backward before step")
        grads = [p.grad for p in params]
        norms = torch.stack(torch._foreach_norm(grads))  # one pass: finiteness and ‖ḡ‖²
        self._check_finite(params, norms)
        agreement = pairwise_agreement(norms.square().sum(), sq_norms.detach().to(norms))
        self.statistic = float(agreement)
        self.sampled = self.statistic < self.current_threshold()
        if self.quantile is not None:
            self.history.append(self.statistic)
        if self.collector is not None:
            self.collector.step(keep=self.sampled)
        self.num_steps += 1
        self.num_sampled += int(self.sampled)
        for group, group_params in groups:
            if group_params:
                self._move(group, group_params)
        return loss

    def _move(self, group: dict[str, Any], params: list[Tensor]) -> None:
        """θ ← θ(1 − lr·λ/N) − lr·(ḡ − ∇log p/N) [+ N(0, σ²)], in place."""
        lr, grads = group["lr"], [p.grad for p in params]
        if group["weight_decay"] > 0:
            torch._foreach_mul_(params, 1.0 - lr * group["weight_decay"] / self.num_data)
        if self.prior is not None:
            torch._foreach_add_(params, self._prior_gradients(params), alpha=lr / self.num_data)
        torch._foreach_add_(params, grads, alpha=-lr)
        if self.sampled and group["noise_std"] > 0:
            torch._foreach_add_(params, self._noise(params), alpha=group["noise_std"])

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["gradient_uncertainty"] = {
            "history": list(self.history),
            "num_steps": self.num_steps,
            "num_sampled": self.num_sampled,
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        extra = state_dict.pop("gradient_uncertainty", None)
        super().load_state_dict(state_dict)
        if extra is not None:
            self.history = deque(extra["history"], maxlen=self.window)
            self.num_steps, self.num_sampled = extra["num_steps"], extra["num_sampled"]


def _quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile with linear interpolation (``torch.quantile``'s default), in Python:
    a few microseconds for a window of floats instead of a tensor op per step."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
