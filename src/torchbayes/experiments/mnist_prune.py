"""Signal-to-noise pruning of a Bayes-by-Backprop MNIST net — Blundell Table 2, Graves' λ table.

The ``bbb-mixture`` (and, with ``--set methods=…``, any BBB) network of
:mod:`torchbayes.experiments.mnist_bbb` is trained as there and pruned: test error after
removing 0–98 % of the weights by |μ|/σ and after removing every weight under λ, with the
pruned network stored as CSR matrices and the bits per kept weight. Same outputs as mnist-bbb.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._result import Result
from .mnist_bbb import Config as _BBBConfig
from .mnist_bbb import run as _run_bbb

DISTRIBUTED = True  # under torchrun: data-parallel (mnist_vd.Trainer), rank 0 writes


@dataclass
class Config(_BBBConfig):
    """mnist-bbb's settings, training only the scale-mixture BBB net at 2×400 by default."""

    methods: tuple[str, ...] = ("bbb-mixture",)
    hidden_sizes: tuple[int, ...] = (400,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not any(m.startswith("bbb") for m in self.methods):
            raise ValueError(f"methods must include a bbb method to prune, got {self.methods!r}")


def run(config: Config, out: str | Path) -> Result:
    return _run_bbb(config, out, name="mnist-prune")
