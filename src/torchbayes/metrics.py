"""Scores of a posterior predictive: uncertainty, out-of-distribution detection, calibration.

Each uncertainty score is oriented so that *higher means less sure*:

* ``entropy``            — total predictive entropy H[(1/S)Σ_s p(y|x,θ_s)] (nats);
* ``mutual_information`` — I(y; θ | x), the epistemic part;
* ``max_probability``    — 1 − maxᵧ p(y|x) (reported as the max probability itself; the
  AUROC uses 1 − it).

:func:`ood_auroc` is the area under the ROC curve for telling out-of-distribution inputs
(positives) from in-distribution ones by a score; :func:`expected_calibration_error` is the
top-label ECE over equal-width confidence bins (Guo et al. 2017). Both are torchmetrics'.
:func:`gaussian_log_likelihood` is the regression benchmark's test log-likelihood of the
S-sample predictive mixture; :func:`fit_noise_std` the homoscedastic σ that maximizes it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Normal
from torchmetrics.functional.classification import binary_auroc, multiclass_calibration_error

from . import _checks
from .predict import ClassPrediction

__all__ = [
    "SCORES",
    "expected_calibration_error",
    "fit_noise_std",
    "gaussian_log_likelihood",
    "ood_auroc",
    "ood_report",
    "uncertainty_scores",
]

SCORES: tuple[str, ...] = ("entropy", "mutual_information", "max_probability")


def uncertainty_scores(prediction: ClassPrediction) -> dict[str, Tensor]:
    """Per-input scores, higher = less certain (``max_probability`` as 1 − max p)."""
    return {
        "entropy": prediction.total_entropy,
        "mutual_information": prediction.epistemic,
        "max_probability": 1.0 - prediction.probs.max(-1).values,
    }


def ood_auroc(in_scores: Tensor, out_scores: Tensor) -> float:
    """AUROC of separating out- (positive) from in-distribution inputs by a score."""
    if in_scores.numel() == 0 or out_scores.numel() == 0:
        raise ValueError("ood_auroc needs at least one in- and one out-of-distribution score")
    scores = torch.cat([in_scores.flatten(), out_scores.flatten()]).float()
    labels = torch.cat([torch.zeros(in_scores.numel()), torch.ones(out_scores.numel())]).long()
    return float(binary_auroc(scores, labels.to(scores.device)))


def expected_calibration_error(probs: Tensor, targets: Tensor, num_bins: int = 15) -> float:
    """Top-label ECE = Σ_b (|B_b|/n)·|acc(B_b) − conf(B_b)| over ``num_bins`` equal bins."""
    _checks.at_least("num_bins", num_bins, 1)
    if probs.ndim != 2 or probs.shape[0] != targets.shape[0]:
        raise ValueError(
            f"probs must be (n, classes) matching targets (n,), got {tuple(probs.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return float(
        multiclass_calibration_error(
            probs, targets, num_classes=probs.shape[1], n_bins=num_bins, norm="l1"
        )
    )


def ood_report(
    in_distribution: ClassPrediction, targets: Tensor, out_of_distribution: ClassPrediction
) -> dict[str, float]:
    """Accuracy, NLL and ECE in distribution; mean scores on both sets; AUROC per score."""
    probs = in_distribution.probs
    nll = -torch.log(probs.gather(1, targets[:, None]).clamp_min(1e-12)).mean()
    report = {
        "accuracy": float((probs.argmax(1) == targets).float().mean()),
        "nll": float(nll),
        "ece": expected_calibration_error(probs, targets),
    }
    inside, outside = uncertainty_scores(in_distribution), uncertainty_scores(out_of_distribution)
    for name in SCORES:
        if name == "max_probability":
            report["in_max_probability"] = float(1 - inside[name].mean())
            report["ood_max_probability"] = float(1 - outside[name].mean())
        else:
            report[f"in_{name}"] = float(inside[name].mean())
            report[f"ood_{name}"] = float(outside[name].mean())
        report[f"auroc_{name}"] = ood_auroc(inside[name], outside[name])
    return report


def gaussian_log_likelihood(means: Tensor, stds: Tensor | float, targets: Tensor) -> Tensor:
    """Per-example log density of the predictive mixture, summed over output dimensions:

        log p(y|x) = log (1/S) Σ_s N(y | μ_s(x), σ_s(x)²)   (logsumexp over the S samples)

    ``means`` (S, n, d), ``stds`` broadcastable to it (a constant, per-sample or per-point σ),
    ``targets`` (n, d); returns (n,). With S = 1 it is the plain Gaussian log-likelihood. The
    test log-likelihood of Hernández-Lobato & Adams (2015) and Gal & Ghahramani (2016) is its
    mean over the test set.
    """
    if means.dim() < 2:
        raise ValueError(f"means must have shape (S, n, ...), got shape {tuple(means.shape)}")
    stds = torch.as_tensor(stds, dtype=means.dtype, device=means.device)
    _checks.positive("stds", stds)
    log_p = Normal(means, stds.expand_as(means)).log_prob(targets)
    per_sample = log_p.flatten(2).sum(-1)
    return torch.logsumexp(per_sample, dim=0) - math.log(means.shape[0])


_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def fit_noise_std(
    means: Tensor, targets: Tensor, grid_points: int = 64, refinements: int = 40
) -> float:
    """Empirical Bayes for a homoscedastic noise scale given posterior samples of the mean:

        σ̂ = argmax_σ Σ_i log (1/S) Σ_s N(y_i | μ_s(x_i), σ²)

    ``means`` (S, n, d), ``targets`` (n, d), as :func:`gaussian_log_likelihood`. Why: a
    mean-field posterior that learns σ inside the free energy's expectation settles at
    σ² = E_q[(y − f_w)²] = residual² + Var_q f, and its predictive σ² + Var_q f then counts
    the weight spread twice; σ̂ is fitted to the predictive itself. Search: ``grid_points``
    log-spaced values over [10⁻⁴, 10] × the targets' standard deviation, then golden section
    on log σ between the best value's neighbours (``refinements`` steps).
    """
    if means.dim() < 2 or means.shape[1:] != targets.shape:
        raise ValueError(
            f"means must have shape (S, *targets.shape), got means {tuple(means.shape)} "
            f"and targets {tuple(targets.shape)}"
        )
    _checks.at_least("grid_points", grid_points, 3)
    _checks.at_least("refinements", refinements, 0)
    # float64: near its maximum the objective is flat, and float32 rounding would move σ̂.
    means, targets = means.double(), targets.double()
    scale = float(targets.std(correction=0)) if targets.numel() > 1 else 1.0
    scale = scale if scale > 0 else 1.0
    log_grid = torch.linspace(math.log(1e-4 * scale), math.log(10.0 * scale), grid_points)

    def score(log_sigma: float) -> float:
        return float(gaussian_log_likelihood(means, math.exp(log_sigma), targets).mean())

    scores = [score(float(v)) for v in log_grid]
    best = max(range(grid_points), key=scores.__getitem__)
    low = float(log_grid[max(best - 1, 0)])
    high = float(log_grid[min(best + 1, grid_points - 1)])
    a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    score_a, score_b = score(a), score(b)
    for _ in range(refinements):  # one new evaluation per step: the other point carries over
        if score_a >= score_b:
            high, b, score_b = b, a, score_a
            a = high - _GOLDEN * (high - low)
            score_a = score(a)
        else:
            low, a, score_a = a, b, score_b
            b = low + _GOLDEN * (high - low)
            score_b = score(b)
    return math.exp(0.5 * (low + high))
