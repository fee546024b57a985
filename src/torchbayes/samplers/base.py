"""Shared machinery of the SG-MCMC samplers.

**Convention** (one for all samplers, stated once). The target is the posterior
p(θ|D) ∝ exp(−U(θ)), U(θ) = −log p(θ) − Σ_{n=1}^N log p(d_n|θ). Models return the
per-example *mean* loss L̄ over a minibatch, so Ũ(θ) = N·L̄(θ) − log p(θ) is the unbiased
minibatch estimate of U (Gan et al. 2017 eq. 4) and the sampler sees the mean-loss gradient
g = ∇L̄, as an optimizer does.

``lr`` is the learning rate of the sampler's *optimizer twin* on the mean loss: with
ε = 2·lr/N, the update −(ε/2)∇Ũ = −lr·(g − ∇log p(θ)/N) is exactly the twin's step, and the
injected noise N(0, ε·T) = N(0, 2·lr·T/N) (times the preconditioner where there is one)
makes it sample p(θ|D)^(1/T). ``temperature`` T = 1 samples the posterior; T = 0 *is* the
twin, step for step (SGD, RMSprop, SGD with momentum). Any ``torch.optim.lr_scheduler``
changes lr and with it the noise.

The prior enters as ``weight_decay`` λ (a Gaussian N(0, 1/λ), gradient λθ, fused into the
step) or as any :class:`torchbayes.priors.Prior` (its gradient by autograd).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from ..priors import Gaussian, Prior

__all__ = ["SGMCMC"]


class SGMCMC(torch.optim.Optimizer):
    """Base class: argument checks, prior gradients, noise draws and generator state."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        defaults: dict[str, Any],
        num_data: int,
        prior: Prior | None,
        generator: torch.Generator | None,
    ) -> None:
        _checks.at_least("num_data", num_data, 1)
        for name in ("lr", "temperature", "weight_decay"):
            _checks.non_negative(name, defaults[name])
        if prior is not None and defaults["weight_decay"] > 0:
            raise ValueError("give the prior as prior= or as weight_decay=, not both")
        if isinstance(prior, Gaussian) and float(prior.mean) == 0.0:
            defaults["weight_decay"] = 1.0 / float(prior.std) ** 2
            prior = None
        super().__init__(params, defaults)
        self.num_data = num_data
        self.prior = prior
        self.generator = generator

    @torch.no_grad()
    def step(self, closure=None):
        """One sampler step for every parameter group (see :meth:`_update`)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads = self._grads(group)
            if params:
                self._update(group, params, grads)
        return loss

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor]) -> None:
        """Move ``params`` given the prior-augmented mean-loss gradients ``grads``."""
        raise NotImplementedError

    # -- pieces the samplers share -------------------------------------------------------

    def _grads(self, group: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
        """(params, d) with d = g + (λ/N)θ − ∇log p(θ)/N, the twin's gradient on Ũ/N."""
        params = [p for p in group["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        norms = torch.stack(torch._foreach_norm(grads)) if grads else torch.zeros(0)
        self._check_finite(params, norms)
        decay = group["weight_decay"]
        if decay > 0:
            grads = torch._foreach_add(grads, params, alpha=decay / self.num_data)
        if self.prior is not None:
            grads = torch._foreach_add(
                list(grads), self._prior_gradients(params), alpha=-1.0 / self.num_data
            )
        return params, list(grads)

    @staticmethod
    def _check_finite(params: list[Tensor], grad_norms: Tensor) -> None:
        """Raise, naming the parameter, unless every gradient norm is finite (one sync)."""
        if not bool(torch.isfinite(grad_norms).all()):
            bad = int((~torch.isfinite(grad_norms)).nonzero()[0])
            raise FloatingPointError(
                f"non-finite gradient in parameter {bad} of the group (shape "
                f"{tuple(params[bad].shape)}); the sampler state is unchanged"
            )

    def _prior_gradients(self, params: list[Tensor]) -> list[Tensor]:
        """∇log p(θ) of the ``prior`` for each parameter, by autograd."""
        assert self.prior is not None
        with torch.enable_grad():
            detached = [p.detach().requires_grad_() for p in params]
            log_prior = sum(self.prior.log_prob(p).sum() for p in detached)
            return list(torch.autograd.grad(log_prior, detached))

    def _noise_std(self, group: dict[str, Any], scale: float = 1.0) -> float:
        """√(2·lr·T·scale/N): the std of the injected noise before preconditioning."""
        return math.sqrt(2.0 * group["lr"] * group["temperature"] * scale / self.num_data)

    def _noise(self, params: list[Tensor]) -> list[Tensor]:
        """Standard normal noise shaped like ``params``: one RNG call, split into views."""
        sizes = [p.numel() for p in params]
        flat = torch.randn(
            sum(sizes), generator=self.generator, device=params[0].device, dtype=params[0].dtype
        )
        return [chunk.view_as(p) for chunk, p in zip(flat.split(sizes), params, strict=True)]

    # -- the generator is part of the state, so a resumed chain draws the same noise --------

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.generator is not None:
            state["generator_state"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator_state", None)
        super().load_state_dict(state_dict)
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
