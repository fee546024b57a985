"""Every estimator of a Bayesian layer samples the same pre-activation distribution."""

import pytest
import torch

from torchbayes.nn import BayesConv2d, BayesLinear
from torchbayes.nn.layers import ESTIMATORS
from torchbayes.priors import Gaussian, ScaleMixture

NOISY = ("reparameterize", "per_example", "local", "flipout")


def _linear(estimator: str, prior=None) -> BayesLinear:
    layer = BayesLinear(4, 3, estimator=estimator, prior=prior)
    with torch.no_grad():
        for q in (layer.weight_posterior, layer.bias_posterior):
            q.rho.uniform_(-2.0, -0.5)
    return layer


@pytest.mark.parametrize("estimator", NOISY)
def test_linear_estimators_match_the_moments_of_x_w(estimator):
    """E b = x μ + μ_b and Var b = x² σ² + σ_b² per example, whichever way b is sampled."""
    layer = _linear(estimator)
    x = torch.randn(2, 4)
    with torch.no_grad():
        outs = torch.stack([layer(x) for _ in range(4000)])
        mu_w, mu_b = layer.weight_posterior.mean, layer.bias_posterior.mean
        sd_w, sd_b = layer.weight_posterior.stddev, layer.bias_posterior.stddev
        mean = x @ mu_w.T + mu_b
        var = (x * x) @ (sd_w * sd_w).T + sd_b * sd_b
    torch.testing.assert_close(outs.mean(0), mean, atol=4 * float(var.max().sqrt()) / 63, rtol=0)
    torch.testing.assert_close(outs.var(0), var, rtol=0.1, atol=0)


@pytest.mark.parametrize("estimator", NOISY)
def test_conv_estimators_match_the_reparameterized_moments(estimator):
    torch.manual_seed(0)
    layer = BayesConv2d(2, 3, 3, padding=1, estimator=estimator)
    with torch.no_grad():
        layer.weight_posterior.rho.uniform_(-2.0, -0.5)
        x = torch.randn(2, 2, 4, 4)
        outs = torch.stack([layer(x) for _ in range(3000)])
        mu_w, sd_w = layer.weight_posterior.mean, layer.weight_posterior.stddev
        sd_b = layer.bias_posterior.stddev
        mean = torch.nn.functional.conv2d(x, mu_w, layer.bias_posterior.mean, padding=1)
        var = torch.nn.functional.conv2d(x * x, sd_w * sd_w, sd_b * sd_b, padding=1)
    assert float((outs.mean(0) - mean).abs().max()) < 5 * float(var.max().sqrt()) / 3000**0.5
    ratio = outs.var(0) / var
    assert 0.85 < float(ratio.mean()) < 1.15 and float(ratio.min()) > 0.7


def test_noise_is_shared_across_examples_only_for_the_minibatch_sample():
    """Two copies of one input: identical outputs under one weight sample per minibatch,
    uncorrelated under local reparameterization, per-example weights and Flipout."""
    x = torch.randn(1, 4).repeat(2, 1)
    for estimator, expected in (("reparameterize", 1.0), ("local", 0.0), ("per_example", 0.0)):
        layer = _linear(estimator)
        with torch.no_grad():
            outs = torch.stack([layer(x)[:, 0] for _ in range(3000)])
        corr = float(torch.corrcoef(outs.T)[0, 1])
        assert abs(corr - expected) < 0.06, (estimator, corr)
    layer = _linear("flipout")
    x = torch.randn(1, 4).repeat(64, 1)
    with torch.no_grad():
        outs = torch.stack([layer(x)[:, 0] for _ in range(2000)])
    off_diagonal = torch.corrcoef(outs.T)[~torch.eye(64, dtype=torch.bool)]
    assert abs(float(off_diagonal.mean())) < 0.05


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("prior", [Gaussian(0.0, 1.0), ScaleMixture()])
def test_every_estimator_trains_and_has_a_kl(estimator, prior):
    layer = _linear(estimator, prior)
    out = layer(torch.randn(5, 4))
    loss = out.square().mean() + layer.kl() / 100
    loss.backward()
    for q in (layer.weight_posterior, layer.bias_posterior):
        assert torch.isfinite(q.mu.grad).all() and q.mu.grad.abs().sum() > 0
        assert q.rho.grad.abs().sum() > 0


def test_closed_form_kl_is_the_same_for_every_estimator():
    values = []
    for estimator in ESTIMATORS:
        torch.manual_seed(3)
        layer = _linear(estimator, Gaussian(0.0, 1.0))
        layer(torch.randn(5, 4))
        values.append(layer.kl())
    for v in values[1:]:
        torch.testing.assert_close(v, values[0])


def test_mean_estimator_is_deterministic():
    layer = _linear("mean")
    x = torch.randn(3, 4)
    torch.testing.assert_close(layer(x), layer(x))


def test_variational_dropout_b_is_a_bayes_layer_with_local_reparameterization():
    """Kingma et al. §3.1: independent weight noise N(θ, αθ²) sampled as pre-activations
    N(xθ, α x²θ²), with the log-uniform KL — composed from existing parts."""
    from functools import partial

    from torchbayes.priors import LogUniform
    from torchbayes.variational import VariationalDropout

    factory = partial(VariationalDropout, alpha_init=0.5, granularity="neuron")
    layer = BayesLinear(4, 3, bias=False, prior=LogUniform(), posterior=factory, estimator="local")
    x = torch.randn(2, 4)
    with torch.no_grad():
        outs = torch.stack([layer(x) for _ in range(4000)])
        theta = layer.weight_posterior.mean
    torch.testing.assert_close(outs.var(0), 0.5 * (x * x) @ (theta * theta).T, rtol=0.1, atol=0)
    layer(x).sum().backward()
    kl = layer.kl()
    kl.backward()
    assert torch.isfinite(kl) and layer.weight_posterior.log_alpha.grad.shape == (3, 1)


def _dropout_layer(kind: str, estimator: str, conv: bool = False):
    from functools import partial

    from torchbayes.priors import LogUniform, Uniform
    from torchbayes.variational import BernoulliDropout, CorrelatedVariationalDropout

    if kind == "bernoulli":
        factory, prior = partial(BernoulliDropout, p=0.3), Uniform()
    else:
        factory = partial(CorrelatedVariationalDropout, alpha_init=0.5, granularity="neuron")
        prior = LogUniform()
    if conv:
        return BayesConv2d(2, 3, 3, padding=1, prior=prior, posterior=factory, estimator=estimator)
    return BayesLinear(4, 3, prior=prior, posterior=factory, estimator=estimator)


@pytest.mark.parametrize("kind", ["correlated", "bernoulli"])
@pytest.mark.parametrize("conv", [False, True])
def test_input_noise_matches_per_example_weight_samples_including_output_covariance(kind, conv):
    """Dropout A and binary dropout share noise along each input unit, so outputs of one
    example are correlated; the local estimator (noisy inputs) must reproduce the full
    per-example covariance of the weight-sampled layer, not only its variances."""
    torch.manual_seed(0)
    x = torch.randn(2, 2, 3, 3) if conv else torch.randn(2, 4)
    outs = {}
    for estimator in ("local", "per_example"):
        torch.manual_seed(1)
        layer = _dropout_layer(kind, estimator, conv)
        with torch.no_grad():
            outs[estimator] = torch.stack([layer(x).flatten(1) for _ in range(6000)])
    a, b = outs["local"], outs["per_example"]
    scale = float(b.std(0).max())
    torch.testing.assert_close(a.mean(0), b.mean(0), atol=0.1 * scale, rtol=0)
    for example in range(2):
        cov_a, cov_b = torch.cov(a[:, example].T), torch.cov(b[:, example].T)
        torch.testing.assert_close(cov_a, cov_b, atol=0.12 * scale**2, rtol=0)
    # The outputs of one example really are correlated (else this test proves nothing).
    assert float(torch.cov(b[:, 0].T).triu(1).abs().max()) > 0.1 * scale**2


def test_correlated_weight_samples_share_noise_per_input_unit():
    from torchbayes.variational import CorrelatedVariationalDropout

    theta = torch.randn(5, 4)
    q = CorrelatedVariationalDropout(theta, alpha_init=0.3, granularity="neuron")
    w = q.rsample((20000,))
    ratio = w / theta
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))  # same ξ down each column
    torch.testing.assert_close(w.var(0), 0.3 * theta**2, rtol=0.05, atol=0)
    bias = CorrelatedVariationalDropout(torch.randn(5))
    torch.testing.assert_close(bias.rsample((3,)), bias.mean.expand(3, 5))


def test_flipout_refuses_weight_noise_shared_across_inputs():
    with pytest.raises(ValueError, match="estimator='flipout'"):
        _dropout_layer("correlated", "flipout")


def test_gaussian_dropout_is_variational_dropout_with_alpha_frozen():
    from functools import partial

    from torchbayes.priors import LogUniform
    from torchbayes.variational import VariationalDropout

    factory = partial(VariationalDropout, alpha_init=1.0, learn_alpha=False)
    layer = BayesLinear(4, 3, prior=LogUniform(), posterior=factory, estimator="local")
    names = {name for name, _ in layer.named_parameters()}
    assert names == {"weight_posterior.mu", "bias_posterior.mu"}
    assert "weight_posterior.log_alpha" in layer.state_dict()
    layer(torch.randn(8, 4))
    kl = layer.kl()
    assert not kl.requires_grad  # a constant: Gaussian dropout has no complexity gradient


def test_gradient_variance_ordering_of_kingma_table_1():
    """At one set of VD-B parameters and common minibatches: no noise < local
    reparameterization < separate weight samples < one weight sample per minibatch."""
    from torchbayes.experiments import gradient_variance, mnist_vd

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 1, 8, 8, generator=g)
    y = (x.flatten(1)[:, :10].argmax(1) + 0).long()
    model = mnist_vd.dropout_mlp("vd-b", 32, mnist_vd.Config(), in_features=64)
    with torch.no_grad():  # α = 1 everywhere so the weight noise dominates
        for layer in model:
            if hasattr(layer, "weight_posterior"):
                layer.weight_posterior.log_alpha.zero_()
    batches = [torch.randperm(512, generator=g)[:64] for _ in range(60)]
    var = {
        e: gradient_variance.gradient_variance(model, e, (x, y), batches)["top"]
        for e in ("mean", "local", "per_example", "reparameterize")
    }
    assert var["mean"] < var["local"] < var["per_example"] < var["reparameterize"], var
    assert all(layer.estimator == "local" for layer in model if hasattr(layer, "estimator"))
