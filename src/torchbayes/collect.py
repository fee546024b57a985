"""Collect posterior samples from an SG-MCMC run: burn-in, thinning, selection, storage.

Call :meth:`Collector.step` after every sampler step. After ``burn_in`` steps it keeps every
``thin``-th parameter set (Gan et al. 2017 Table 2 thins in fractions of an epoch: pass
``thin=Collector.epochs(0.5, steps_per_epoch)``). :meth:`Collector.select` picks K of the
kept samples the three ways of Gan et al. §5.1, Fig. 2:

* ``"forward"``  — the first K after burn-in;
* ``"backward"`` — the last K;
* ``"thinned"``  — K spread evenly over the whole run.

Samples live in memory, or on disk (``directory=``, one ``torch.save`` file each, written
atomically) for models too large to keep many copies of. :meth:`posterior` hands them to the
predictive API as a :class:`~torchbayes.posterior.SampleSet`. ``state_dict`` holds the step
counter and the samples (or their file names), so a resumed run loses none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import _checks
from .posterior import SampleSet

__all__ = ["SELECTIONS", "Collector"]

SELECTIONS: tuple[str, ...] = ("forward", "backward", "thinned")


class Collector:
    """Keeps thinned parameter samples of ``model`` after burn-in.

    Args:
        model: the network being sampled; its named parameters are what is kept.
        burn_in: steps to discard before the first sample.
        thin: keep one sample every ``thin`` steps after burn-in.
        max_samples: stop collecting after this many (``None``: no limit).
        directory: keep samples as files there instead of in memory.
    """

    def __init__(
        self,
        model: nn.Module,
        burn_in: int = 0,
        thin: int = 1,
        max_samples: int | None = None,
        directory: str | os.PathLike | None = None,
    ) -> None:
        _checks.at_least("burn_in", burn_in, 0)
        _checks.at_least("thin", thin, 1)
        if max_samples is not None:
            _checks.at_least("max_samples", max_samples, 1)
        self.model, self.burn_in, self.thin, self.max_samples = model, burn_in, thin, max_samples
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.steps = 0
        self._samples: list[dict[str, Tensor] | str] = []

    @staticmethod
    def epochs(fraction: float, steps_per_epoch: int) -> int:
        """A thinning interval given in epochs, as a whole number of steps (at least 1)."""
        _checks.positive("fraction", fraction)
        _checks.at_least("steps_per_epoch", steps_per_epoch, 1)
        return max(1, round(fraction * steps_per_epoch))

    def __len__(self) -> int:
        return len(self._samples)

    def due(self, keep: bool | None = None) -> bool:
        """Whether the step just counted is one to keep (``keep`` overrides the thinning)."""
        past = self.steps - self.burn_in
        full = self.max_samples is not None and len(self._samples) >= self.max_samples
        wanted = past % self.thin == 0 if keep is None else keep
        return past > 0 and wanted and not full

    def step(self, keep: bool | None = None) -> bool:
        """Count one sampler step; keep the current parameters if due. Returns whether kept.

        ``keep`` lets the sampler decide instead of the thinning interval (the
        gradient-uncertainty sampler keeps exactly the steps where it injects noise); the
        burn-in and ``max_samples`` still apply.
        """
        self.steps += 1
        if not self.due(keep):
            return False
        sample = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        if self.directory is None:
            self._samples.append(sample)
        else:
            path = self.directory / f"sample-{self.steps:09d}.pt"
            tmp = path.with_name(f".{path.name}.tmp")
            torch.save(sample, tmp)
            os.replace(tmp, path)
            self._samples.append(path.name)
        return True

    def _load(self, item: dict[str, Tensor] | str) -> dict[str, Tensor]:
        if isinstance(item, dict):
            return item
        assert self.directory is not None
        return torch.load(self.directory / item, weights_only=True)

    def samples(self) -> list[dict[str, Tensor]]:
        """Every kept sample, in collection order."""
        return [self._load(s) for s in self._samples]

    def selection(self, num_samples: int, how: str = "thinned") -> list[int]:
        """Indices (into :meth:`samples`) of K kept samples chosen by forward, backward or
        thinned collection (Gan et al. §5.1)."""
        _checks.one_of("how", how, SELECTIONS)
        _checks.at_least("num_samples", num_samples, 1)
        n = len(self._samples)
        if num_samples > n:
            raise ValueError(f"num_samples={num_samples} but only {n} samples were collected")
        if how == "forward":
            return list(range(num_samples))
        if how == "backward":
            return list(range(n - num_samples, n))
        return torch.linspace(0, n - 1, num_samples).round().long().tolist()

    def select(self, num_samples: int, how: str = "thinned") -> list[dict[str, Tensor]]:
        """K kept samples chosen by forward, backward or thinned collection (Gan et al. §5.1)."""
        return [self._load(self._samples[i]) for i in self.selection(num_samples, how)]

    def posterior(
        self, num_samples: int | None = None, how: str = "thinned", network: nn.Module | None = None
    ) -> SampleSet:
        """The kept samples (all, or K selected) as a posterior for the predictive API."""
        chosen = self.samples() if num_samples is None else self.select(num_samples, how)
        return SampleSet(network if network is not None else self.model, chosen)

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "samples": list(self._samples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self._samples = list(state["samples"])
