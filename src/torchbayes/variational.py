"""Variational distributions q(w|θ) over one weight tensor.

Each is an ``nn.Module`` that owns the variational parameters θ of one tensor and can

* ``rsample(sample_shape)`` — a reparameterized draw w = g(θ, ε) (gradients flow to θ);
* ``log_prob(w)``            — elementwise log q(w|θ);
* ``entropy()``              — H[q] summed over the tensor;
* ``mean`` / ``stddev``      — the posterior mean (Graves' MAP shortcut) and scale.

* :class:`DiagonalGaussian` — N(μ, σ²) with σ = softplus(ρ) = log(1 + exp ρ), so σ stays
  positive under unconstrained updates (Blundell et al. 2015 §3.2, eqs. 3–4:
  w = μ + log(1 + exp ρ) ∘ ε, ε ~ N(0, I)).
* :class:`FixedGaussian`    — N(μ, σ²) with σ a fixed constant: Graves' (2011) weight noise.
* :class:`Delta`            — a point mass at μ: MAP / maximum likelihood.

Layers build them with a factory ``posterior(init_mean) -> VariationalDistribution``; use
``functools.partial(DiagonalGaussian, rho_init=-6.0)`` to change the defaults.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _checks

__all__ = ["Delta", "DiagonalGaussian", "Draw", "FixedGaussian", "VariationalDistribution"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Draw(NamedTuple):
    """One reparameterized draw w = μ + σ ε with the σ and ε that made it.

    Layers keep the draw of their last forward pass so the complexity cost can reuse σ
    (closed form) or ε (Monte Carlo: log q(w) = −½ε² − log σ − ½ log 2π, no re-evaluation).
    """

    sample: Tensor
    stddev: Tensor | None = None
    noise: Tensor | None = None


class VariationalDistribution(nn.Module):
    """q(w|θ) for one weight tensor of a fixed shape."""

    mu: nn.Parameter

    @property
    def mean(self) -> Tensor:
        return self.mu

    @property
    def stddev(self) -> Tensor:
        raise NotImplementedError

    def rsample(
        self,
        sample_shape: torch.Size | tuple[int, ...] = (),
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Reparameterized sample of shape ``sample_shape + mean.shape``."""
        raise NotImplementedError

    def draw(self, generator: torch.Generator | None = None) -> Draw:
        """One reparameterized sample with what made it (see :class:`Draw`)."""
        return Draw(self.rsample((), generator))

    def log_prob(self, w: Tensor) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError

    def _noise(self, sample_shape: tuple[int, ...], generator: torch.Generator | None) -> Tensor:
        shape = tuple(sample_shape) + tuple(self.mu.shape)
        return torch.randn(shape, generator=generator, device=self.mu.device, dtype=self.mu.dtype)


class _Gaussian(VariationalDistribution):
    """Shared Gaussian algebra; subclasses define ``stddev``."""

    def rsample(self, sample_shape=(), generator=None) -> Tensor:
        return torch.addcmul(self.mu, self.stddev, self._noise(sample_shape, generator))

    def draw(self, generator=None) -> Draw:
        sigma, eps = self.stddev, self._noise((), generator)
        return Draw(torch.addcmul(self.mu, sigma, eps), sigma, eps)

    def log_prob_of_draw(self, draw: Draw) -> Tensor:
        """Σ log q(w) at a draw of this q: −½ Σε² − Σ log σ − n ½ log 2π.

        Equal in value and in its θ-gradient to ``log_prob(draw.sample).sum()`` (with ε fixed,
        log q(μ + σε | μ, σ) depends on θ only through −log σ) but two passes instead of seven.
        """
        if draw.noise is None or draw.stddev is None:
            return self.log_prob(draw.sample).sum()
        eps = draw.noise.reshape(-1)
        n = eps.numel()
        return -0.5 * torch.dot(eps, eps) - torch.log(draw.stddev).sum() - n * _HALF_LOG_2PI

    def log_prob(self, w: Tensor) -> Tensor:
        sigma = self.stddev
        return -0.5 * ((w - self.mu) / sigma) ** 2 - torch.log(sigma) - _HALF_LOG_2PI

    def entropy(self) -> Tensor:
        sigma = self.stddev
        return (torch.log(sigma) + (0.5 + _HALF_LOG_2PI)).sum()


class DiagonalGaussian(_Gaussian):
    """Factorized Gaussian q(w) = N(μ, diag σ²), σ = softplus(ρ) (Blundell et al. 2015 §3.2).

    Args:
        mean: initial μ (its shape is the weight's shape; copied).
        rho_init: initial ρ for every weight; the default −5 gives σ ≈ 0.0067.
        rho_init_std: optional jitter on the initial ρ.
    """

    def __init__(self, mean: Tensor, rho_init: float = -5.0, rho_init_std: float = 0.0) -> None:
        super().__init__()
        if rho_init_std < 0:
            raise ValueError(f"rho_init_std must be >= 0, got rho_init_std={rho_init_std!r}")
        self.mu = nn.Parameter(mean.detach().clone())
        rho = torch.full_like(self.mu, float(rho_init))
        if rho_init_std > 0:
            rho.add_(torch.randn_like(rho), alpha=rho_init_std)
        self.rho = nn.Parameter(rho)

    @property
    def stddev(self) -> Tensor:
        return F.softplus(self.rho)


class FixedGaussian(_Gaussian):
    """Weight noise: q(w) = N(μ, σ²) with a fixed σ (Graves 2011 §6, "fixed" rows)."""

    def __init__(self, mean: Tensor, std: float = 0.075) -> None:
        super().__init__()
        _checks.positive("std", std)
        self.mu = nn.Parameter(mean.detach().clone())
        self.register_buffer("std", torch.as_tensor(float(std), dtype=self.mu.dtype))

    @property
    def stddev(self) -> Tensor:
        return self.std.expand_as(self.mu)


class Delta(VariationalDistribution):
    """Point mass at μ: every sample is μ.

    Its differential entropy is −∞; we report 0 (the constant description length of a
    delta posterior in Graves' (2011) MDL view), so KL(δ_μ‖p) = −log p(μ).
    """

    def __init__(self, mean: Tensor) -> None:
        super().__init__()
        self.mu = nn.Parameter(mean.detach().clone())

    @property
    def stddev(self) -> Tensor:
        return torch.zeros_like(self.mu)

    def rsample(self, sample_shape=(), generator=None) -> Tensor:
        return self.mu.expand(tuple(sample_shape) + tuple(self.mu.shape))

    def log_prob(self, w: Tensor) -> Tensor:
        raise NotImplementedError("a delta posterior has no density; its KL is −log p(μ)")

    def entropy(self) -> Tensor:
        return self.mu.new_zeros(())
