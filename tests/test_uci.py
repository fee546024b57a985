"""The UCI experiment's batched MC-dropout grid against the library's dropout network."""

from functools import partial

import torch

from torchbayes.experiments.uci import Config, Standardized, _dropout_fits, _train, evaluate
from torchbayes.models import mlp
from torchbayes.nn import to_bayesian
from torchbayes.priors import Uniform
from torchbayes.variational import BernoulliDropout


def _data(n: int = 90) -> Standardized:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=generator)
    y = x[:, :1].sin() + 0.1 * torch.randn(n, 1, generator=generator)
    return Standardized.fit(x, y)


def _alone(data: Standardized, config: Config, epochs: int, seed: int, tau: float) -> list:
    """One noise-free member trained by itself with the library's layers and Adam's decay."""
    torch.manual_seed(seed)
    net = to_bayesian(
        mlp(3, [8], 1),
        prior=Uniform(),
        posterior=partial(BernoulliDropout, p=0.0),
        estimator="local",
    )
    reg = config.lengthscale**2 / (2 * len(data.x) * tau)
    params = list(net.parameters())
    optimizer = torch.optim.Adam(
        [{"params": [w for w in params if w.dim() > 1], "weight_decay": 2 * reg},
         {"params": [b for b in params if b.dim() == 1]}],
        lr=config.lr,
    )  # fmt: skip
    _train(optimizer, lambda x, y, _: (net(x) - y).square().mean(), data, epochs, config, seed)
    return [p.detach() for p in params]


def test_each_grid_member_trains_as_it_would_alone():
    data, seed, epochs = _data(), 3, 15
    config = Config(batch_size=32, lr=1e-2, lengthscale=1.0)  # a decay large enough to matter
    settings = [(0.0, 0.05), (0.5, 1.0), (0.5, 1.0), (0.0, 20.0)]
    fits = _dropout_fits(data, 8, config, epochs, seed, settings)
    trained = [[p.detach() for p in f.posterior.model.network.parameters()] for f in fits]
    for k, tau in ((0, 0.05), (3, 20.0)):  # no dropout: other members' masks must not matter
        for got, want in zip(trained[k], _alone(data, config, epochs, seed, tau), strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(trained[0][0], trained[3][0], atol=1e-3)  # τ sets the decay
    assert not torch.allclose(trained[1][0], trained[2][0], atol=1e-3)  # masks drawn apart
    for fit, (p, tau) in zip(fits, settings, strict=True):
        assert fit.chosen == {"p": p, "tau": tau}
        layer = fit.posterior.model.network[0]
        assert isinstance(layer.weight_posterior, BernoulliDropout)
        assert layer.weight_posterior.p == p
        scores = evaluate(fit.posterior, data, data.x[:10], data.y[:10], config, seed)
        expected = tau**-0.5  # the fixed noise, in target units
        assert abs(scores["noise_std"] - expected) < 1e-4 * expected


def test_dropout_rate_of_each_member_is_its_own():
    """Each fit predicts with its own rate: p = 0.5 spreads its predictions far wider."""
    data, seed = _data(), 0
    config = Config(batch_size=32, predict_samples=400)
    fits = _dropout_fits(data, 8, config, 10, seed, [(0.05, 1.0), (0.5, 1.0)])
    spread = [
        evaluate(f.posterior, data, data.x, data.y, config, seed)["epistemic_std"] for f in fits
    ]
    assert spread[1] > 2 * spread[0]
