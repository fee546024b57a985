"""Reference networks used by the experiments and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from . import _checks

__all__ = ["mlp"]


def mlp(
    in_features: int,
    hidden: Sequence[int],
    out_features: int,
    activation: type[nn.Module] = nn.ReLU,
    dropout: float = 0.0,
) -> nn.Sequential:
    """A fully connected network ``in → hidden[0] → … → out`` with ``activation`` between.

    ``dropout`` > 0 inserts ``nn.Dropout`` after each hidden activation.
    """
    _checks.at_least("in_features", in_features, 1)
    _checks.at_least("out_features", out_features, 1)
    for width in hidden:
        _checks.at_least("hidden", width, 1)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got dropout={dropout!r}")
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), activation()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)
