"""Variational free energy (the negative ELBO) and its minimum-description-length reading.

For data D of N examples split into M minibatches D_1…D_M, Graves (2011) and Blundell et
al. (2015) minimize

    F(D, θ) = KL[q(w|θ) ‖ p(w)]  −  E_q[log p(D|w)]
              (complexity cost)     (error / likelihood cost)

one minibatch at a time with F_i = π_i KL − E_q[log p(D_i|w)], Σ_i π_i = 1, so the
minibatch costs add up to F over an epoch. Schedules for π_i:

* ``"uniform"``  — π_i = 1/M (Graves eq. 18; Blundell eq. 8);
* ``"blundell"`` — π_i = 2^(M−i) / (2^M − 1), i = 1…M (Blundell §3.4): the prior dominates
  early minibatches of an epoch and the data later ones.

**Loss scale** (the one convention of the package). Models return per-example *mean*
losses, as PyTorch does. The loss to backpropagate is F_i divided by the average minibatch
size N/M, i.e. ``error + π_i · M · KL / N``: nats per example, on the scale of a plain
network's loss, so learning rates carry over. ``complexity`` is reported for the whole model
in nats, ``error`` per example in nats; ``bits`` gives them in bits (÷ ln 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from . import _checks
from .nn.convert import model_kl

__all__ = ["SCHEDULES", "FreeEnergy", "FreeEnergyTerms", "check_finite", "kl_weights"]

SCHEDULES: tuple[str, ...] = ("uniform", "blundell")
LN2 = math.log(2.0)


def kl_weights(num_batches: int, schedule: str = "uniform") -> Tensor:
    """π_1…π_M for one epoch of M minibatches (float64; sums to 1).

    ``"blundell"`` is evaluated as 2^(−i)/(1 − 2^(−M)), equal to 2^(M−i)/(2^M − 1) but
    without overflow for large M.
    """
    _checks.at_least("num_batches", num_batches, 1)
    _checks.one_of("schedule", schedule, SCHEDULES)
    if schedule == "uniform":
        return torch.full((num_batches,), 1.0 / num_batches, dtype=torch.float64)
    i = torch.arange(1, num_batches + 1, dtype=torch.float64)
    return torch.exp2(-i) / -torch.expm1(torch.tensor(-num_batches * LN2, dtype=torch.float64))


@dataclass
class FreeEnergyTerms:
    """One minibatch's free energy. ``loss`` is what to backpropagate."""

    loss: Tensor
    error: Tensor
    complexity: Tensor
    kl_weight: float

    @property
    def error_bits(self) -> float:
        return float(self.error) / LN2

    @property
    def complexity_bits(self) -> float:
        return float(self.complexity) / LN2


def check_finite(loss: Tensor, step: int) -> None:
    """Stop training loudly on a non-finite loss instead of corrupting the parameters."""
    if not torch.isfinite(loss).all():
        raise FloatingPointError(f"non-finite loss {float(loss)!r} at step {step}")


class FreeEnergy:
    """The minibatch free energy F_i of a model built from Bayesian layers.

    Args:
        num_data: N, the number of training examples.
        num_batches: M, minibatches per epoch (default ⌈N / batch_size⌉ — pass it).
        schedule: how KL is spread over the minibatches of an epoch, ``"uniform"`` or
            ``"blundell"``.
        kl_scale: an extra factor on the complexity cost (1 = the true free energy).

    Call it with the model and the minibatch's mean error (negative log likelihood per
    example, in nats) *after* the forward pass, so a Monte Carlo KL reuses that pass's weight
    sample. ``batch_index`` counts from 0 within the epoch.
    """

    def __init__(
        self, num_data: int, num_batches: int, schedule: str = "uniform", kl_scale: float = 1.0
    ) -> None:
        _checks.at_least("num_data", num_data, 1)
        if kl_scale < 0:
            raise ValueError(f"kl_scale must be >= 0, got kl_scale={kl_scale!r}")
        self.num_data, self.num_batches = num_data, num_batches
        self.schedule, self.kl_scale = schedule, kl_scale
        self.weights = kl_weights(num_batches, schedule).tolist()

    def kl_weight(self, batch_index: int) -> float:
        """π_i for minibatch ``batch_index`` (0-based, wrapping each epoch)."""
        return self.weights[batch_index % self.num_batches]

    def __call__(self, model: nn.Module, error: Tensor, batch_index: int = 0) -> FreeEnergyTerms:
        complexity = model_kl(model)
        weight = self.kl_weight(batch_index)
        scale = self.kl_scale * weight * self.num_batches / self.num_data
        return FreeEnergyTerms(
            error + scale * complexity, error.detach(), complexity.detach(), weight
        )

    def estimate(
        self,
        model: nn.Module,
        error_fn: Callable[[Tensor], Tensor],
        inputs: Tensor,
        batch_index: int = 0,
        num_samples: int = 1,
    ) -> FreeEnergyTerms:
        """F_i averaged over ``num_samples`` weight samples (one forward pass each).

        ``error_fn(outputs)`` returns the minibatch's mean negative log likelihood. The passes
        run one after another because each keeps its own sample for the Monte Carlo KL.
        """
        _checks.at_least("num_samples", num_samples, 1)
        terms = [self(model, error_fn(model(inputs)), batch_index) for _ in range(num_samples)]
        if num_samples == 1:
            return terms[0]
        return FreeEnergyTerms(
            torch.stack([t.loss for t in terms]).mean(),
            torch.stack([t.error for t in terms]).mean(),
            torch.stack([t.complexity for t in terms]).mean(),
            terms[0].kl_weight,
        )
