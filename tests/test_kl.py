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


@pytest.mark.parametrize("prior", [Gaussian(0.0, 1.0), Gaussian(0.5, 0.3)])
def test_closed_form_and_monte_carlo_agree_within_three_standard_errors(prior):
    q = _q()
    assert has_closed_form(q, prior)
    exact = float(kl_divergence(q, prior))
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


def _neg_kl_up_to_constant(log_alpha: float, n: int = 400_000) -> float:
    """−KL(N(θ, αθ²)‖log-uniform) + C = ½ log α − E log|1 + √α ε| (Kingma et al. 2015 §3.3)."""
    g = torch.Generator().manual_seed(0)
    eps = torch.randn(n, generator=g, dtype=torch.float64)
    return 0.5 * log_alpha - float(torch.log((1 + math.exp(0.5 * log_alpha) * eps).abs()).mean())


def test_log_uniform_kl_approximations_track_a_monte_carlo_estimate():
    """Both fits, minus the Monte Carlo value, are one constant over α ∈ [e^-6, 1] (to 0.05 for
    Kingma's cubic, 0.03 for Molchanov's sigmoid)."""
    grid = [-6.0, -4.0, -2.0, -1.0, 0.0]
    mc = torch.tensor([-_neg_kl_up_to_constant(la) for la in grid], dtype=torch.float64)
    for bounded, tolerance in ((True, 0.05), (False, 0.03)):
        fit = log_uniform_kl(torch.tensor(grid, dtype=torch.float64), bounded=bounded)
        offset = fit - mc
        assert float(offset.max() - offset.min()) < tolerance, (bounded, offset)


def test_log_uniform_kl_fits_agree_and_sparse_fit_vanishes_for_large_alpha():
    log_alpha = torch.linspace(-8, 0, 17, dtype=torch.float64)
    cubic, sigmoid = log_uniform_kl(log_alpha, True), log_uniform_kl(log_alpha, False)
    torch.testing.assert_close(cubic, sigmoid, atol=0.05, rtol=0)
    assert float(log_uniform_kl(torch.tensor(12.0), bounded=False)) < 1e-3


def test_variational_dropout_kl_dispatches_and_counts_every_weight():
    q = VariationalDropout(torch.randn(5, 4), alpha_init=0.3, granularity="neuron")
    kl = kl_divergence(q, LogUniform())
    per_weight = log_uniform_kl(torch.tensor(math.log(0.3)))
    torch.testing.assert_close(kl, 20 * per_weight)
    assert has_closed_form(q, LogUniform())
