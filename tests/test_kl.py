import itertools
import math

import pytest
import torch

from torchbayes.kl import (
    gaussian_kl,
    has_closed_form,
    kl_divergence,
    log_uniform_kl,
    monte_carlo_kl,
)
from torchbayes.priors import Gaussian, Laplace, LogUniform, ScaleMixture, Uniform
from torchbayes.variational import Delta, DiagonalGaussian, FixedGaussian, VariationalDropout


def _q(n=50, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    q = DiagonalGaussian(torch.randn(n, generator=g, dtype=dtype), rho_init=-0.5)
    with torch.no_grad():
        q.rho.add_(0.3 * torch.randn(n, generator=g, dtype=dtype))
    return q


def test_closed_form_matches_torch_distributions():
    q, p = _q(), Gaussian(0.3, 1.7)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Normal(q.mu, q.stddev), torch.distributions.Normal(0.3, 1.7)
    ).sum()
    torch.testing.assert_close(kl_divergence(q, p), expected)


@pytest.mark.parametrize(
    "prior", [Gaussian(0.0, 1.0), Gaussian(0.5, 0.3), Laplace(0.0, 1.0), Laplace(0.2, 0.1)]
)
def test_closed_form_and_monte_carlo_agree_within_three_standard_errors(prior):
    q = _q()
    assert has_closed_form(q, prior)
    exact = float(kl_divergence(q, prior).detach())
    draws = torch.stack(
        [
            monte_carlo_kl(q, prior, q.rsample(generator=torch.Generator().manual_seed(s)))
            for s in range(4000)
        ]
    ).detach()
    se = float(draws.std() / math.sqrt(len(draws)))
    assert abs(float(draws.mean()) - exact) < 3 * se


def test_fused_kl_gradient_matches_autograd_of_the_formula():
    q, p = _q(), Gaussian(0.2, 0.7)
    sigma = q.stddev
    fused = gaussian_kl(q.mu, sigma, p.mean, p.std)
    g_fused = torch.autograd.grad(fused, [q.mu, q.rho])
    sigma = q.stddev
    plain = (
        torch.log(p.std / sigma) + (sigma**2 + (q.mu - p.mean) ** 2) / (2 * p.std**2) - 0.5
    ).sum()
    g_plain = torch.autograd.grad(plain, [q.mu, q.rho])
    torch.testing.assert_close(fused, plain)
    for a, b in zip(g_fused, g_plain, strict=True):
        torch.testing.assert_close(a, b)


def test_elementwise_prior_falls_back_to_broadcasting():
    q = _q(4)
    kl = gaussian_kl(
        q.mu,
        q.stddev,
        torch.zeros(4, dtype=torch.float64),
        torch.full((4,), 2.0, dtype=torch.float64),
    )
    torch.testing.assert_close(kl, kl_divergence(q, Gaussian(0.0, 2.0)))


def test_scale_mixture_has_no_closed_form_and_mc_is_unbiased_against_quadrature():
    q, p = _q(3), ScaleMixture(0.5, 1.0, 0.1)
    assert not has_closed_form(q, p)
    w = torch.linspace(-12, 12, 200_001, dtype=torch.float64).unsqueeze(-1)
    dens = torch.exp(q.log_prob(w)).detach()
    integrand = dens * (q.log_prob(w).detach() - p.log_prob(w))
    exact = float(torch.trapezoid(integrand, w.squeeze(-1), dim=0).sum())
    draws = torch.stack([kl_divergence(q, p).detach() for _ in range(4000)])
    se = float(draws.std() / math.sqrt(len(draws)))
    assert abs(float(draws.mean()) - exact) < 3 * se


def test_fixed_gaussian_uses_the_gaussian_closed_form():
    q = FixedGaussian(torch.zeros(3), std=0.5)
    expected = 3 * (math.log(2.0) + 0.25 / 2 - 0.5)
    assert math.isclose(float(kl_divergence(q, Gaussian(0.0, 1.0))), expected, rel_tol=1e-5)


def test_delta_kl_is_negative_log_prior():
    q, p = Delta(torch.tensor([0.5, -1.0])), Laplace(0.0, 2.0)
    torch.testing.assert_close(kl_divergence(q, p), -p.log_prob(q.mu).sum())


def test_uniform_prior_kl_is_negative_entropy():
    q = _q(5)
    torch.testing.assert_close(kl_divergence(q, Uniform()), -q.entropy())


def _exact_log_uniform_kl(log_alpha: float) -> float:
    """E log|1 + √α ε| − ½ log α + (γ + log 2)/2 by adaptive quadrature (scipy), split at the
    log singularity ε = −1/√α — independent of the library's table."""
    from scipy import integrate, stats

    s = math.exp(0.5 * log_alpha)
    c = -1.0 / s

    def f(e):
        return math.log(abs(1 + s * e)) * stats.norm.pdf(e) if e != c else 0.0

    cuts = sorted({c - 10, c, c + 10, -10.0, 0.0, 10.0})
    edges = [-math.inf, *cuts, math.inf]
    total = sum(integrate.quad(f, a, b, limit=200)[0] for a, b in itertools.pairwise(edges))
    return total - 0.5 * log_alpha + 0.5 * (0.5772156649015329 + math.log(2.0))


_GRID = [-12.0, -9.0, -6.0, -4.0, -2.3, -1.5, -1.0, -0.5, -0.2, 0.0, 0.7, 2.0, 5.0, 11.0]


def test_quadrature_log_uniform_kl_is_within_1e3_of_numerical_integration():
    exact = torch.tensor([_exact_log_uniform_kl(la) for la in _GRID], dtype=torch.float64)
    table = log_uniform_kl(torch.tensor(_GRID, dtype=torch.float64), "quadrature")
    torch.testing.assert_close(table, exact, atol=1e-3, rtol=0)
    assert float((table - exact).abs().max()) < 1e-4


def test_quadrature_kl_gradient_matches_finite_differences_of_the_exact_kl():
    log_alpha = torch.tensor([-3.03, -0.51, 0.0], dtype=torch.float64, requires_grad=True)
    log_uniform_kl(log_alpha, "quadrature").sum().backward()
    h = 0.05
    slopes = [
        (_exact_log_uniform_kl(la + h) - _exact_log_uniform_kl(la - h)) / (2 * h)
        for la in log_alpha.tolist()
    ]
    torch.testing.assert_close(
        log_alpha.grad, torch.tensor(slopes, dtype=torch.float64), atol=0.01, rtol=0
    )


def test_kingma_and_molchanov_fits_within_their_stated_accuracy():
    """Kingma's cubic: 0.01 on α ∈ [0.1, 1] (it was fitted for α ≤ 1 and drifts by 0.04 as
    α → 0); Molchanov's sigmoid: 0.015 over the whole range, tending to 0 for large α."""
    exact = {la: _exact_log_uniform_kl(la) for la in _GRID}
    for la, value in exact.items():
        molchanov = float(log_uniform_kl(torch.tensor(la, dtype=torch.float64), "molchanov"))
        assert abs(molchanov - value) < 0.015, la
        if math.log(0.1) <= la <= 0.0:
            kingma = float(log_uniform_kl(torch.tensor(la, dtype=torch.float64), "kingma"))
            assert abs(kingma - value) < 0.01, la
    assert float(log_uniform_kl(torch.tensor(12.0), "molchanov")) < 1e-3


def test_unknown_kl_approximation_is_named():
    with pytest.raises(ValueError, match="approximation='exact'"):
        log_uniform_kl(torch.zeros(1), "exact")


def test_variational_dropout_kl_dispatches_and_counts_every_weight():
    q = VariationalDropout(torch.randn(5, 4), alpha_init=0.3, granularity="neuron")
    kl = kl_divergence(q, LogUniform())
    per_weight = log_uniform_kl(torch.tensor(math.log(0.3)))
    torch.testing.assert_close(kl, 20 * per_weight)
    assert has_closed_form(q, LogUniform())


def test_gaussian_laplace_kl_gradient_is_the_formulas():
    """∂/∂μ Σ E|w−m|/b = erf(d/σ√2)/b and ∂/∂σ = √(2/π)e^{−d²/2σ²}/b − 1/σ (plus log 2b terms)."""
    q = _q()
    prior = Laplace(0.1, 0.4)
    kl_divergence(q, prior).backward()
    mu, sigma = q.mu.detach(), q.stddev.detach()
    d = mu - 0.1
    grad_mu = torch.erf(d / (sigma * math.sqrt(2))) / 0.4
    grad_sigma = math.sqrt(2 / math.pi) * torch.exp(-(d**2) / (2 * sigma**2)) / 0.4 - 1 / sigma
    torch.testing.assert_close(q.mu.grad, grad_mu)
    torch.testing.assert_close(q.rho.grad, grad_sigma * torch.sigmoid(q.rho.detach()))
