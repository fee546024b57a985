import math

import pytest
import torch
from torch.distributions import Laplace as TorchLaplace
from torch.distributions import Normal

from torchbayes.priors import Gaussian, Laplace, LogUniform, ScaleMixture, Uniform

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
