"""The posterior predictive, batched over weight samples.

S parameter sets from any :class:`~torchbayes.posterior.Posterior` go through one
``torch.func.vmap`` over ``functional_call`` — one batched forward instead of S Python
iterations. On top of the raw per-sample outputs:

* classification — p(y|x) ≈ (1/S) Σ_s softmax f(x; θ_s), and the split of the total predictive
  entropy into aleatoric and epistemic parts (Depeweg et al. 2018; Houlsby et al. 2011):
  H[ E_θ p(y|x,θ) ]  =  E_θ H[p(y|x,θ)]  +  I(y; θ | x)
  (total)               (aleatoric)          (epistemic: mutual information ≥ 0);
* regression — for a Gaussian likelihood y = f(x; θ) + σ(x; θ) ε (σ a constant, or
  σ = softplus(second network output) for heteroscedastic noise), the mean E_θ f, the
  epistemic std Std_θ f, the aleatoric std √E_θ σ², total std √(Var_θ f + E_θ σ²), and
  quantiles of the predictive mixture (1/S) Σ_s N(f_s, σ_s²).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from . import _checks
from .posterior import Posterior

__all__ = [
    "ClassPrediction",
    "RegressionPrediction",
    "noise_std_from_output",
    "predict_classes",
    "predict_regression",
    "sample_outputs",
]


def sample_outputs(
    posterior: Posterior,
    inputs: Tensor,
    num_samples: int,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
    input_batch_size: int | None = None,
) -> Tensor:
    """Network outputs under S posterior samples, shape ``(S, *output.shape)``.

    ``chunk_size`` bounds memory by evaluating that many samples per vmap slice;
    ``input_batch_size`` by feeding the inputs that many at a time — every batch sees the
    same S weight samples.
    """
    _checks.at_least("num_samples", num_samples, 1)
    if input_batch_size is not None:
        _checks.at_least("input_batch_size", input_batch_size, 1)
    params = posterior.sample(num_samples, generator)
    network = posterior.network

    def forward(sample: dict[str, Tensor], batch: Tensor) -> Tensor:
        return functional_call(network, sample, (batch,))

    batched = vmap(forward, in_dims=(0, None), chunk_size=chunk_size)
    with torch.no_grad():
        if input_batch_size is None:
            return batched(params, inputs)
        return torch.cat([batched(params, b) for b in inputs.split(input_batch_size)], dim=1)


@dataclass
class ClassPrediction:
    """Posterior predictive for classification; entropies in nats, one value per input."""

    probs: Tensor
    total_entropy: Tensor
    aleatoric: Tensor
    epistemic: Tensor

    @property
    def predicted(self) -> Tensor:
        return self.probs.argmax(-1)


def _entropy(log_probs: Tensor) -> Tensor:
    return -(log_probs.exp() * log_probs).nan_to_num().sum(-1)


def class_prediction_from_logits(logits: Tensor) -> ClassPrediction:
    """Average S per-sample logits ``(S, N, C)`` into a :class:`ClassPrediction`."""
    log_p = torch.log_softmax(logits, dim=-1)
    log_mean = torch.logsumexp(log_p, dim=0) - math.log(log_p.shape[0])
    total = _entropy(log_mean)
    aleatoric = _entropy(log_p).mean(0)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return ClassPrediction(log_mean.exp(), total, aleatoric, epistemic)


def predict_classes(
    posterior: Posterior,
    inputs: Tensor,
    num_samples: int = 100,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
    input_batch_size: int | None = None,
) -> ClassPrediction:
    """Model-averaged class probabilities and the uncertainty split; the network gives logits.

    ``chunk_size`` and ``input_batch_size`` bound memory as in :func:`sample_outputs`.
    """
    logits = sample_outputs(
        posterior,
        inputs,
        num_samples,
        generator=generator,
        chunk_size=chunk_size,
        input_batch_size=input_batch_size,
    )
    return class_prediction_from_logits(logits)


def noise_std_from_output(raw: Tensor) -> Tensor:
    """σ = softplus(raw) + 1e-6: the heteroscedastic noise convention of this module.

    softplus rather than exp, so σ grows linearly, not exponentially, where the network
    extrapolates far from its data.
    """
    return torch.nn.functional.softplus(raw) + 1e-6


@dataclass
class RegressionPrediction:
    """Posterior predictive for regression under a Gaussian likelihood."""

    mean: Tensor
    epistemic_std: Tensor
    aleatoric_std: Tensor
    quantiles: dict[float, Tensor]
    function_quantiles: dict[float, Tensor]
    """Quantiles of f(x; θ) over θ alone, without noise: the epistemic band."""

    @property
    def std(self) -> Tensor:
        """Total predictive std √(Var_θ f + σ_n²)."""
        return torch.sqrt(self.epistemic_std**2 + self.aleatoric_std**2)

    @property
    def median(self) -> Tensor:
        return self.quantiles[0.5]


def regression_prediction_from_samples(
    outputs: Tensor,
    noise_std: float | Tensor = 0.0,
    quantiles: Sequence[float] = (0.25, 0.5, 0.75),
    generator: torch.Generator | None = None,
) -> RegressionPrediction:
    """Summaries of per-sample regression means ``outputs`` ``(S, ...)`` and Gaussian noise.

    ``noise_std`` is a constant σ or a tensor of per-sample σ_s broadcastable to ``outputs``.
    Quantiles are taken over draws y_s = f_s + σ_s ε_s (one noise draw per sample), i.e. of the
    predictive mixture, so they include both kinds of uncertainty.
    """
    noise = torch.as_tensor(noise_std, dtype=outputs.dtype, device=outputs.device)
    _checks.non_negative("noise_std", noise)
    for q in quantiles:
        _checks.probability("quantiles", q)
    levels = sorted(set(quantiles) | {0.5})
    noise = noise.expand_as(outputs)
    eps = torch.randn(
        outputs.shape, generator=generator, device=outputs.device, dtype=outputs.dtype
    )
    draws = torch.addcmul(outputs, noise, eps)
    probs = torch.tensor(levels, dtype=outputs.dtype, device=outputs.device)
    q_values = torch.quantile(draws, probs, dim=0)
    f_values = torch.quantile(outputs, probs, dim=0)
    return RegressionPrediction(
        mean=outputs.mean(0),
        epistemic_std=outputs.std(0, correction=0),
        aleatoric_std=noise.pow(2).mean(0).sqrt(),
        quantiles={lvl: q_values[i] for i, lvl in enumerate(levels)},
        function_quantiles={lvl: f_values[i] for i, lvl in enumerate(levels)},
    )


def predict_regression(
    posterior: Posterior,
    inputs: Tensor,
    num_samples: int = 100,
    *,
    noise_std: float = 0.0,
    predicts_noise: bool = False,
    quantiles: Sequence[float] = (0.25, 0.5, 0.75),
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
) -> RegressionPrediction:
    """Predictive mean, epistemic/aleatoric/total std and quantiles for a regression network.

    With ``predicts_noise`` the network's last output dimension holds means in its first half
    and raw scales in its second, σ = softplus(raw) (:func:`noise_std_from_output`), for
    heteroscedastic noise; otherwise every output is a mean and ``noise_std`` is the constant
    observation noise.
    """
    outputs = sample_outputs(
        posterior, inputs, num_samples, generator=generator, chunk_size=chunk_size
    )
    if predicts_noise:
        mean, raw = outputs.chunk(2, dim=-1)
        return regression_prediction_from_samples(
            mean, noise_std_from_output(raw), quantiles, generator
        )
    return regression_prediction_from_samples(outputs, noise_std, quantiles, generator)
