"""OOD and calibration scores against direct computations."""

import itertools
import math

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch.distributions import Normal

from torchbayes.metrics import (
    expected_calibration_error,
    fit_noise_std,
    gaussian_log_likelihood,
    ood_auroc,
    ood_report,
    uncertainty_scores,
)
from torchbayes.predict import class_prediction_from_logits


def test_auroc_matches_sklearn_and_its_extremes():
    generator = torch.Generator().manual_seed(0)
    inside = torch.randn(300, generator=generator)
    outside = torch.randn(200, generator=generator) + 1.0
    labels = [0] * 300 + [1] * 200
    expected = roc_auc_score(labels, torch.cat([inside, outside]).numpy())
    assert ood_auroc(inside, outside) == pytest.approx(expected, abs=1e-6)
    assert ood_auroc(torch.zeros(5), torch.ones(5)) == pytest.approx(1.0)
    assert ood_auroc(torch.ones(5), torch.zeros(5)) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="at least one"):
        ood_auroc(torch.zeros(0), torch.ones(3))


def test_ece_matches_the_binned_definition():
    generator = torch.Generator().manual_seed(1)
    probs = torch.softmax(3 * torch.randn(1000, 4, generator=generator), -1)
    targets = torch.randint(4, (1000,), generator=generator)
    confidence, predicted = probs.max(1)
    correct = (predicted == targets).float()
    ece = 0.0
    edges = torch.linspace(0, 1, 11)
    for lo, hi in itertools.pairwise(edges):
        inside = (confidence > lo) & (confidence <= hi)
        if inside.any():
            gap = (correct[inside].mean() - confidence[inside].mean()).abs()
            ece += float(inside.float().mean() * gap)
    assert expected_calibration_error(probs, targets, num_bins=10) == pytest.approx(ece, abs=1e-5)
    with pytest.raises(ValueError, match="probs must be"):
        expected_calibration_error(probs[:, 0], targets)


def test_scores_are_oriented_so_higher_is_less_certain():
    sure = class_prediction_from_logits(torch.tensor([[[20.0, 0.0, 0.0]]]).expand(4, 1, 3))
    disagreeing = torch.zeros(3, 1, 3)
    disagreeing[[0, 1, 2], 0, [0, 1, 2]] = 20.0  # each sample sure of a different class
    unsure = class_prediction_from_logits(disagreeing)
    for name, low in uncertainty_scores(sure).items():
        assert float(uncertainty_scores(unsure)[name]) > float(low) + 0.5, name
    assert float(uncertainty_scores(unsure)["entropy"]) == pytest.approx(math.log(3), abs=1e-6)


def test_ood_report_separates_confident_from_flat_predictions():
    logits_in = torch.zeros(5, 40, 3)
    targets = torch.randint(3, (40,))
    logits_in[:, torch.arange(40), targets] = 8.0
    logits_out = torch.randn(5, 30, 3) * 0.1
    report = ood_report(
        class_prediction_from_logits(logits_in),
        targets,
        class_prediction_from_logits(logits_out),
    )
    assert report["accuracy"] == 1.0
    assert report["ood_entropy"] > report["in_entropy"]
    assert report["auroc_entropy"] == pytest.approx(1.0)
    assert report["auroc_max_probability"] == pytest.approx(1.0)


def test_gaussian_log_likelihood_is_the_log_of_the_mixture_density():
    y = torch.tensor([[0.3], [-1.0]])
    one = torch.tensor([[[0.0], [0.5]]])
    expected = Normal(one[0], 2.0).log_prob(y).squeeze(-1)
    torch.testing.assert_close(gaussian_log_likelihood(one, 2.0, y), expected)
    means = torch.tensor([[[0.0], [0.5]], [[1.0], [-1.0]]])
    stds = torch.tensor([[[1.0]], [[0.5]]])  # one σ per sample
    density = 0.5 * Normal(means[0], 1.0).log_prob(y).exp()
    density += 0.5 * Normal(means[1], 0.5).log_prob(y).exp()
    torch.testing.assert_close(gaussian_log_likelihood(means, stds, y), density.log().squeeze(-1))
    # several outputs: one joint density per sample, dimensions summed inside the mixture
    two = torch.randn(1, 5, 2)
    joint = Normal(two[0], 0.7).log_prob(torch.zeros(5, 2)).sum(-1)
    torch.testing.assert_close(gaussian_log_likelihood(two, 0.7, torch.zeros(5, 2)), joint)
    far = gaussian_log_likelihood(means, 1e-3, y + 100.0)  # logsumexp: no underflow to −inf
    assert torch.isfinite(far).all()
    with pytest.raises(ValueError, match="stds"):
        gaussian_log_likelihood(means, 0.0, y)
    with pytest.raises(ValueError, match="means"):
        gaussian_log_likelihood(torch.zeros(3), 1.0, torch.zeros(3))


def test_gaussian_log_likelihood_of_sampled_linear_models_matches_the_closed_form():
    # f_s(x) = w_s x with w ~ N(m, v), noise σ: the predictive is N(m x, v x² + σ²).
    g = torch.Generator().manual_seed(0)
    m, v, sigma = 0.8, 0.25, 0.5
    x = torch.linspace(-2, 2, 9).unsqueeze(-1)
    y = 0.3 * x + 0.2
    w = m + math.sqrt(v) * torch.randn(200_000, 1, 1, generator=g)
    estimate = gaussian_log_likelihood(w * x, sigma, y)
    exact = Normal(m * x, (v * x**2 + sigma**2).sqrt()).log_prob(y).squeeze(-1)
    torch.testing.assert_close(estimate, exact, atol=0.01, rtol=0)


def test_fit_noise_std_is_the_maximum_likelihood_sigma():
    generator = torch.Generator().manual_seed(0)
    y = torch.randn(200, 1, generator=generator)
    one = torch.randn(1, 200, 1, generator=generator)
    # one sample: the closed form σ̂² = mean squared residual
    closed = float((y - one[0]).square().mean().sqrt())
    assert fit_noise_std(one, y) == pytest.approx(closed, rel=1e-4)
    # a mixture of 30 samples: against a dense grid of the same objective
    means = one + 0.5 * torch.randn(30, 200, 1, generator=generator)
    grid = torch.linspace(0.05, 2.0, 4000)
    scores = torch.stack([gaussian_log_likelihood(means, float(s), y).mean() for s in grid])
    fitted = fit_noise_std(means, y)
    assert fitted == pytest.approx(float(grid[scores.argmax()]), abs=1e-3)
    # the samples' spread takes up part of the residual: σ̂ is below the one-sample answer
    assert fitted < float((y - means.mean(0)).square().mean().sqrt())


def test_fit_noise_std_names_bad_shapes_and_settings():
    with pytest.raises(ValueError, match="means must have shape"):
        fit_noise_std(torch.zeros(3, 5, 1), torch.zeros(4, 1))
    with pytest.raises(ValueError, match="grid_points"):
        fit_noise_std(torch.zeros(3, 5, 1), torch.zeros(5, 1), grid_points=2)
