"""The gradient-uncertainty sampler (Park et al. 2018): its statistic, its two regimes,
its adaptive threshold, its samples and its state."""

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchbayes.collect import Collector
from torchbayes.per_example import PerExampleGradNorms
from torchbayes.samplers import GradientUncertainty


def _regression(n=200, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 * torch.randn(
        n, generator=generator, dtype=torch.float64
    )
    return x, y


def _squared_error(out, y):
    return 0.5 * (out.squeeze(-1) - y).square()


def _model():
    torch.manual_seed(0)
    return nn.Linear(3, 1).double()


def _steps(sampler, norms, x, y, steps, batch=20, seed=0):
    generator = torch.Generator().manual_seed(seed)
    sampled = []
    for _ in range(steps):
        idx = torch.randperm(len(x), generator=generator)[:batch]
        sampler.zero_grad()
        _, sq = norms(x[idx], y[idx])
        sampler.step(sq_norms=sq)
        sampled.append(sampler.sampled)
    return sampled


def test_statistic_is_the_mean_pairwise_inner_product_of_example_gradients():
    x, y = _regression(8)
    model = _model()
    sampler = GradientUncertainty(
        model.parameters(), lr=0.0, num_data=8, noise_std=0.1, threshold=-1e9
    )
    _, sq = PerExampleGradNorms(model, _squared_error)(x, y)
    grads = []
    for i in range(8):
        loss = _squared_error(model(x[i : i + 1]), y[i : i + 1]).sum()
        grads.append(
            torch.cat([g.flatten() for g in torch.autograd.grad(loss, model.parameters())])
        )
    g = torch.stack(grads)
    gram = g @ g.T
    sampler.step(sq_norms=sq)
    assert sampler.statistic == pytest.approx(float((gram.sum() - gram.trace()) / 56), rel=1e-9)


def test_below_an_unreachable_threshold_it_is_sgd_step_for_step():
    x, y = _regression()
    model, twin = _model(), _model()
    sampler = GradientUncertainty(
        model.parameters(), lr=0.05, num_data=200, noise_std=1.0, threshold=-1e9, weight_decay=2.0
    )
    sgd = torch.optim.SGD(twin.parameters(), lr=0.05, weight_decay=2.0 / 200)
    norms = PerExampleGradNorms(model, _squared_error)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        idx = torch.randperm(200, generator=generator)[:20]
        sampler.zero_grad()
        sgd.zero_grad()
        sampler.step(sq_norms=norms(x[idx], y[idx])[1])
        _squared_error(twin(x[idx]), y[idx]).mean().backward()
        sgd.step()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    assert sampler.num_sampled == 0


def test_when_gradients_disagree_it_keeps_the_sample_then_adds_noise_of_std_sigma():
    layer = nn.Linear(100, 100, bias=False).double()
    before = layer.weight.detach().clone()
    collector = Collector(layer)
    sampler = GradientUncertainty(
        layer.parameters(),
        lr=0.0,
        num_data=10,
        noise_std=0.2,
        threshold=1e9,
        collector=collector,
        generator=torch.Generator().manual_seed(3),
    )
    x = torch.randn(4, 100, dtype=torch.float64)
    F.mse_loss(layer(x), torch.zeros(4, 100, dtype=torch.float64)).backward()
    sampler.step(sq_norms=torch.ones(4, dtype=torch.float64))
    assert sampler.sampled and len(collector) == 1
    torch.testing.assert_close(collector.samples()[0]["weight"], before)  # kept before the kick
    kick = layer.weight.detach() - before
    assert abs(float(kick.std()) - 0.2) < 0.01 and abs(float(kick.mean())) < 0.01


def test_the_adaptive_threshold_samples_about_a_quantile_of_the_steps():
    x, y = _regression()
    model = _model()
    sampler = GradientUncertainty(
        model.parameters(), lr=0.02, num_data=200, noise_std=1e-3, quantile=0.2, window=50
    )
    sampled = _steps(sampler, PerExampleGradNorms(model, _squared_error), x, y, 1500)
    assert not any(sampled[:50])  # no noise while the window fills
    assert 0.12 < sum(sampled[50:]) / len(sampled[50:]) < 0.28
    assert sampler.num_sampled == sum(sampled)


def test_the_chain_centres_on_the_posterior_mode():
    """The kicks are zero-mean, so the iterates average to the ridge solution (the mode of
    the Gaussian-prior posterior). Their spread is set by σ and lr, not the posterior: the
    sampler is Park et al.'s heuristic, not an exact MCMC method."""
    x, y = _regression()
    model = _model()
    precision = 5.0
    sampler = GradientUncertainty(
        model.parameters(),
        lr=0.05,
        num_data=200,
        noise_std=0.02,
        quantile=0.3,
        window=50,
        weight_decay=precision,
        generator=torch.Generator().manual_seed(1),
    )
    norms = PerExampleGradNorms(model, _squared_error)
    generator = torch.Generator().manual_seed(2)
    kept = []
    for t in range(4000):
        idx = torch.randperm(200, generator=generator)[:20]
        sampler.zero_grad()
        sampler.step(sq_norms=norms(x[idx], y[idx])[1])
        if t >= 500:
            kept.append(torch.cat([model.weight.detach().flatten(), model.bias.detach()]))
    design = torch.cat([x, torch.ones(200, 1, dtype=torch.float64)], 1)
    mode = torch.linalg.solve(
        design.T @ design + precision * torch.eye(4, dtype=torch.float64), design.T @ y
    )
    torch.testing.assert_close(torch.stack(kept).mean(0), mode, atol=0.02, rtol=0)


def test_state_dict_round_trip_resumes_the_same_chain():
    x, y = _regression()

    def fresh():
        model = _model()
        sampler = GradientUncertainty(
            model.parameters(),
            lr=0.02,
            num_data=200,
            noise_std=0.05,
            quantile=0.3,
            window=20,
            generator=torch.Generator().manual_seed(5),
        )
        return model, sampler, PerExampleGradNorms(model, _squared_error)

    model, sampler, norms = fresh()
    _steps(sampler, norms, x, y, 60, seed=1)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "sampler": sampler.state_dict()}, buffer)
    straight = _steps(sampler, norms, x, y, 40, seed=2)
    expected = model.weight.detach().clone()

    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)
    model2, sampler2, norms2 = fresh()
    model2.load_state_dict(saved["model"])
    sampler2.load_state_dict(saved["sampler"])
    resumed = _steps(sampler2, norms2, x, y, 40, seed=2)
    assert resumed == straight
    torch.testing.assert_close(model2.weight.detach(), expected, rtol=0, atol=0)
    assert sampler2.num_steps == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise_std": -1.0, "threshold": 0.0}, "noise_std"),
        ({"noise_std": 0.1}, "exactly one"),
        ({"noise_std": 0.1, "threshold": 0.0, "quantile": 0.5}, "exactly one"),
        ({"noise_std": 0.1, "quantile": 1.5}, "quantile"),
        ({"noise_std": 0.1, "quantile": 0.5, "window": 1}, "window"),
        ({"noise_std": 0.1, "threshold": 0.0, "lr": -1.0}, "lr"),
    ],
)
def test_bad_hyperparameters_name_the_argument(kwargs, message):
    kwargs = {"lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        GradientUncertainty(nn.Linear(2, 1).parameters(), num_data=10, **kwargs)


def test_step_without_norms_says_what_it_needs():
    model = nn.Linear(2, 1)
    sampler = GradientUncertainty(
        model.parameters(), lr=0.1, num_data=10, noise_std=0.1, threshold=0.0
    )
    model(torch.randn(3, 2)).sum().backward()
    with pytest.raises(ValueError, match="sq_norms"):
        sampler.step()


def test_a_closure_may_return_the_norms():
    x, y = _regression(10)
    model = _model()
    norms = PerExampleGradNorms(model, _squared_error)
    sampler = GradientUncertainty(
        model.parameters(), lr=0.1, num_data=10, noise_std=0.1, threshold=-1e9
    )

    def closure():
        sampler.zero_grad()
        return norms(x, y)

    loss = sampler.step(closure)
    assert loss.ndim == 0 and sampler.num_steps == 1


def test_window_quantile_matches_torch_quantile():
    from torchbayes.samplers.gradient_uncertainty import _quantile

    values = torch.randn(37, dtype=torch.float64)
    for q in (0.05, 0.1, 0.5, 0.93):
        assert _quantile(values.tolist(), q) == pytest.approx(float(torch.quantile(values, q)))


def test_a_general_prior_enters_the_step_as_its_log_density_gradient_over_n():
    from torchbayes.priors import Gaussian

    x, y = _regression()
    model = _model()
    sampler = GradientUncertainty(
        model.parameters(),
        lr=0.05,
        num_data=200,
        noise_std=0.0,
        threshold=-1e9,
        prior=Gaussian(0.5, 0.5),  # a non-zero mean keeps it on the autograd path
    )
    sampler.zero_grad()
    PerExampleGradNorms(model, _squared_error)(x[:20], y[:20])
    before = [p.detach().clone() for p in model.parameters()]
    grads = [p.grad.clone() for p in model.parameters()]
    sampler.step(sq_norms=torch.zeros(20, dtype=torch.float64))
    for p, theta, g in zip(model.parameters(), before, grads, strict=True):
        log_prior_grad = -(theta - 0.5) / 0.25
        torch.testing.assert_close(p.detach(), theta - 0.05 * (g - log_prior_grad / 200))
