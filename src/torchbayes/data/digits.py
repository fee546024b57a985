"""The UCI optical-digits set as shipped inside scikit-learn (1,797 8×8 images, 10 classes).

It needs no download (the file is part of the scikit-learn wheel), which makes it the
classification set the SG-MCMC experiment uses until MNIST is available offline.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _checks


def load_digits(
    test_fraction: float = 0.25, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_train, y_train, x_test, y_test): pixels scaled to [0, 1], a stratified split.

    Raises ``ImportError`` naming the package when scikit-learn is missing.
    """
    _checks.below_one("test_fraction", test_fraction, zero_allowed=False)
    _checks.at_least("seed", seed, 0)
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digits data set ships with scikit-learn: pip install scikit-learn"
        ) from err
    bunch = sklearn_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    train, test = [], []
    for label in range(10):  # stratified: the same fraction of every class in the test set
        idx = (y == label).nonzero().squeeze(-1)
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_test = round(test_fraction * len(idx))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    tr, te = torch.cat(train), torch.cat(test)
    return x[tr], y[tr], x[te], y[te]
