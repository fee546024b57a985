import math

import pytest
import torch
from torch import nn
from torch.distributions import Laplace as TorchLaplace
from torch.distributions import Normal

from torchbayes.nn import to_bayesian
from torchbayes.priors import (
    AdaptiveGaussian,
    AdaptiveLaplace,
    Gaussian,
    Laplace,
    LogUniform,
    ScaleMixture,
    Uniform,
    expected_abs_deviation,
    refit_priors,
)

W = torch.linspace(-3, 3, 41, dtype=torch.float64)


def test_gaussian_matches_closed_form():
    p = Gaussian(0.5, 2.0)
    expected = -((W - 0.5) ** 2) / 8 - math.log(2.0) - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(
        p.log_prob(W), expected.to(p.log_prob(W).dtype), rtol=1e-6, atol=1e-6
    )


def test_laplace_matches_torch():
    torch.testing.assert_close(Laplace(0.1, 0.7).log_prob(W), TorchLaplace(0.1, 0.7).log_prob(W))


def test_scale_mixture_is_the_mixture_density():
    p = ScaleMixture(0.25, 1.0, math.exp(-6))
    density = (
        0.25 * Normal(0, 1.0).log_prob(W).exp() + 0.75 * Normal(0, math.exp(-6)).log_prob(W).exp()
    )
    torch.testing.assert_close(p.log_prob(W), density.log())


@pytest.mark.parametrize("pi", [0.0, 1.0])
def test_scale_mixture_edge_weights_reduce_to_one_gaussian(pi):
    p = ScaleMixture(pi, 1.0, 0.1)
    only = Normal(0, 1.0 if pi == 1.0 else 0.1).log_prob(W)
    torch.testing.assert_close(p.log_prob(W), only)


def test_scale_mixture_stays_finite_far_in_the_tail():
    assert torch.isfinite(ScaleMixture(0.5, 1.0, math.exp(-8)).log_prob(torch.tensor([30.0]))).all()


def test_improper_priors():
    torch.testing.assert_close(Uniform().log_prob(W), torch.zeros_like(W))
    torch.testing.assert_close(
        LogUniform().log_prob(torch.tensor([0.5, -2.0])), -torch.tensor([0.5, 2.0]).log()
    )


def test_priors_move_with_state_dict():
    p = ScaleMixture(0.3, 2.0, 0.01)
    q = ScaleMixture()
    q.load_state_dict(p.state_dict())
    torch.testing.assert_close(q.log_prob(W), p.log_prob(W))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: Gaussian(0.0, 0.0), "std"),
        (lambda: Gaussian(0.0, -1.0), "std"),
        (lambda: Laplace(0.0, 0.0), "scale"),
        (lambda: ScaleMixture(1.5, 1.0, 0.1), "pi"),
        (lambda: ScaleMixture(-0.1, 1.0, 0.1), "pi"),
        (lambda: ScaleMixture(0.5, 0.0, 0.1), "sigma1"),
        (lambda: ScaleMixture(0.5, 1.0, -1.0), "sigma2"),
        (lambda: Gaussian(0.0, float("nan")), "std"),
    ],
)
def test_bad_hyperparameters_name_the_argument(make, name):
    with pytest.raises(ValueError, match=rf"\b{name}="):
        make()


@pytest.mark.parametrize(
    "pi,log_s1,log_s2", [(0.5, 0.0, -6.0), (0.25, -1.0, -7.0), (0.75, -2.0, -8.0)]
)
def test_fused_scale_mixture_matches_the_two_normal_mixture(pi, log_s1, log_s2):
    """Value and gradient of the fused density against torch.distributions + logaddexp."""
    p = ScaleMixture(pi, math.exp(log_s1), math.exp(log_s2)).double()
    w = (0.2 * torch.randn(500, dtype=torch.float64)).requires_grad_()
    reference = torch.logaddexp(
        math.log(pi) + Normal(0.0, math.exp(log_s1)).log_prob(w),
        math.log1p(-pi) + Normal(0.0, math.exp(log_s2)).log_prob(w),
    )
    fused = p.log_prob(w)
    torch.testing.assert_close(fused, reference, rtol=1e-6, atol=1e-6)
    (g_ref,) = torch.autograd.grad(reference.sum(), w)
    (g_fused,) = torch.autograd.grad(fused.sum(), w)
    torch.testing.assert_close(g_fused, g_ref, rtol=1e-6, atol=1e-6)


def _gaussian_objective(means, stds, m, s):
    """Σ KL(N(μ, σ²)‖N(m, s²)) up to terms without (m, s)."""
    return ((stds**2 + (means - m) ** 2) / (2 * s**2)).sum() + means.numel() * torch.log(s)


@pytest.mark.parametrize("delta", [False, True])
def test_adaptive_gaussian_refit_is_the_minimizer(delta):
    generator = torch.Generator().manual_seed(0)
    means = 0.3 + 0.7 * torch.randn(500, generator=generator, dtype=torch.float64)
    stds = (
        torch.zeros_like(means)
        if delta
        else 0.2 * torch.rand(500, generator=generator, dtype=torch.float64)
    )
    prior = AdaptiveGaussian(0.0, 1.0).double()
    prior.refit(means, stds)
    m = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    log_s = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [m, log_s], max_iter=200, tolerance_grad=1e-12, line_search_fn="strong_wolfe"
    )

    def closure():
        opt.zero_grad()
        loss = _gaussian_objective(means, stds, m, log_s.exp())
        loss.backward()
        return loss

    opt.step(closure)
    assert float(prior.mean) == pytest.approx(float(m), abs=1e-6)
    assert float(prior.std) == pytest.approx(float(log_s.exp()), rel=1e-6)


def test_adaptive_laplace_refit_is_the_minimizer_for_a_delta_posterior():
    means = torch.distributions.Laplace(0.2, 0.5).sample((501,))
    prior = AdaptiveLaplace()
    prior.refit(means, torch.zeros_like(means))
    assert float(prior.loc) == pytest.approx(float(means.median()))
    assert float(prior.scale) == pytest.approx(float((means - means.median()).abs().mean()))

    def objective(loc, scale):
        return float(-TorchLaplace(loc, scale).log_prob(means).sum())

    best = objective(prior.loc, prior.scale)
    for d_loc, d_scale in [(0.01, 0), (-0.01, 0), (0, 0.01), (0, -0.01)]:
        assert objective(prior.loc + d_loc, prior.scale + d_scale) > best


def test_adaptive_laplace_scale_is_exact_for_gaussian_posteriors():
    """Given the centre, b = mean E_q|w − m| zeroes ∂/∂b of Σ E_q|w−m|/b + W log 2b; E_q|w−m|
    is checked against Monte Carlo."""
    generator = torch.Generator().manual_seed(2)
    means = torch.randn(300, generator=generator, dtype=torch.float64)
    stds = 0.1 + 0.5 * torch.rand(300, generator=generator, dtype=torch.float64)
    draws = means + stds * torch.randn(200_000, 300, generator=generator, dtype=torch.float64)
    centre = means.median()
    mc = (draws - centre).abs().mean(0)
    torch.testing.assert_close(expected_abs_deviation(means, stds, centre), mc, rtol=0, atol=5e-3)
    prior = AdaptiveLaplace().double()
    prior.refit(means, stds)
    b = prior.scale.clone().requires_grad_()
    objective = expected_abs_deviation(means, stds, prior.loc).sum() / b + 300 * torch.log(2 * b)
    (grad,) = torch.autograd.grad(objective, b)
    assert abs(float(grad)) < 1e-9


def test_refit_priors_fits_a_shared_prior_to_every_layer():
    torch.manual_seed(0)
    prior = AdaptiveGaussian()
    model = to_bayesian(nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2)), prior=prior)
    assert refit_priors(model) == 1
    qs = [q for layer in (model[0], model[2]) for _, q in layer.posteriors()]
    means = torch.cat([q.mean.detach().reshape(-1) for q in qs])
    stds = torch.cat([q.stddev.detach().reshape(-1) for q in qs])
    assert float(prior.mean) == pytest.approx(float(means.mean()), abs=1e-7)
    expected = (stds**2 + (means - means.mean()) ** 2).mean().sqrt()
    assert float(prior.std) == pytest.approx(float(expected), rel=1e-6)
    assert refit_priors(to_bayesian(nn.Linear(3, 2), prior=Gaussian())) == 0
