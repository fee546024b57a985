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
  dropout rate α per weight, per output neuron or per tensor (Kingma et al. 2015 §3): type B.
* :class:`CorrelatedVariationalDropout` — the same noise shared by each input unit's weights,
  i.e. noise on the layer's inputs: variational dropout A (Kingma §3.2).
* :class:`BernoulliDropout` — binary dropout of input units as a posterior (Gal 2016).

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
    "BernoulliDropout",
    "CorrelatedVariationalDropout",
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
    # True when the noise is shared by each input unit's weights, so a layer's local
    # estimator can apply it to the inputs (the posterior then defines ``input_noise``).
    noise_on_inputs: bool = False

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
        _checks.non_negative("rho_init_std", rho_init_std)
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


def _per_input_unit(shape: list[int], out_dim: int) -> list[int]:
    """The shape of noise shared by each input unit's weights: 1 along the output dim and
    the kernel dims of a weight ``shape`` (out, in, k…) whose out dim is ``out_dim``."""
    return [1 if d == out_dim or d > out_dim + 1 else n for d, n in enumerate(shape)]


class _UpperBound(torch.autograd.Function):
    """min(x, bound) whose gradient still flows where descent would move x back down.

    A plain clamp has zero gradient above the bound, so one optimizer step past it (the
    log-uniform KL always pushes α up) would freeze α there for good; here an entry above
    the bound keeps the gradients that lower it (grad > 0) and drops those that raise it.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, bound: float) -> Tensor:
        return x.clamp(max=bound)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.bound = inputs[1]

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x,) = ctx.saved_tensors
        return torch.where((x <= ctx.bound) | (grad > 0), grad, 0.0), None


class VariationalDropout(_Gaussian):
    """Variational dropout B: q(w) = N(θ, α θ²), independent per weight (Kingma et al. 2015
    §3.1, §3.3, eq. 9).

    Gaussian dropout with rate α (Srivastava et al. 2014: p = α / (1 + α) for binary
    dropout) read as a posterior over weights, with α learned. Paired with the log-uniform
    prior its KL does not depend on θ (:mod:`torchbayes.kl`). With ``learn_alpha=False`` it
    is plain Gaussian dropout B (noise on pre-activations under the local estimator), whose
    log-uniform KL is a constant.

    Args:
        mean: initial θ.
        alpha_init: initial dropout rate α (default 0.25, i.e. binary p = 0.2).
        granularity: one α per ``"weight"``, per output ``"neuron"`` (dim ``batch_dims``) or
            per ``"layer"`` (one per tensor).
        max_alpha: upper bound on α during training (Kingma §3.4 uses α ≤ 1), applied in
            the forward pass with a gradient that can bring α back below it; ``None`` leaves
            α unbounded (sparse variational dropout, Molchanov et al. 2017).
        batch_dims: leading dims of ``mean`` that index independent copies (e.g. members
            of a population) and so never share α.
        learn_alpha: False keeps α fixed at ``alpha_init`` (a buffer, not a parameter).
        kl_approximation: see :func:`torchbayes.kl.log_uniform_kl`; default Kingma's cubic
            when α is bounded, Molchanov's fit when it is not.
    """

    def __init__(
        self,
        mean: Tensor,
        alpha_init: float = 0.25,
        granularity: str = "weight",
        max_alpha: float | None = 1.0,
        batch_dims: int = 0,
        learn_alpha: bool = True,
        kl_approximation: str | None = None,
    ) -> None:
        super().__init__()
        _checks.positive("alpha_init", alpha_init)
        _checks.one_of("granularity", granularity, self._granularities())
        if max_alpha is not None:
            _checks.positive("max_alpha", max_alpha)
        _checks.at_least("batch_dims", batch_dims, 0)
        if kl_approximation is None:
            kl_approximation = "kingma" if max_alpha is not None else "molchanov"
        _checks.one_of("kl_approximation", kl_approximation, ("kingma", "molchanov", "quadrature"))
        self.mu = nn.Parameter(mean.detach().clone())
        self.granularity = granularity
        self.batch_dims = batch_dims
        self.kl_approximation = kl_approximation
        self.max_log_alpha = None if max_alpha is None else math.log(max_alpha)
        log_alpha = torch.full(self._alpha_shape(), math.log(alpha_init))
        if learn_alpha:
            self.log_alpha = nn.Parameter(log_alpha)
        else:
            self.register_buffer("log_alpha", log_alpha)

    @staticmethod
    def _granularities() -> tuple[str, ...]:
        return ALPHA_GRANULARITIES

    def _alpha_shape(self) -> list[int]:
        shape = list(self.mu.shape)
        b = self.batch_dims
        keep = {"weight": len(shape), "neuron": b + 1, "layer": b}[self.granularity]
        return [n if d < keep else 1 for d, n in enumerate(shape)]

    @property
    def alpha(self) -> Tensor:
        """α, clipped at ``max_alpha``."""
        return torch.exp(self.clipped_log_alpha)

    @property
    def clipped_log_alpha(self) -> Tensor:
        if self.max_log_alpha is None:
            return self.log_alpha
        return _UpperBound.apply(self.log_alpha, self.max_log_alpha)

    @property
    def stddev(self) -> Tensor:
        return torch.exp(0.5 * self.clipped_log_alpha) * self.mu.abs()


class CorrelatedVariationalDropout(VariationalDropout):
    """Variational dropout A: w_ij = θ_ij ξ_j with ξ_j ~ N(1, α_j) shared by every weight
    reading input unit j (Kingma et al. 2015 §3.2) — Gaussian noise on the layer's inputs.

    Each weight's marginal is N(θ, αθ²), as in type B, and the KL is the same per-weight
    log-uniform KL (the paper's approximation; the correlations are ignored). Under the
    ``"local"`` estimator a layer multiplies its input by per-example noise
    (:meth:`input_noise`), which is this posterior exactly — so there is no second matmul.
    α is per input ``"neuron"`` (dim ``batch_dims + 1``; for a conv, per input channel) or
    per ``"layer"``. Tensors without an input dim (biases) are not noised, as in the paper.
    ``learn_alpha=False`` gives Gaussian dropout A.
    """

    noise_on_inputs = True

    def __init__(
        self, mean: Tensor, alpha_init: float = 0.25, granularity: str = "neuron", **kwargs
    ):
        super().__init__(mean, alpha_init, granularity, **kwargs)

    @staticmethod
    def _granularities() -> tuple[str, ...]:
        return ("neuron", "layer")

    def _alpha_shape(self) -> list[int]:
        shape = list(self.mu.shape)
        b = self.batch_dims
        by_input = self.granularity == "neuron" and len(shape) > b + 1
        return [n if d < b or (by_input and d == b + 1) else 1 for d, n in enumerate(shape)]

    @property
    def has_noise(self) -> bool:
        return self.mu.dim() > self.batch_dims + 1

    @property
    def stddev(self) -> Tensor:
        if not self.has_noise:
            return torch.zeros_like(self.mu)
        return super().stddev

    def _noise(self, sample_shape, generator) -> Tensor:
        shape = list(sample_shape) + list(self.mu.shape)
        if not self.has_noise:
            return self.mu.new_zeros(shape)
        shape = _per_input_unit(shape, len(sample_shape) + self.batch_dims)
        return torch.randn(shape, generator=generator, device=self.mu.device, dtype=self.mu.dtype)

    def rsample(self, sample_shape=(), generator=None) -> Tensor:
        # θ (1 + √α ε), not θ + √α|θ| ε: with ε shared down a column the sign of θ matters.
        scale = torch.exp(0.5 * self.clipped_log_alpha) * self._noise(sample_shape, generator)
        return self.mu + self.mu * scale

    def draw(self, generator=None, sample_shape=()) -> Draw:
        return Draw(self.rsample(sample_shape, generator), self.stddev)

    def input_noise(self, x: Tensor) -> Tensor:
        """Multiplicative noise ξ ~ N(1, α) for a batch of inputs x (B, in) or (B, C, H, W),
        one per example and input unit (channel)."""
        shape = x.shape[:2] + (1,) * (x.dim() - 2)
        eps = torch.randn(shape, device=x.device, dtype=x.dtype)
        std = torch.exp(0.5 * self.clipped_log_alpha).reshape(1, -1, *([1] * (x.dim() - 2)))
        return torch.addcmul(torch.ones_like(eps), std, eps)

    def log_prob(self, w: Tensor) -> Tensor:
        raise NotImplementedError(
            "correlated weight noise has no per-weight density; use the LogUniform prior, "
            "whose KL is closed form"
        )


class BernoulliDropout(VariationalDistribution):
    """Binary dropout as a weight posterior (Gal & Ghahramani 2016): w_ij = θ_ij z_j / (1 − p)
    with z_j ~ Bernoulli(1 − p) per input unit (conv: per input channel).

    Scaled so E[w] = θ ("inverted dropout"); under the ``"local"`` estimator a layer drops
    its inputs per example, which is ordinary dropout. Biases are not dropped. The rate p is
    fixed. It has no density, so pair it with the :class:`~torchbayes.priors.Uniform` prior
    (maximum likelihood: KL = 0); weight decay, if wanted, goes in the optimizer. Monte Carlo
    prediction from its samples is MC dropout.
    """

    noise_on_inputs = True

    def __init__(self, mean: Tensor, p: float = 0.5, batch_dims: int = 0) -> None:
        super().__init__()
        _checks.probability("p", p)
        if p >= 1.0:
            raise ValueError(f"p must be < 1, got p={p!r}")
        _checks.at_least("batch_dims", batch_dims, 0)
        self.mu = nn.Parameter(mean.detach().clone())
        self.p, self.batch_dims = p, batch_dims

    @property
    def has_noise(self) -> bool:
        return self.mu.dim() > self.batch_dims + 1 and self.p > 0

    @property
    def stddev(self) -> Tensor:
        """The marginal scale √(p / (1 − p)) |θ|."""
        if not self.has_noise:
            return torch.zeros_like(self.mu)
        return math.sqrt(self.p / (1 - self.p)) * self.mu.abs()

    def _mask(self, shape: list[int], generator: torch.Generator | None) -> Tensor:
        keep = torch.full(shape, 1 - self.p, device=self.mu.device, dtype=self.mu.dtype)
        return torch.bernoulli(keep, generator=generator).div_(1 - self.p)

    def rsample(self, sample_shape=(), generator=None) -> Tensor:
        shape = list(sample_shape) + list(self.mu.shape)
        if not self.has_noise:
            return self.mu.expand(shape)
        shape = _per_input_unit(shape, len(sample_shape) + self.batch_dims)
        return self.mu * self._mask(shape, generator)

    def input_noise(self, x: Tensor) -> Tensor:
        """The dropout mask z / (1 − p) for a batch x, per example and input unit (channel)."""
        shape = list(x.shape[:2]) + [1] * (x.dim() - 2)
        keep = torch.full(shape, 1 - self.p, device=x.device, dtype=x.dtype)
        return torch.bernoulli(keep).div_(1 - self.p)

    def log_prob(self, w: Tensor) -> Tensor:
        raise NotImplementedError("binary dropout has no density; pair it with the Uniform prior")

    def entropy(self) -> Tensor:
        return self.mu.new_zeros(())
