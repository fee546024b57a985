"""Where data files live, and fetching them with a checksum.

Files are looked up under ``$TORCHBAYES_DATA`` (default ``~/.cache/torchbayes``), then in
any system folders a loader names. A file that is missing is downloaded from its canonical
URL into ``$TORCHBAYES_DATA`` when ``download=True`` and the machine is online; every file,
found or downloaded, must match its SHA-256 before it is used. For gzipped files the digest
may be of the decompressed bytes, so a repackaged archive (e.g. Debian's) still verifies.
"""

from __future__ import annotations

import gzip
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


def sha256_of(path: Path, decompressed: bool = False) -> str:
    """SHA-256 of the file's bytes, or of its gunzipped bytes when ``decompressed``."""
    digest = hashlib.sha256()
    with (gzip.open if decompressed else open)(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check(path: Path, sha256: str, decompressed: bool = False) -> Path:
    """``sha256`` is a hex SHA-256, or ``"md5:<hex>"`` where only an MD5 is published."""
    algorithm = "md5" if sha256.startswith("md5:") else "sha256"
    try:
        if algorithm == "md5":
            actual = "md5:" + hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
        else:
            actual = sha256_of(path, decompressed)
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"data file {path} cannot be read ({err}); delete it") from err
    if actual != sha256:
        what = "MD5" if algorithm == "md5" else "SHA-256"
        what = f"decompressed {what}" if decompressed else what
        raise ValueError(
            f"data file {path} fails its checksum: {what} {actual}, expected {sha256}; "
            "delete it to download it again"
        )
    return path


def fetch(
    relative: str,
    url: str,
    sha256: str | None,
    *,
    download: bool = True,
    also_in: tuple[str | Path, ...] = (),
    decompressed: bool = False,
) -> Path:
    """The verified local path of ``relative``, downloading it if needed.

    Looks under :func:`data_root`, then in each folder of ``also_in`` (by file name). With
    ``decompressed`` the SHA-256 is of the gunzipped content. ``sha256=None`` leaves the check
    to the caller, for sets of small files verified by one joint digest. Raises
    ``FileNotFoundError`` naming the file, where it was looked for and the URL when it is
    missing and cannot be downloaded; ``ValueError`` when its checksum does not match.
    """
    path = data_root() / relative
    candidates = [path, *(Path(folder) / Path(relative).name for folder in also_in)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate if sha256 is None else _check(candidate, sha256, decompressed)
    if download:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            partial = Path(tmp.name)
        try:
            urllib.request.urlretrieve(url, partial)
            if sha256 is not None:
                _check(partial, sha256, decompressed)
            partial.replace(path)
            return path
        except OSError as err:
            reason = f"downloading {url} failed ({err})"
        finally:
            partial.unlink(missing_ok=True)
    else:
        reason = "download=False"
    where = " or ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"data file {relative!r} not found at {where} ({reason}); set {ENV_VAR} to the folder "
        f"holding it or download it from {url}"
    )
