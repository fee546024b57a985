"""Where data files live, and fetching them with a checksum.

Files are looked up under ``$TORCHBAYES_DATA`` (default ``~/.cache/torchbayes``). A file that
is missing is downloaded from its canonical URL when ``download=True`` and the machine is
online; every file, found or downloaded, must match its SHA-256 before it is used.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path

__all__ = ["data_root", "fetch", "sha256_of"]

ENV_VAR = "TORCHBAYES_DATA"


def data_root() -> Path:
    """``$TORCHBAYES_DATA`` if set, else ``~/.cache/torchbayes``."""
    root = os.environ.get(ENV_VAR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "torchbayes"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check(path: Path, sha256: str) -> Path:
    actual = sha256_of(path)
    if actual != sha256:
        raise ValueError(
            f"data file {path} fails its checksum: SHA-256 {actual}, expected {sha256}; "
            "delete it to download it again"
        )
    return path


def fetch(relative: str, url: str, sha256: str, *, download: bool = True) -> Path:
    """The verified local path of ``relative`` under :func:`data_root`, downloading if needed.

    Raises ``FileNotFoundError`` naming the file, where it was looked for and the URL when it
    is missing and cannot be downloaded; ``ValueError`` when its checksum does not match.
    """
    path = data_root() / relative
    if path.is_file():
        return _check(path, sha256)
    if download:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            partial = Path(tmp.name)
        try:
            urllib.request.urlretrieve(url, partial)
            _check(partial, sha256)
            partial.replace(path)
            return path
        except OSError as err:
            reason = f"downloading {url} failed ({err})"
        finally:
            partial.unlink(missing_ok=True)
    else:
        reason = "download=False"
    raise FileNotFoundError(
        f"data file {relative!r} not found at {path} ({reason}); set {ENV_VAR} to the folder "
        f"holding it or download it from {url}"
    )
