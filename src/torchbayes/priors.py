"""Priors p(w) over network weights, as elementwise log densities.

Every prior is an ``nn.Module`` whose hyperparameters are buffers, so it moves with
``.to(device)`` and is saved in ``state_dict``. ``log_prob(w)`` is elementwise; sum it
yourself (or let :mod:`torchbayes.kl` do it).

* :class:`Gaussian`  — N(μ, s²), Graves (2011) §5, Blundell et al. (2015) §3.3.
* :class:`Laplace`   — Laplace(μ, b), Graves (2011) §5.1.
* :class:`ScaleMixture` — π N(0, σ₁²) + (1−π) N(0, σ₂²), Blundell et al. (2015) eq. 7.
* :class:`LogUniform` — p(log|w|) ∝ c, i.e. p(w) ∝ 1/|w|, Kingma et al. (2015) §3.3 (improper).
* :class:`Uniform`   — improper flat prior: the complexity cost is the negative entropy of q,
  and with a delta posterior training is maximum likelihood (Graves 2011, "uniform" rows).

:class:`AdaptiveGaussian` and :class:`AdaptiveLaplace` are Graves' (2011) adaptive priors:
their parameters are refitted in closed form to the posterior after every update
(empirical Bayes, eq. 15 and §5.1) by :func:`refit_priors`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Laplace as _Laplace
from torch.distributions import Normal

from . import _checks

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

__all__ = [
    "AdaptiveGaussian",
    "AdaptiveLaplace",
    "Gaussian",
    "Laplace",
    "LogUniform",
    "Prior",
    "ScaleMixture",
    "Uniform",
    "expected_abs_deviation",
    "refit_priors",
]


class Prior(nn.Module):
    """A prior over weights. Subclasses implement an elementwise ``log_prob``."""

    def log_prob(self, w: Tensor) -> Tensor:
        """Elementwise log p(w) (up to a constant for improper priors)."""
        raise NotImplementedError

    def forward(self, w: Tensor) -> Tensor:
        return self.log_prob(w)


class Gaussian(Prior):
    """N(mean, std²) on every weight: log p(w) = −(w−μ)²/(2s²) − log s − ½ log 2π."""

    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        _checks.positive("std", std)
        self.register_buffer("mean", torch.as_tensor(float(mean)))
        self.register_buffer("std", torch.as_tensor(float(std)))

    def log_prob(self, w: Tensor) -> Tensor:
        return Normal(self.mean, self.std, validate_args=False).log_prob(w)

    def extra_repr(self) -> str:
        return f"mean={float(self.mean):g}, std={float(self.std):g}"


class Laplace(Prior):
    """Laplace(loc, scale): log p(w) = −|w−μ|/b − log 2b."""

    def __init__(self, loc: float = 0.0, scale: float = 1.0) -> None:
        super().__init__()
        _checks.positive("scale", scale)
        self.register_buffer("loc", torch.as_tensor(float(loc)))
        self.register_buffer("scale", torch.as_tensor(float(scale)))

    def log_prob(self, w: Tensor) -> Tensor:
        return _Laplace(self.loc, self.scale, validate_args=False).log_prob(w)

    def extra_repr(self) -> str:
        return f"loc={float(self.loc):g}, scale={float(self.scale):g}"


class ScaleMixture(Prior):
    """Blundell et al. (2015) eq. 7: P(w) = π N(w|0, σ₁²) + (1−π) N(w|0, σ₂²).

    σ₁ > σ₂ gives a heavy tail plus a spike at zero; the paper's MNIST settings are
    π ∈ {¼, ½, ¾}, −log σ₁ ∈ {0, 1, 2}, −log σ₂ ∈ {6, 7, 8}.
    """

    def __init__(self, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = math.exp(-6)) -> None:
        super().__init__()
        _checks.probability("pi", pi)
        _checks.positive("sigma1", sigma1)
        _checks.positive("sigma2", sigma2)
        self.register_buffer("pi", torch.as_tensor(float(pi)))
        self.register_buffer("sigma1", torch.as_tensor(float(sigma1)))
        self.register_buffer("sigma2", torch.as_tensor(float(sigma2)))

    def log_prob(self, w: Tensor) -> Tensor:
        return _ScaleMixtureLogProb.apply(w, self.pi, self.sigma1, self.sigma2)

    def extra_repr(self) -> str:
        return (
            f"pi={float(self.pi):g}, sigma1={float(self.sigma1):g}, sigma2={float(self.sigma2):g}"
        )


# Below this, exp(d) < 2e-35 is negligible beside 1 — and exp of far lower values falls
# into denormals, which run ~10× slower on x86.
_MIN_LOG_RATIO = -80.0


class _ScaleMixtureLogProb(torch.autograd.Function):
    """log[π N(w|0, σ₁²) + (1−π) N(w|0, σ₂²)] with its analytic gradient.

    With a_k = log π_k − ½ log 2π − log σ_k − w²/2σ_k² and d = a₁ − a₂:
    log p = max(a₁, a₂) + softplus(−|d|), and ∂ log p/∂w = −w [r/σ₁² + (1 − r)/σ₂²] with
    r = sigmoid(d) the wide component's responsibility. d is clipped to ±80 (where
    softplus(−|d|) < 2e−35), which keeps exp out of the denormal range that the narrow
    component reaches for every weight, and π ∈ {0, 1} (d = ±∞) exact.
    """

    @staticmethod
    def forward(ctx, w: Tensor, pi: Tensor, sigma1: Tensor, sigma2: Tensor) -> Tensor:
        w2 = w * w
        c1 = torch.log(pi) - torch.log(sigma1) - _HALF_LOG_2PI
        c2 = torch.log1p(-pi) - torch.log(sigma2) - _HALF_LOG_2PI
        inv1, inv2 = 1.0 / (sigma1 * sigma1), 1.0 / (sigma2 * sigma2)
        wide = torch.addcmul(c1, w2, -0.5 * inv1)
        narrow = torch.addcmul(c2, w2, -0.5 * inv2)
        d = torch.sub(wide, narrow).clamp_(_MIN_LOG_RATIO, -_MIN_LOG_RATIO)
        ctx.save_for_backward(w, d, inv1, inv2)
        return torch.maximum(wide, narrow).add_(F.softplus(d.abs().neg_()))

    @staticmethod
    def backward(ctx, grad: Tensor):
        w, d, inv1, inv2 = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        precision = torch.sigmoid(d).mul_(inv1 - inv2).add_(inv2)
        return precision.mul_(w).mul_(grad).neg_(), None, None, None


class LogUniform(Prior):
    """Improper scale-invariant prior p(|w|) ∝ 1/|w| (Kingma et al. 2015 §3.3).

    ``log_prob`` returns −log|w| (the constant is dropped). Its KL against the multiplicative
    dropout posterior has no closed form; see the variational-dropout approximation.
    """

    def log_prob(self, w: Tensor) -> Tensor:
        return -torch.log(w.abs())


class Uniform(Prior):
    """Improper flat prior: log p(w) = 0 everywhere.

    KL(q‖Uniform) = −H(q) + const, so a delta posterior under this prior is plain maximum
    likelihood (Graves 2011, Table 1 rows with a uniform prior).
    """

    def log_prob(self, w: Tensor) -> Tensor:
        return torch.zeros_like(w)


_MIN_SCALE = 1e-8  # keeps a refitted prior proper when every weight sits at one value


def expected_abs_deviation(means: Tensor, stds: Tensor, centre: Tensor | float) -> Tensor:
    """E|w − c| for w ~ N(μ, σ²), elementwise: σ√(2/π)·exp(−d²/2σ²) + d·erf(d/(σ√2)), d = μ − c.

    At σ = 0 it is |μ − c| (a delta posterior).
    """
    d = means - centre
    safe = stds.clamp_min(1e-30)
    z = d / (safe * math.sqrt(2.0))
    smooth = safe * math.sqrt(2.0 / math.pi) * torch.exp(-z * z) + d * torch.erf(z)
    return torch.where(stds > 0, smooth, d.abs())


class AdaptiveGaussian(Gaussian):
    """Gaussian prior N(m, s²) refitted to the posterior (Graves 2011 eq. 15).

    For posteriors N(μᵢ, σᵢ²) over the W weights it covers (σᵢ = 0 for a delta posterior),
    Σᵢ KL(N(μᵢ, σᵢ²) ‖ N(m, s²)) is minimized by

        m = (1/W) Σᵢ μᵢ,      s² = (1/W) Σᵢ [σᵢ² + (μᵢ − m)²].

    At that optimum the complexity's gradient with respect to (m, s) is zero, so the
    posterior's gradients are those of a fixed prior (Graves eqs. 16–17).
    """

    @torch.no_grad()
    def refit(self, means: Tensor, stds: Tensor) -> None:
        """Set (m, s) to the optimum for these posterior means and standard deviations."""
        m = means.mean()
        var = (stds.square() + (means - m).square()).mean()
        self.mean.copy_(m)
        self.std.copy_(var.sqrt().clamp_min(_MIN_SCALE))


class AdaptiveLaplace(Laplace):
    """Laplace prior L(m, b) refitted to the posterior (Graves 2011 §5.1).

    Σᵢ E_q|wᵢ − m|/b + W log 2b is minimized over b by b = (1/W) Σᵢ E_q|wᵢ − m| (exactly, for
    any m) and over m by the median of the posterior mixture, taken as the median of the μᵢ
    as Graves does (exact for a delta posterior).
    """

    @torch.no_grad()
    def refit(self, means: Tensor, stds: Tensor) -> None:
        """Set (m, b) to the optimum for these posterior means and standard deviations."""
        m = means.median()
        self.loc.copy_(m)
        self.scale.copy_(expected_abs_deviation(means, stds, m).mean().clamp_min(_MIN_SCALE))


@torch.no_grad()
def refit_priors(model: nn.Module) -> int:
    """Refit every adaptive prior of ``model``'s Bayesian layers to the weights it covers.

    A prior module shared by several layers (as :func:`~torchbayes.nn.to_bayesian` makes it)
    is fitted to all of their weights and biases together. Call after each optimizer step.
    Returns the number of priors refitted.
    """
    from .nn.convert import bayesian_layers

    covered: dict[int, tuple[Prior, list[Tensor], list[Tensor]]] = {}
    for _, layer in bayesian_layers(model):
        prior = layer.prior
        if not hasattr(prior, "refit"):
            continue
        _, means, stds = covered.setdefault(id(prior), (prior, [], []))
        for _, q in layer.posteriors():
            means.append(q.mean.detach().reshape(-1))
            stds.append(q.stddev.detach().reshape(-1))
    for prior, means, stds in covered.values():
        prior.refit(torch.cat(means), torch.cat(stds))
    return len(covered)
