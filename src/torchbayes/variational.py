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
* :class:`VariationalDropout` — N(θ, α θ²), multiplicative Gaussian noise with a learned
  dropout rate α per weight, per output neuron or per tensor (Kingma et al. 2015 §3).

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

__all__ = [
    "ALPHA_GRANULARITIES",
    "Delta",
    "DiagonalGaussian",
    "Draw",
    "FixedGaussian",
    "VariationalDistribution",
    "VariationalDropout",
]

ALPHA_GRANULARITIES: tuple[str, ...] = ("weight", "neuron", "layer")

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Draw(NamedTuple):
    """One reparameterized draw w = μ + σ ε with the σ and ε that made it.

    Layers keep the draw of their last forward pass so the complexity cost can reuse σ
    (closed form) or ε (Monte Carlo: log q(w) = −½ε² − log σ − ½ log 2π, no re-evaluation).
    ``sample`` is ``None`` when the pass sampled no weights (local reparameterization); a
    Monte Carlo KL then draws its own.
    """

    sample: Tensor | None
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

    def draw(
        self,
        generator: torch.Generator | None = None,
        sample_shape: torch.Size | tuple[int, ...] = (),
    ) -> Draw:
        """Reparameterized sample(s) of shape ``sample_shape + mean.shape`` with what made
        them (see :class:`Draw`)."""
        return Draw(self.rsample(sample_shape, generator))

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

    def draw(self, generator=None, sample_shape=()) -> Draw:
        sigma, eps = self.stddev, self._noise(tuple(sample_shape), generator)
        return Draw(torch.addcmul(self.mu, sigma, eps), sigma, eps)

    def log_prob_of_draw(self, draw: Draw) -> Tensor:
        """Σ log q(w) over a draw of this q: −½ Σε² − S Σ log σ − n ½ log 2π.

        (S samples, n = S × numel.) Equal in value and in its θ-gradient to
        ``log_prob(draw.sample).sum()`` (with ε fixed, log q(μ + σε | μ, σ) depends on θ
        only through −log σ) but two passes instead of seven.
        """
        if draw.noise is None or draw.stddev is None:
            return self.log_prob(draw.sample).sum()
        eps = draw.noise.reshape(-1)
        n = eps.numel()
        log_sigma = torch.log(draw.stddev).sum() * (n // draw.stddev.numel())
        return -0.5 * torch.dot(eps, eps) - log_sigma - n * _HALF_LOG_2PI

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


class VariationalDropout(_Gaussian):
    """Variational dropout: q(w) = N(θ, α θ²) (Kingma et al. 2015 §3.2–3.3, eq. 9).

    Gaussian dropout with rate α (Srivastava et al. 2014: p = α / (1 + α) for binary
    dropout) read as a posterior over weights, with α learned. Paired with the log-uniform
    prior its KL does not depend on θ (:mod:`torchbayes.kl`, Appendix C approximation).

    Args:
        mean: initial θ.
        alpha_init: initial dropout rate α (default 0.25, i.e. binary p = 0.2).
        granularity: one α per ``"weight"``, per output ``"neuron"`` (dim ``batch_dims``) or
            per ``"layer"`` (one per tensor).
        max_alpha: upper bound on α during training (Kingma §3.4 uses α ≤ 1); ``None`` leaves
            α unbounded (sparse variational dropout, Molchanov et al. 2017).
        batch_dims: leading dims of ``mean`` that index independent copies (e.g. members
            of a population) and so never share α.
    """

    def __init__(
        self,
        mean: Tensor,
        alpha_init: float = 0.25,
        granularity: str = "weight",
        max_alpha: float | None = 1.0,
        batch_dims: int = 0,
    ) -> None:
        super().__init__()
        _checks.positive("alpha_init", alpha_init)
        _checks.one_of("granularity", granularity, ALPHA_GRANULARITIES)
        if max_alpha is not None:
            _checks.positive("max_alpha", max_alpha)
        _checks.at_least("batch_dims", batch_dims, 0)
        self.mu = nn.Parameter(mean.detach().clone())
        shape = list(self.mu.shape)
        keep = {"weight": len(shape), "neuron": batch_dims + 1, "layer": batch_dims}[granularity]
        alpha_shape = [n if d < keep else 1 for d, n in enumerate(shape)]
        self.granularity = granularity
        self.max_log_alpha = None if max_alpha is None else math.log(max_alpha)
        self.log_alpha = nn.Parameter(torch.full(alpha_shape, math.log(alpha_init)))

    @property
    def alpha(self) -> Tensor:
        """α, clipped at ``max_alpha``."""
        return torch.exp(self.clipped_log_alpha)

    @property
    def clipped_log_alpha(self) -> Tensor:
        if self.max_log_alpha is None:
            return self.log_alpha
        return self.log_alpha.clamp(max=self.max_log_alpha)

    @property
    def stddev(self) -> Tensor:
        return torch.exp(0.5 * self.clipped_log_alpha) * self.mu.abs()
