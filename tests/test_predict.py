import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from torchbayes import (
    SampleSet,
    VariationalPosterior,
    predict_classes,
    predict_regression,
    sample_outputs,
)
from torchbayes.models import mlp
from torchbayes.nn import to_bayesian
from torchbayes.predict import class_prediction_from_logits
from torchbayes.variational import DiagonalGaussian


def _bayes_net(out=3):
    torch.manual_seed(0)
    return to_bayesian(
        mlp(4, [16, 16], out), posterior=lambda m: DiagonalGaussian(m, rho_init=-1.0)
    )


def test_batched_outputs_equal_a_python_loop_over_samples():
    posterior = VariationalPosterior(_bayes_net())
    x = torch.randn(6, 4)
    batched = sample_outputs(posterior, x, 9, generator=torch.Generator().manual_seed(2))
    params = posterior.sample(9, torch.Generator().manual_seed(2))
    looped = torch.stack(
        [
            functional_call(posterior.network, {k: v[s] for k, v in params.items()}, (x,))
            for s in range(9)
        ]
    )
    torch.testing.assert_close(batched, looped)
    chunked = sample_outputs(
        posterior, x, 9, generator=torch.Generator().manual_seed(2), chunk_size=4
    )
    torch.testing.assert_close(chunked, looped)


def test_variational_samples_follow_q():
    net = _bayes_net()
    samples = VariationalPosterior(net).sample(20_000, torch.Generator().manual_seed(0))
    q = net[0].weight_posterior
    torch.testing.assert_close(samples["0.weight"].mean(0), q.mu.detach(), atol=0.03, rtol=0)
    torch.testing.assert_close(samples["0.weight"].std(0), q.stddev.detach(), atol=0.03, rtol=0)


def test_uncertainty_split_identities():
    logits = torch.randn(50, 8, 5) * 3
    pred = class_prediction_from_logits(logits)
    probs = logits.softmax(-1)
    mean = probs.mean(0)
    torch.testing.assert_close(pred.probs, mean)
    total = -(mean * mean.log()).sum(-1)
    aleatoric = -(probs * probs.log()).sum(-1).mean(0)
    torch.testing.assert_close(pred.total_entropy, total)
    torch.testing.assert_close(pred.aleatoric, aleatoric)
    torch.testing.assert_close(pred.epistemic, total - aleatoric)
    assert bool((pred.epistemic >= 0).all()) and bool(
        (pred.total_entropy <= math.log(5) + 1e-6).all()
    )


def test_identical_samples_have_no_epistemic_uncertainty():
    pred = class_prediction_from_logits(torch.randn(1, 4, 3).expand(10, 4, 3))
    torch.testing.assert_close(pred.epistemic, torch.zeros(4), atol=1e-6, rtol=0)


def test_predict_classes_probabilities_sum_to_one():
    pred = predict_classes(VariationalPosterior(_bayes_net()), torch.randn(7, 4), 30)
    torch.testing.assert_close(pred.probs.sum(-1), torch.ones(7))
    assert pred.predicted.shape == (7,)


def test_point_posterior_regression_has_flat_noise_only_uncertainty():
    net = mlp(1, [8], 1)
    pred = predict_regression(
        SampleSet.point(net),
        torch.linspace(-3, 3, 11).unsqueeze(-1),
        4000,
        noise_std=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    torch.testing.assert_close(pred.epistemic_std, torch.zeros(11, 1))
    torch.testing.assert_close(pred.std, torch.full((11, 1), 0.5))
    iqr = pred.quantiles[0.75] - pred.quantiles[0.25]
    torch.testing.assert_close(iqr, torch.full((11, 1), 2 * 0.6745 * 0.5), atol=0.05, rtol=0)


def test_regression_std_combines_epistemic_and_noise():
    pred = predict_regression(
        VariationalPosterior(_bayes_net(1)), torch.randn(5, 4), 200, noise_std=0.3
    )
    torch.testing.assert_close(pred.std**2, pred.epistemic_std**2 + 0.09)
    assert set(pred.quantiles) == {0.25, 0.5, 0.75}


def test_sample_set_orders_and_resamples():
    net = mlp(2, [3], 1)
    sets = [{k: torch.full_like(v, float(i)) for k, v in net.named_parameters()} for i in range(4)]
    post = SampleSet(net, sets)
    assert len(post) == 4
    assert post.sample(3)["0.weight"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    assert post.sample(6)["0.weight"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 0.0, 1.0]
    a = post.sample(5, torch.Generator().manual_seed(1))["0.bias"]
    b = post.sample(5, torch.Generator().manual_seed(1))["0.bias"]
    torch.testing.assert_close(a, b)


def test_bad_arguments():
    post = VariationalPosterior(_bayes_net())
    with pytest.raises(ValueError, match="num_samples="):
        sample_outputs(post, torch.randn(2, 4), 0)
    with pytest.raises(ValueError, match="noise_std="):
        predict_regression(post, torch.randn(2, 4), 3, noise_std=-1.0)
    with pytest.raises(ValueError, match="samples="):
        SampleSet(mlp(2, [3], 1), [])
    with pytest.raises(ValueError, match="to_bayesian"):
        VariationalPosterior(mlp(2, [3], 1))


def test_samples_that_do_not_fit_the_network_are_named():
    net = nn.Linear(3, 2)
    good = {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"samples\[1\]\['weight'\] has shape \(3, 2\)"):
        SampleSet(net, [good, {**good, "weight": torch.zeros(3, 2)}])
    with pytest.raises(ValueError, match=r"samples\[0\]\['0.weight'\] is not a parameter"):
        SampleSet(net, [{"0.weight": torch.zeros(2, 3)}])
