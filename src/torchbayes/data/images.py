"""MNIST (LeCun et al. 1998) and Fashion-MNIST (Xiao et al. 2017) from their idx files.

Both are 60,000 training and 10,000 test images of 28 × 28 unsigned bytes in 10 classes,
stored as the four gzipped idx files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` under
``$TORCHBAYES_DATA/<name>/`` (Fashion-MNIST also where Debian's ``dataset-fashion-mnist``
puts it). Checksums are of the decompressed idx bytes, so any gzip of the same data verifies.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .. import _checks
from ._files import data_root, fetch

__all__ = ["IMAGE_DATASETS", "ImageData", "load_images", "resolve_image_dataset"]


@dataclass(frozen=True)
class _Source:
    url: str
    sha256: dict[str, str]  # of the decompressed idx files, by part (see _FILES)
    also_in: tuple[str, ...] = ()


_MNIST = _Source(
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    {
        "train-images": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    },
)
_FASHION = _Source(
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    {
        "train-images": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
    also_in=("/usr/share/datasets/fashion-mnist",),
)
_FILES = {
    "train-images": "train-images-idx3-ubyte.gz",
    "train-labels": "train-labels-idx1-ubyte.gz",
    "t10k-images": "t10k-images-idx3-ubyte.gz",
    "t10k-labels": "t10k-labels-idx1-ubyte.gz",
}
_SOURCES = {"mnist": _MNIST, "fashion-mnist": _FASHION}
IMAGE_DATASETS: tuple[str, ...] = ("auto", *_SOURCES)
_IDX_DTYPE = {0x08: torch.uint8}


@dataclass
class ImageData:
    """``train_images``/``test_images`` float32 (N, 1, 28, 28) in [0, 1]; labels int64."""

    name: str
    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor

    @property
    def num_classes(self) -> int:
        return int(self.train_labels.max()) + 1


def read_idx(path: Path) -> Tensor:
    """One gzipped idx file (magic 0 0 dtype ndim, big-endian int32 sizes, then the data)."""
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPE:
        raise ValueError(f"{path} is not an unsigned-byte idx file")
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    start = 4 + 4 * ndim
    data = torch.frombuffer(bytearray(raw[start:]), dtype=_IDX_DTYPE[raw[2]])
    if data.numel() != torch.Size(shape).numel():
        raise ValueError(f"{path}: header says shape {shape} but holds {data.numel()} values")
    return data.reshape(shape)


def _available(name: str) -> bool:
    source = _SOURCES[name]
    folders = [data_root() / name, *map(Path, source.also_in)]
    return any((folder / _FILES["train-images"]).is_file() for folder in folders)


def resolve_image_dataset(name: str) -> str:
    """``"auto"`` → MNIST when its files are in place, else Fashion-MNIST when they are,
    else MNIST (to be downloaded); other names are returned checked."""
    _checks.one_of("dataset", name, IMAGE_DATASETS)
    if name != "auto":
        return name
    if _available("mnist") or not _available("fashion-mnist"):
        return "mnist"
    return "fashion-mnist"


def load_images(name: str = "auto", download: bool = True) -> ImageData:
    """MNIST or Fashion-MNIST (``name``: "mnist", "fashion-mnist" or "auto", see
    :func:`resolve_image_dataset`), checksummed, downloaded when absent and allowed."""
    name = resolve_image_dataset(name)
    source = _SOURCES[name]
    tensors = {}
    for part, sha256 in source.sha256.items():
        file = _FILES[part]
        path = fetch(
            f"{name}/{file}",
            source.url + file,
            sha256,
            download=download,
            also_in=source.also_in,
            decompressed=True,
        )
        tensors[part] = read_idx(path)

    def images(key: str) -> Tensor:
        return tensors[key].unsqueeze(1).float().div_(255.0)

    return ImageData(
        name,
        images("train-images"),
        tensors["train-labels"].long(),
        images("t10k-images"),
        tensors["t10k-labels"].long(),
    )
