"""UCI Mushroom (Schlimmer 1987): 8,124 mushrooms, 22 categorical attributes, edible or not.

The context of Blundell et al.'s (2015, §5.3) bandit: each attribute one-hot encoded over the
values that occur in the data (117 columns; a missing ``stalk-root`` is its own value "?").
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import torch
from torch import Tensor

from ._files import fetch

__all__ = ["ATTRIBUTES", "Mushroom", "load_mushroom"]

URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/mushroom/agaricus-lepiota.data"
SHA256 = "e65d082030501a3ebcbcd7c9f7c71aa9d28fdfff463bf4cf4716a3fe13ac360e"
ATTRIBUTES: tuple[str, ...] = (
    "cap-shape", "cap-surface", "cap-color", "bruises", "odor", "gill-attachment",
    "gill-spacing", "gill-size", "gill-color", "stalk-shape", "stalk-root",
    "stalk-surface-above-ring", "stalk-surface-below-ring", "stalk-color-above-ring",
    "stalk-color-below-ring", "veil-type", "veil-color", "ring-number", "ring-type",
    "spore-print-color", "population", "habitat",
)  # fmt: skip


@dataclass
class Mushroom:
    """``contexts`` (float32, one-hot, rows sum to 22), ``edible`` (bool), column names."""

    contexts: Tensor
    edible: Tensor
    features: list[str]


def load_mushroom(download: bool = True) -> Mushroom:
    """Read ``mushroom/agaricus-lepiota.data`` under ``$TORCHBAYES_DATA`` (downloaded if absent)."""
    path = fetch("mushroom/agaricus-lepiota.data", URL, SHA256, download=download)
    with open(path, newline="") as handle:
        rows = [row for row in csv.reader(handle) if row]
    if any(len(row) != len(ATTRIBUTES) + 1 for row in rows):
        raise ValueError(f"{path}: expected {len(ATTRIBUTES) + 1} comma-separated fields per row")
    edible = torch.tensor([row[0] == "e" for row in rows])
    columns: list[Tensor] = []
    features: list[str] = []
    for j, name in enumerate(ATTRIBUTES, start=1):
        values = sorted({row[j] for row in rows})
        code = {v: i for i, v in enumerate(values)}
        index = torch.tensor([code[row[j]] for row in rows])
        columns.append(torch.nn.functional.one_hot(index, len(values)))
        features += [f"{name}={v}" for v in values]
    return Mushroom(torch.cat(columns, dim=1).float(), edible, features)
