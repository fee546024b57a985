import pytest
import torch
from torch import nn

from torchbayes.models import mlp
from torchbayes.nn import (
    BayesConv2d,
    BayesianLayer,
    BayesLinear,
    model_kl,
    posterior_mean,
    to_bayesian,
    to_deterministic,
)
from torchbayes.priors import Gaussian, ScaleMixture
from torchbayes.variational import Delta


def test_linear_shapes_and_sampling_differs_each_forward():
    layer = BayesLinear(
        4,
        3,
        posterior=lambda m: __import__("torchbayes").variational.DiagonalGaussian(m, rho_init=0.0),
    )
    x = torch.randn(5, 4)
    a, b = layer(x), layer(x)
    assert a.shape == (5, 3)
    assert not torch.allclose(a, b)


def test_posterior_mean_mode_is_deterministic_and_equals_plain_layer():
    plain = nn.Linear(4, 3)
    layer = BayesLinear(4, 3, init_from=plain)
    x = torch.randn(5, 4)
    with posterior_mean(layer):
        torch.testing.assert_close(layer(x), plain(x))
        torch.testing.assert_close(layer(x), layer(x))
    assert layer.sampling


def test_conv2d_mean_matches_plain_conv():
    plain = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    layer = BayesConv2d(3, 4, 3, stride=2, padding=1, init_from=plain)
    x = torch.randn(2, 3, 9, 9)
    with posterior_mean(layer):
        torch.testing.assert_close(layer(x), plain(x))
    assert layer(x).shape == plain(x).shape


def test_to_bayesian_keeps_weights_as_means_and_shares_one_prior():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    prior = ScaleMixture()
    bnet = to_bayesian(net, prior=prior)
    assert isinstance(bnet[0], BayesConv2d) and isinstance(bnet[2], BayesLinear)
    assert bnet[0].prior is prior and bnet[2].prior is prior
    assert isinstance(net[0], nn.Conv2d), "the original model is left alone"
    x = torch.randn(2, 1, 6, 6)
    with posterior_mean(bnet):
        torch.testing.assert_close(bnet(x), net(x))


def test_to_deterministic_round_trip_names_and_values():
    bnet = to_bayesian(mlp(3, [5], 2))
    bnet(torch.randn(1, 3))  # leaves a cached sample that must not break the copy
    twin = to_deterministic(bnet)
    assert [n for n, _ in twin.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    torch.testing.assert_close(twin[0].weight, bnet[0].weight_posterior.mu)


def test_model_kl_sums_layers_and_gradients_flow():
    bnet = to_bayesian(mlp(3, [5], 2), prior=Gaussian(0.0, 1.0))
    kl = model_kl(bnet)
    torch.testing.assert_close(kl, bnet[0].kl() + bnet[2].kl())
    kl.backward()
    assert bnet[0].weight_posterior.rho.grad is not None


def test_monte_carlo_kl_reuses_the_forward_sample():
    layer = BayesLinear(3, 2, prior=ScaleMixture())
    layer(torch.randn(1, 3))
    assert layer.kl().item() == pytest.approx(layer.kl().item())


def test_model_without_bayesian_layers_is_an_error():
    with pytest.raises(ValueError, match="to_bayesian"):
        model_kl(mlp(2, [3], 1))


def test_state_dict_round_trip():
    a = to_bayesian(mlp(3, [4], 2), prior=Gaussian(0.1, 0.3))
    b = to_bayesian(mlp(3, [4], 2), prior=Gaussian(0.0, 1.0))
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3)
    with posterior_mean(a), posterior_mean(b):
        torch.testing.assert_close(a(x), b(x))
    torch.testing.assert_close(model_kl(a), model_kl(b))


def test_same_seed_same_training_run():
    def train(seed):
        torch.manual_seed(seed)
        net = to_bayesian(mlp(3, [8], 1))
        opt = torch.optim.Adam(net.parameters(), 1e-2)
        x, y = torch.randn(16, 3), torch.randn(16, 1)
        for _ in range(5):
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean() + model_kl(net) / 16
            loss.backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in net.parameters()])

    torch.testing.assert_close(train(7), train(7), rtol=0, atol=0)
    assert not torch.equal(train(7), train(8))


def test_delta_posterior_layer_is_a_plain_layer():
    layer = BayesLinear(3, 2, posterior=Delta)
    x = torch.randn(4, 3)
    torch.testing.assert_close(layer(x), layer(x))
    assert isinstance(layer, BayesianLayer)


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="estimator="):
        BayesLinear(3, 2, estimator="magic")
    with pytest.raises(ValueError, match="in_features="):
        BayesLinear(0, 2)
    with pytest.raises(ValueError, match="out_channels="):
        BayesConv2d(1, 0, 3)


def test_wrong_input_shapes_raise_value_errors_naming_x():
    with pytest.raises(ValueError, match=r"x has shape \(4, 3\); BayesLinear\(in_features=5\)"):
        BayesLinear(5, 2)(torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"BayesConv2d\(in_channels=3\)"):
        BayesConv2d(3, 4, 3)(torch.randn(2, 1, 8, 8))
    assert BayesConv2d(3, 4, 3)(torch.randn(3, 8, 8)).shape == (4, 6, 6)  # unbatched is fine
