"""Checkpoints that lose nothing: every stateful object of a training run, written atomically.

A run is resumable when everything its future depends on is saved together: the network,
the optimizer or sampler (moment estimates, momenta, thermostats, the noise generator), the
:class:`~torchbayes.collect.Collector` (step counter and the samples kept so far), every
``torch.Generator`` that orders minibatches or draws noise, the global torch RNG (dropout,
weight noise) and the position reached. :class:`Checkpoint` saves them in one file, first
under a temporary name and then renamed over the previous one — ``os.replace`` is atomic on
POSIX, so a kill at any moment leaves the old checkpoint or the new one, never half of one.

Save at boundaries the loop can restart from (the end of an epoch: the minibatch order of
the next epoch comes from a saved generator), and a resumed run ends with the same samples
and numbers as one never interrupted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from . import _checks

__all__ = ["Checkpoint"]


class Checkpoint:
    """Save and restore ``objects`` at ``path``.

    Args:
        path: the checkpoint file.
        objects: name → anything with ``state_dict`` / ``load_state_dict`` (modules,
            optimizers, samplers, LR schedulers, collectors) or a ``torch.Generator``.
        every: :meth:`step` saves when the position is a multiple of ``every`` (0: only the
            final save).
    """

    def __init__(self, path: str | os.PathLike, objects: Mapping[str, Any], every: int = 1):
        _checks.at_least("every", every, 0)
        for name, obj in objects.items():
            if not isinstance(obj, torch.Generator) and not hasattr(obj, "load_state_dict"):
                raise TypeError(
                    f"objects[{name!r}] has no state_dict and is not a torch.Generator: {type(obj)}"
                )
        self.path, self.objects, self.every = Path(path), dict(objects), every

    def save(self, position: int, **extra: Any) -> None:
        """Write every object's state, the global RNG, ``position`` and ``extra`` atomically."""
        state = {
            "position": position,
            "extra": extra,
            "torch_rng": torch.get_rng_state(),
            "objects": {
                name: obj.get_state() if isinstance(obj, torch.Generator) else obj.state_dict()
                for name, obj in self.objects.items()
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def step(self, position: int, final: bool = False, **extra: Any) -> bool:
        """Save if ``position`` is due (or ``final``); returns whether it saved."""
        due = final or (self.every > 0 and position % self.every == 0)
        if due:
            self.save(position, **extra)
        return due

    def restore(self) -> tuple[int, dict[str, Any]]:
        """Load the saved states into the objects; returns ``(position, extra)``, or
        ``(0, {})`` when there is no checkpoint yet."""
        if not self.path.exists():
            return 0, {}
        state = torch.load(self.path, weights_only=False)
        missing = set(self.objects) - set(state["objects"])
        if missing:
            raise ValueError(f"checkpoint {str(self.path)!r} has no state for {sorted(missing)}")
        for name, obj in self.objects.items():
            saved = state["objects"][name]
            if isinstance(obj, torch.Generator):
                obj.set_state(saved)
            else:
                obj.load_state_dict(saved)
        torch.set_rng_state(state["torch_rng"])
        return int(state["position"]), dict(state["extra"])
