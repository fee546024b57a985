"""A posterior is a source of weight samples for one deterministic network.

Everything downstream — prediction, uncertainty, pruning reports, bandit agents — talks
only to this interface:

* ``posterior.network`` — a plain ``nn.Module``;
* ``posterior.sample(S, generator)`` — a ``dict[str, Tensor]`` keyed like the network's
  parameters, each tensor stacked to shape ``(S, *param.shape)``; parameters missing from the
  dict are shared by all samples.

:class:`VariationalPosterior` draws from the q(w|θ) of a model's Bayesian layers;
:class:`SampleSet` holds collected samples (SG-MCMC, ensembles, or a single point estimate).
Adding an inference method means adding a class with these two members — no change to
:mod:`torchbayes.predict`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

from . import _checks
from .nn.convert import bayesian_layers, to_deterministic

__all__ = ["Posterior", "SampleSet", "VariationalPosterior"]


class Posterior(ABC):
    """Hands out stacked parameter samples θ₁…θ_S for :attr:`network`."""

    network: nn.Module

    @property
    def distinct_samples(self) -> int | None:
        """How many different samples there are (``None``: unlimited, fresh draws)."""
        return None

    @abstractmethod
    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """``num_samples`` parameter sets stacked on dim 0, keyed like ``network``'s parameters."""


class VariationalPosterior(Posterior):
    """q(w|θ) of a model built from Bayesian layers.

    ``network`` is the deterministic twin (:func:`torchbayes.nn.to_deterministic`) in eval
    mode; samples are fresh draws from each layer's variational distribution. The twin is a
    snapshot: build a new ``VariationalPosterior`` after further training.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.network = to_deterministic(model).eval()
        self._layers = dict(bayesian_layers(model))
        if not self._layers:
            raise ValueError("model has no Bayesian layers; convert it with to_bayesian(model)")

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        _checks.at_least("num_samples", num_samples, 1)
        samples: dict[str, Tensor] = {}
        for prefix, layer in self._layers.items():
            for name, value in layer.sample_weights(num_samples, generator).items():
                samples[f"{prefix}.{name}" if prefix else name] = value
        return samples


def _check_fits(known: Mapping[str, Tensor], sample: Mapping[str, Tensor], index: int) -> None:
    """ValueError naming the first entry of ``sample`` that is not among the network's
    parameters and buffers ``known`` or has another shape (instead of an opaque error deep in
    functional_call)."""
    for name, value in sample.items():
        if name not in known:
            raise ValueError(
                f"samples[{index}][{name!r}] is not a parameter or buffer of the network "
                f"(it has {sorted(known)[:6]}{' …' if len(known) > 6 else ''})"
            )
        if tuple(value.shape) != tuple(known[name].shape):
            raise ValueError(
                f"samples[{index}][{name!r}] has shape {tuple(value.shape)}, the network's "
                f"{name!r} has shape {tuple(known[name].shape)}"
            )


class SampleSet(Posterior):
    """An empirical posterior: a fixed set of parameter samples for ``network``.

    Built from SG-MCMC draws, ensemble members or a single point estimate
    (:meth:`point`). Without a generator ``sample(S)`` returns samples 0, 1, …, S−1 in
    order (cycling when S > len(self)), so model averages over growing S are nested; with a
    generator it draws S of them uniformly with replacement.
    """

    def __init__(self, network: nn.Module, samples: Iterable[Mapping[str, Tensor]]) -> None:
        samples = list(samples)
        if not samples:
            raise ValueError("samples must hold at least one parameter set, got samples=[]")
        keys = set(samples[0])
        for i, s in enumerate(samples):
            if set(s) != keys:
                raise ValueError(f"sample {i} has keys {sorted(s)}, expected {sorted(keys)}")
        known = {**dict(network.named_parameters()), **dict(network.named_buffers())}
        for i, sample in enumerate(samples):
            _check_fits(known, sample, i)
        self.network = network
        self.stacked = {k: torch.stack([s[k].detach() for s in samples]) for k in samples[0]}

    @classmethod
    def point(cls, network: nn.Module) -> SampleSet:
        """The delta posterior at the network's current parameters (a plain, non-Bayesian net)."""
        params = {k: v.detach().clone() for k, v in network.named_parameters()}
        return cls(network, [params])

    def __len__(self) -> int:
        return next(iter(self.stacked.values())).shape[0]

    @property
    def distinct_samples(self) -> int | None:
        return len(self)

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        _checks.at_least("num_samples", num_samples, 1)
        n = len(self)
        if generator is None:
            if num_samples <= n:
                return {k: v[:num_samples] for k, v in self.stacked.items()}
            index = torch.arange(num_samples) % n
        else:
            index = torch.randint(n, (num_samples,), generator=generator, device=generator.device)
        index = index.to(next(iter(self.stacked.values())).device)
        return {k: v.index_select(0, index) for k, v in self.stacked.items()}
