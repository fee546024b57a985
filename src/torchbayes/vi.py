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
from .nn.convert import bayesian_layers, model_kl

__all__ = [
    "SCHEDULES",
    "DescriptionLength",
    "FiniteGuard",
    "FreeEnergy",
    "FreeEnergyTerms",
    "check_finite",
    "description_length",
    "kl_weights",
]

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


class FiniteGuard:
    """Checks a step's loss and gradients before the optimizer or sampler takes it.

    Call after ``backward()``: ``if guard(loss, step): optimizer.step()``. A non-finite loss,
    or a non-finite gradient of any parameter of ``model`` (one fused norm over all of them,
    one device sync), raises ``FloatingPointError`` naming the step and the first such
    parameter by name — or, with ``skip=True``, drops the gradients, counts the step in
    ``skipped`` and returns ``False`` so the caller leaves the parameters untouched.
    """

    def __init__(self, model: nn.Module, skip: bool = False) -> None:
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.skip, self.skipped = skip, 0

    def __call__(self, loss: Tensor, step: int) -> bool:
        problem = None
        if not torch.isfinite(loss).all():
            problem = f"non-finite loss {float(loss)!r} at step {step}"
        else:
            with_grad = [(n, p.grad) for n, p in self.named if p.grad is not None]
            if with_grad:
                norms = torch.stack(torch._foreach_norm([g for _, g in with_grad]))
                if not bool(torch.isfinite(norms).all()):
                    bad = int((~torch.isfinite(norms)).nonzero()[0])
                    problem = f"non-finite gradient of {with_grad[bad][0]!r} at step {step}"
        if problem is None:
            return True
        if not self.skip:
            raise FloatingPointError(problem)
        for _, p in self.named:
            p.grad = None
        self.skipped += 1
        return False


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
        _checks.non_negative("kl_scale", kl_scale)
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


@dataclass(frozen=True)
class DescriptionLength:
    """The minimum-description-length reading of the free energy (Graves 2011 §3–4).

    Sending the training targets with the network costs L(D) = L_E + L_C: the error loss
    L_E = −Σₙ E_q[log p(yₙ|xₙ, w)] (the targets coded with the network) plus the complexity
    loss L_C = KL(q‖p) (the weights coded with the prior, bits-back). A uniform code over K
    labels needs N·log₂K bits; the compression ratio is that over L(D) in bits (> 1: the
    network compresses the targets; Graves Table 1 "Ratio").
    """

    error_nats: float
    complexity_nats: float
    num_weights: int
    num_data: int
    num_classes: int

    @property
    def error_bits(self) -> float:
        return self.error_nats / LN2

    @property
    def complexity_bits(self) -> float:
        return self.complexity_nats / LN2

    @property
    def total_bits(self) -> float:
        return self.error_bits + self.complexity_bits

    @property
    def bits_per_weight(self) -> float:
        return self.complexity_bits / self.num_weights

    @property
    def uniform_bits(self) -> float:
        return self.num_data * math.log2(self.num_classes)

    @property
    def compression_ratio(self) -> float:
        return self.uniform_bits / self.total_bits

    def as_dict(self) -> dict[str, float]:
        """Every quantity, for JSON."""
        names = ("error_bits", "complexity_bits", "total_bits", "bits_per_weight")
        return {
            "error_nats": self.error_nats,
            "complexity_nats": self.complexity_nats,
            **{name: getattr(self, name) for name in names},
            "compression_ratio": self.compression_ratio,
        }


def description_length(
    model: nn.Module, error_nats: float, num_data: int, num_classes: int
) -> DescriptionLength:
    """L(D) of ``model``'s posterior: ``error_nats`` is the training-set error loss −Σₙ E_q log
    p(yₙ|xₙ, w) in nats (mean NLL × N); the complexity is ``model_kl(model)``; the weights
    counted are those of its Bayesian layers."""
    _checks.at_least("num_data", num_data, 1)
    _checks.at_least("num_classes", num_classes, 2)
    if not math.isfinite(error_nats) or error_nats < 0:
        raise ValueError(f"error_nats must be finite and >= 0, got error_nats={error_nats!r}")
    with torch.no_grad():
        complexity = float(model_kl(model))
    weights = sum(
        q.mean.numel() for _, layer in bayesian_layers(model) for _, q in layer.posteriors()
    )
    return DescriptionLength(error_nats, complexity, weights, num_data, num_classes)
