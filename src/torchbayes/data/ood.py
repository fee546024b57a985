"""Out-of-distribution image sets for a classifier trained on MNIST or Fashion-MNIST.

Park et al. (2018) test an MNIST classifier on notMNIST letters. What is used here, first
found first:

* trained on MNIST: notMNIST test letters (``$TORCHBAYES_DATA/notmnist/`` holding
  ``t10k-images-idx3-ubyte.gz`` in the idx format of the notMNIST-to-MNIST conversion), else
  the Fashion-MNIST test set;
* trained on Fashion-MNIST: the MNIST test set, else notMNIST, else the UCI handwritten
  digits that ship with scikit-learn (1,797 8 × 8 images, scaled to a 20 × 20 box centred
  in 28 × 28 as MNIST's digits are) — real handwriting, just at lower resolution.

notMNIST has no canonical checksummed idx release, so it is read when present, never fetched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._files import data_root
from .images import _available, load_images, read_idx, resolve_image_dataset

__all__ = ["digits_as_mnist", "load_ood_images"]

_NOTMNIST = "notmnist/t10k-images-idx3-ubyte.gz"


def digits_as_mnist() -> Tensor:
    """scikit-learn's 8 × 8 digits as (1797, 1, 28, 28) images in [0, 1], MNIST-style framing."""
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().images, dtype=torch.float32).div_(16.0).unsqueeze(1)
    box = F.interpolate(images, size=(20, 20), mode="bilinear", align_corners=False)
    return F.pad(box.clamp_(0.0, 1.0), (4, 4, 4, 4))


def _notmnist() -> Tensor | None:
    path = data_root() / _NOTMNIST
    if not path.is_file():
        return None
    return read_idx(path).unsqueeze(1).float().div_(255.0)


def load_ood_images(in_distribution: str) -> tuple[str, Tensor]:
    """(name, images) of the out-of-distribution set for a model trained on
    ``in_distribution`` ("mnist", "fashion-mnist" or "auto"); images (N, 1, 28, 28)."""
    trained_on = resolve_image_dataset(in_distribution)
    letters = _notmnist()
    if trained_on == "mnist":
        if letters is not None:
            return "notmnist", letters
        return "fashion-mnist", load_images("fashion-mnist").test_images
    if _available("mnist"):
        return "mnist", load_images("mnist").test_images
    if letters is not None:
        return "notmnist", letters
    return "sklearn-digits", digits_as_mnist()
