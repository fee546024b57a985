import math

import pytest
import torch
import torch.nn.functional as F

from torchbayes.priors import ScaleMixture
from torchbayes.variational import Delta, DiagonalGaussian, FixedGaussian, VariationalDropout


def test_diagonal_gaussian_sigma_is_softplus_rho():
    q = DiagonalGaussian(torch.zeros(5), rho_init=-3.0)
    torch.testing.assert_close(q.stddev, torch.full((5,), math.log1p(math.exp(-3.0))))


def test_rsample_moments():
    q = DiagonalGaussian(torch.tensor([1.0, -2.0]), rho_init=0.0)
    s = q.rsample((200_000,), torch.Generator().manual_seed(0))
    torch.testing.assert_close(s.mean(0), q.mean.detach(), atol=0.01, rtol=0)
    torch.testing.assert_close(s.std(0), q.stddev.detach(), atol=0.01, rtol=0)


def test_log_prob_and_entropy_match_torch_normal():
    q = DiagonalGaussian(torch.randn(7), rho_init=-1.0)
    normal = torch.distributions.Normal(q.mu.detach(), q.stddev.detach())
    w = torch.randn(7)
    torch.testing.assert_close(q.log_prob(w).detach(), normal.log_prob(w))
    torch.testing.assert_close(q.entropy().detach(), normal.entropy().sum())


def test_softplus_gradients_match_blundell_eqs_3_and_4():
    """Autograd through w = μ + log(1+e^ρ)∘ε equals the paper's manual gradient:
    Δμ = ∂f/∂w + ∂f/∂μ,  Δρ = ∂f/∂w · ε/(1+exp(−ρ)) + ∂f/∂ρ,
    for f(w, θ) = log q(w|θ) − log P(w) − log P(D|w) on a small linear regression.
    """
    torch.manual_seed(0)
    x, y = torch.randn(20, 3), torch.randn(20)
    prior = ScaleMixture(0.5, 1.0, 0.2)
    q = DiagonalGaussian(torch.randn(3), rho_init=-1.0, rho_init_std=0.3)

    def f(w, mu, rho):
        sigma = F.softplus(rho)
        log_q = (-0.5 * ((w - mu) / sigma) ** 2 - torch.log(sigma)).sum()
        log_lik = -0.5 * ((x @ w - y) ** 2).sum()
        return log_q - prior.log_prob(w).sum() - log_lik

    eps = torch.randn(3, generator=torch.Generator().manual_seed(5))
    w = q.rsample(generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(w, q.mu + F.softplus(q.rho) * eps)
    grad_mu, grad_rho = torch.autograd.grad(f(w, q.mu, q.rho), [q.mu, q.rho])

    w_leaf = w.detach().requires_grad_()
    mu_leaf, rho_leaf = q.mu.detach().requires_grad_(), q.rho.detach().requires_grad_()
    df_dw, df_dmu, df_drho = torch.autograd.grad(
        f(w_leaf, mu_leaf, rho_leaf), [w_leaf, mu_leaf, rho_leaf]
    )
    torch.testing.assert_close(grad_mu, df_dw + df_dmu)
    torch.testing.assert_close(grad_rho, df_dw * eps / (1 + torch.exp(-q.rho.detach())) + df_drho)


def test_fixed_gaussian_has_no_learnable_scale():
    q = FixedGaussian(torch.zeros(4), std=0.1)
    assert [n for n, _ in q.named_parameters()] == ["mu"]
    torch.testing.assert_close(q.stddev, torch.full((4,), 0.1))


def test_delta_samples_are_the_mean():
    q = Delta(torch.arange(3.0))
    torch.testing.assert_close(q.rsample((4,)), torch.arange(3.0).expand(4, 3))
    assert float(q.entropy()) == 0.0


def test_same_generator_seed_same_sample():
    q = DiagonalGaussian(torch.zeros(10), rho_init=0.0)
    a = q.rsample(generator=torch.Generator().manual_seed(3))
    b = q.rsample(generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)


def test_bad_arguments():
    with pytest.raises(ValueError, match="std="):
        FixedGaussian(torch.zeros(2), std=0.0)
    with pytest.raises(ValueError, match="rho_init_std="):
        DiagonalGaussian(torch.zeros(2), rho_init_std=-1.0)


def test_log_prob_of_draw_equals_log_prob_in_value_and_gradient():
    q = DiagonalGaussian(torch.randn(6, dtype=torch.float64), rho_init=-1.0, rho_init_std=0.5)
    draw = q.draw(torch.Generator().manual_seed(4))
    fast = q.log_prob_of_draw(draw)
    slow = q.log_prob(draw.sample).sum()
    torch.testing.assert_close(fast, slow)
    (g_fast_rho,) = torch.autograd.grad(fast, [q.rho], retain_graph=True)
    g_slow_mu, g_slow_rho = torch.autograd.grad(slow, [q.mu, q.rho])
    torch.testing.assert_close(g_fast_rho, g_slow_rho)
    # with ε fixed, log q(μ + σε | μ, σ) does not depend on μ: the path and score terms cancel
    torch.testing.assert_close(g_slow_mu, torch.zeros_like(q.mu), atol=1e-12, rtol=0)


def test_variational_dropout_has_std_sqrt_alpha_times_mean():
    theta = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    q = VariationalDropout(theta, alpha_init=0.25)
    torch.testing.assert_close(q.stddev, 0.5 * theta.abs())
    samples = q.rsample((20000,), torch.Generator().manual_seed(0))
    torch.testing.assert_close(samples.std(0), 0.5 * theta.abs(), atol=0.02, rtol=0.02)


@pytest.mark.parametrize(
    "granularity,batch_dims,shape",
    [("weight", 0, (4, 3)), ("neuron", 0, (4, 1)), ("layer", 0, (1, 1)), ("neuron", 1, (2, 4, 1))],
)
def test_variational_dropout_alpha_granularity(granularity, batch_dims, shape):
    mean = torch.randn(2, 4, 3) if batch_dims else torch.randn(4, 3)
    q = VariationalDropout(mean, granularity=granularity, batch_dims=batch_dims)
    assert q.log_alpha.shape == shape
    assert q.stddev.shape == mean.shape


def test_variational_dropout_alpha_is_clipped_at_max_alpha():
    q = VariationalDropout(torch.ones(3), alpha_init=4.0, max_alpha=1.0)
    torch.testing.assert_close(q.alpha, torch.ones(3))
    unbounded = VariationalDropout(torch.ones(3), alpha_init=4.0, max_alpha=None)
    torch.testing.assert_close(unbounded.alpha, torch.full((3,), 4.0))
    with pytest.raises(ValueError, match="granularity='row'"):
        VariationalDropout(torch.ones(3), granularity="row")


def test_alpha_above_its_bound_can_still_come_back_down():
    """Past the bound, gradients that lower α flow and those that raise it do not, so a
    step over the bound cannot freeze α there (a plain clamp would give zero gradient)."""
    q = VariationalDropout(torch.ones(3), alpha_init=2.0, max_alpha=1.0)
    q.alpha.sum().backward()  # descent lowers α: gradient flows
    assert bool((q.log_alpha.grad > 0).all())
    q.log_alpha.grad = None
    (-q.alpha.sum()).backward()  # descent would raise α further: blocked
    assert bool((q.log_alpha.grad == 0).all())
    below = VariationalDropout(torch.ones(3), alpha_init=0.5, max_alpha=1.0)
    (-below.alpha.sum()).backward()
    assert bool((below.log_alpha.grad < 0).all())
