"""KL(q‖p) between a variational distribution and a prior, summed over the tensor.

One dispatch, :func:`kl_divergence`: a closed form when one is registered for the pair
(looked up along both classes' MROs), otherwise the Monte Carlo estimate of Blundell et
al. (2015) eq. 2 from a weight sample w ~ q — pass the sample the forward pass used so the
complexity and likelihood terms share it:

    KL(q‖p) ≈ Σ_j [log q(w_j|θ) − log p(w_j)].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _checks
from ._log_uniform_table import (
    EXPECTED_LOG_ABS,
    LOG_ALPHA_MAX,
    LOG_ALPHA_MIN,
    LOG_ALPHA_STEP,
)
from .priors import Gaussian, Laplace, LogUniform, Prior, Uniform, expected_abs_deviation
from .variational import Delta, Draw, VariationalDistribution, VariationalDropout, _Gaussian

__all__ = [
    "LOG_UNIFORM_KL_APPROXIMATIONS",
    "gaussian_kl",
    "has_closed_form",
    "kl_divergence",
    "kl_per_weight",
    "log_uniform_kl",
    "monte_carlo_kl",
    "register_kl",
]

_HALF_LOG_2PI_E = 0.5 * math.log(2 * math.pi * math.e)

KLFn = Callable[[VariationalDistribution, Prior, "Tensor | None"], Tensor]
_REGISTRY: dict[tuple[type, type], KLFn] = {}


def register_kl(q_type: type, p_type: type) -> Callable[[KLFn], KLFn]:
    """Decorator registering a closed-form KL ``fn(q, p, stddev)`` for (q_type, p_type).

    ``stddev`` is q's σ when the caller already computed it this step (else ``None``).
    """

    def decorate(fn: KLFn) -> KLFn:
        _REGISTRY[(q_type, p_type)] = fn
        return fn

    return decorate


def _lookup(q: VariationalDistribution, p: Prior) -> KLFn | None:
    for q_cls in type(q).__mro__:
        for p_cls in type(p).__mro__:
            fn = _REGISTRY.get((q_cls, p_cls))
            if fn is not None:
                return fn
    return None


def has_closed_form(q: VariationalDistribution, p: Prior) -> bool:
    """Whether :func:`kl_divergence` will use a closed form for this pair."""
    return _lookup(q, p) is not None


def monte_carlo_kl(q: VariationalDistribution, p: Prior, sample: Tensor | Draw) -> Tensor:
    """Blundell et al. (2015) eq. 2: Σ [log q(w) − log p(w)] at one sample w ~ q.

    Given a :class:`~torchbayes.variational.Draw` of a Gaussian q, log q(w) comes from its ε
    and σ (same value and gradient, fewer passes over the weights).
    """
    if isinstance(sample, Draw):
        log_q = q.log_prob_of_draw(sample) if isinstance(q, _Gaussian) else None
        sample = sample.sample
        if log_q is not None:
            return log_q - p.log_prob(sample).sum()
    return (q.log_prob(sample) - p.log_prob(sample)).sum()


def kl_divergence(
    q: VariationalDistribution, p: Prior, draw: Tensor | Draw | None = None
) -> Tensor:
    """KL(q‖p) in nats, summed over the tensor: closed form if known, else Monte Carlo.

    ``draw`` — a sample from q, or the :class:`~torchbayes.variational.Draw` the forward pass
    made — is what the Monte Carlo estimate uses; a closed form reuses the draw's σ.
    """
    fn = _lookup(q, p)
    if fn is not None:
        return fn(q, p, draw.stddev if isinstance(draw, Draw) else None)
    if draw is None or (isinstance(draw, Draw) and draw.sample is None):
        draw = q.draw()
    return monte_carlo_kl(q, p, draw)


class _GaussianKL(torch.autograd.Function):
    """Σ KL(N(μ, σ²)‖N(m, s²)) for a scalar prior (m, s), with its analytic gradient.

    Forward: ½[(Σσ² + Σ(μ−m)²)/s² − n] − Σ log σ + n log s  (two dot products, one log).
    Backward: ∂/∂μ = (μ−m)/s², ∂/∂σ = σ/s² − 1/σ. Fewer passes over the weights than
    autograd through the elementwise formula — this sits on every training step.
    """

    @staticmethod
    def forward(ctx, mu: Tensor, sigma: Tensor, prior_mean: Tensor, prior_std: Tensor) -> Tensor:
        centred = mu if float(prior_mean) == 0.0 else mu - prior_mean
        flat_c, flat_s = centred.reshape(-1), sigma.reshape(-1)
        prior_var = prior_std * prior_std
        n = flat_c.numel()
        quad = (torch.dot(flat_s, flat_s) + torch.dot(flat_c, flat_c)) / prior_var
        kl = 0.5 * (quad - n) - torch.log(flat_s).sum() + n * torch.log(prior_std)
        ctx.save_for_backward(centred, sigma, prior_var)
        return kl

    @staticmethod
    def backward(ctx, grad: Tensor):
        centred, sigma, prior_var = ctx.saved_tensors
        scale = grad / prior_var
        grad_mu = centred * scale if ctx.needs_input_grad[0] else None
        grad_sigma = None
        if ctx.needs_input_grad[1]:
            grad_sigma = torch.reciprocal(sigma).mul_(-grad).add_(sigma * scale)
        return grad_mu, grad_sigma, None, None


def gaussian_kl(mu_q: Tensor, sigma_q: Tensor, mu_p: Tensor, sigma_p: Tensor) -> Tensor:
    """Σ KL(N(μ_q, σ_q²)‖N(μ_p, σ_p²)) = Σ [log σ_p/σ_q + (σ_q² + (μ_q−μ_p)²)/(2σ_p²) − ½].

    Uses the fused :class:`_GaussianKL` when the prior is one scalar (m, s) — the common
    case — and broadcasting elementwise algebra otherwise.
    """
    mu_p, sigma_p = torch.as_tensor(mu_p), torch.as_tensor(sigma_p)
    if mu_p.numel() == 1 and sigma_p.numel() == 1:
        sigma_q = sigma_q.expand_as(mu_q)
        return _GaussianKL.apply(mu_q, sigma_q, mu_p.reshape(()), sigma_p.reshape(()))
    var_ratio = (sigma_q / sigma_p) ** 2
    mean_term = ((mu_q - mu_p) / sigma_p) ** 2
    return 0.5 * (var_ratio + mean_term - 1.0 - torch.log(var_ratio)).sum()


@register_kl(_Gaussian, Gaussian)
def _gaussian_gaussian(q: _Gaussian, p: Gaussian, stddev: Tensor | None) -> Tensor:
    return gaussian_kl(q.mu, q.stddev if stddev is None else stddev, p.mean, p.std)


@register_kl(_Gaussian, Laplace)
def _gaussian_laplace(q: _Gaussian, p: Laplace, stddev: Tensor | None) -> Tensor:
    """Σ KL(N(μ, σ²)‖L(m, b)) = Σ [E|w − m|/b + log 2b − log σ − ½ log 2πe] (Graves §5.1)."""
    sigma = q.stddev if stddev is None else stddev
    expected_abs = expected_abs_deviation(q.mu, sigma, p.loc)
    n = q.mu.numel()
    log_terms = n * torch.log(2.0 * p.scale) - torch.log(sigma).sum()
    return expected_abs.sum() / p.scale + log_terms - n * _HALF_LOG_2PI_E


@register_kl(Delta, Prior)
def _delta_any(q: Delta, p: Prior, stddev: Tensor | None) -> Tensor:
    return -p.log_prob(q.mu).sum()


@register_kl(VariationalDistribution, Uniform)
def _any_uniform(q: VariationalDistribution, p: Uniform, stddev: Tensor | None) -> Tensor:
    return -q.entropy()


# Kingma et al. (2015) Appendix C: −KL ≈ const + ½ log α + c₁α + c₂α² + c₃α³ for α ≤ 1.
_KINGMA_C = (1.16145124, -1.50204118, 0.58629921)
# Molchanov et al. (2017) eq. 14: −KL ≈ k₁ sigmoid(k₂ + k₃ log α) − ½ log(1 + 1/α) − k₁.
_MOLCHANOV_K = (0.63576, 1.87320, 1.48695)
# KL → 0 as α → ∞ fixes the constant: E log|ε| = −(γ + log 2)/2.
_KL_CONSTANT = 0.5 * (0.5772156649015329 + math.log(2.0))
_KL_AT_ALPHA_ONE = EXPECTED_LOG_ABS[round(-LOG_ALPHA_MIN / LOG_ALPHA_STEP)] + _KL_CONSTANT
LOG_UNIFORM_KL_APPROXIMATIONS: tuple[str, ...] = ("kingma", "molchanov", "quadrature")


def log_uniform_kl(log_alpha: Tensor, approximation: str = "kingma") -> Tensor:
    """Elementwise KL(N(θ, αθ²) ‖ log-uniform) as a function of log α only (Kingma et al.
    2015 §3.3): KL = E log|1 + √α ε| − ½ log α + (γ + log 2)/2, ε ~ N(0, 1).

    The constant makes KL → 0 as α → ∞ (the prior is improper; only differences in α
    matter for training). ``approximation``:

    * ``"kingma"`` — the paper's cubic (Appendix C) for α ≤ 1, its constant set to agree
      with the exact KL at α = 1; within 0.008 of the exact KL on α ∈ [0.1, 1], 0.04 below.
    * ``"molchanov"`` — Molchanov et al.'s (2017) sigmoid fit, for every α (sparse VD).
    * ``"quadrature"`` — the exact expectation, tabulated by quadrature and interpolated
      linearly in log α: within 1e-4 everywhere.
    """
    _checks.one_of("approximation", approximation, LOG_UNIFORM_KL_APPROXIMATIONS)
    k1, k2, k3 = _MOLCHANOV_K
    if approximation == "molchanov":
        return k1 - k1 * torch.sigmoid(k2 + k3 * log_alpha) + 0.5 * F.softplus(-log_alpha)
    if approximation == "quadrature":
        return _expected_log_abs(log_alpha) - 0.5 * log_alpha + _KL_CONSTANT
    c1, c2, c3 = _KINGMA_C
    alpha = torch.exp(log_alpha)
    neg_kl = 0.5 * log_alpha + alpha * (c1 + alpha * (c2 + alpha * c3))
    return (c1 + c2 + c3) + _KL_AT_ALPHA_ONE - neg_kl


def _expected_log_abs(log_alpha: Tensor) -> Tensor:
    """E log|1 + √α ε| from the quadrature table, with its asymptotes off the grid."""
    table = torch.tensor(EXPECTED_LOG_ABS, dtype=log_alpha.dtype, device=log_alpha.device)
    position = (log_alpha - LOG_ALPHA_MIN) / LOG_ALPHA_STEP
    index = position.detach().floor().clamp(0, len(EXPECTED_LOG_ABS) - 2).long()
    frac = position - index
    inside = torch.lerp(table[index], table[index + 1], frac)
    small = -0.5 * torch.exp(log_alpha)
    large = 0.5 * log_alpha - _KL_CONSTANT
    return torch.where(
        log_alpha < LOG_ALPHA_MIN, small, torch.where(log_alpha > LOG_ALPHA_MAX, large, inside)
    )


@register_kl(VariationalDropout, LogUniform)
def _dropout_log_uniform(q: VariationalDropout, p: LogUniform, stddev: Tensor | None) -> Tensor:
    if not getattr(q, "has_noise", True):  # un-noised biases of dropout A
        return q.mu.new_zeros(())
    per_alpha = log_uniform_kl(q.clipped_log_alpha, q.kl_approximation)
    # One α may be shared by many weights; each weight contributes its own KL term.
    return per_alpha.expand_as(q.mu).sum()


def kl_per_weight(
    q: VariationalDistribution,
    p: Prior,
    num_samples: int = 64,
    generator: torch.Generator | None = None,
) -> Tensor:
    """KL(qᵢ‖p) for each weight i, shaped like the weight (nats; no gradient).

    Closed form for a Gaussian q under a Gaussian or Laplace prior and for a delta q
    (−log p(μ)); otherwise the Monte Carlo mean of log q(w) − log p(w) over ``num_samples``
    draws. Used to count the bits of the weights that survive pruning.
    """
    _checks.at_least("num_samples", num_samples, 1)
    with torch.no_grad():
        if isinstance(q, Delta):
            return -p.log_prob(q.mu)
        if isinstance(q, _Gaussian) and not q.noise_on_inputs:
            sigma = q.stddev
            if isinstance(p, Gaussian):
                ratio = (sigma / p.std) ** 2
                mean_term = ((q.mu - p.mean) / p.std) ** 2
                return 0.5 * (ratio + mean_term - 1.0 - torch.log(ratio))
            if isinstance(p, Laplace):
                expected_abs = expected_abs_deviation(q.mu, sigma, p.loc)
                return (
                    expected_abs / p.scale
                    + torch.log(2.0 * p.scale)
                    - torch.log(sigma)
                    - _HALF_LOG_2PI_E
                )
        w = q.rsample((num_samples,), generator)
        return (q.log_prob(w) - p.log_prob(w)).mean(0)
