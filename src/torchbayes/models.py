"""Reference networks used by the experiments and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from . import _checks

__all__ = ["five_layer_cnn", "mlp"]


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


def five_layer_cnn(
    channels: tuple[int, int] = (32, 64),
    hidden: tuple[int, int] = (256, 128),
    num_classes: int = 10,
    image_size: int = 28,
) -> nn.Sequential:
    """The five-layer CNN of the OOD experiment (Park et al. 2018): two 5 × 5 convolutions with
    ReLU and 2 × 2 max-pooling, then three fully connected layers.

    28 × 28 → conv 24 → pool 12 → conv 8 → pool 4, so the first dense layer sees
    ``channels[1]·4·4`` features.
    """
    for c in (*channels, *hidden):
        _checks.at_least("width", c, 1)
    _checks.at_least("num_classes", num_classes, 2)
    side = ((image_size - 4) // 2 - 4) // 2
    if side < 1:
        raise ValueError(f"image_size must be at least 16, got image_size={image_size!r}")
    return nn.Sequential(
        nn.Conv2d(1, channels[0], 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels[0], channels[1], 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(channels[1] * side * side, hidden[0]),
        nn.ReLU(),
        nn.Linear(hidden[0], hidden[1]),
        nn.ReLU(),
        nn.Linear(hidden[1], num_classes),
    )
