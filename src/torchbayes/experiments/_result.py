"""What every experiment returns and writes: config, metrics, timings, version → JSON + markdown."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import _checks
from ..checkpoint import Checkpoint
from ..distributed import is_leader, world_size


def library_versions() -> dict[str, str]:
    """Library, torch and Python versions and the thread count, recorded with every result."""
    from .. import __version__

    return {
        "torchbayes": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": str(torch.get_num_threads()),
        "processes": str(world_size()),  # > 1 under torchrun
    }


@dataclass
class Resumable:
    """Config fields of the experiments that checkpoint (subclass it; call
    ``super().__post_init__()``)."""

    checkpoint_every: int = 1  # epochs (mushroom: interactions, regression: steps); 0: the end
    resume: bool = False  # continue from OUT/checkpoints instead of starting afresh
    keep_checkpoints: bool = False  # keep OUT/checkpoints (states, samples) after the run

    def __post_init__(self) -> None:
        _checks.at_least("checkpoint_every", self.checkpoint_every, 0)

    def checkpoint(
        self, path: Path | None, objects: Mapping[str, Any]
    ) -> tuple[Checkpoint | None, int, dict[str, Any]]:
        """A :class:`Checkpoint` of ``objects`` (``None`` values left out) at ``path``, saving
        every ``checkpoint_every``, restored when ``resume``. Returns ``(saver, position,
        extra)``; ``(None, 0, {})`` when ``path`` is ``None`` (no checkpointing)."""
        if path is None:
            return None, 0, {}
        kept = {name: obj for name, obj in objects.items() if obj is not None}
        saver = Checkpoint(path, kept, self.checkpoint_every)
        position, extra = saver.restore() if self.resume else (0, {})
        return saver, position, extra


@dataclass
class Result:
    """An experiment's outcome. ``files`` maps a short label to a path written under ``out``."""

    name: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    timings: dict[str, float]
    report: str = ""
    files: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=library_versions)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MIN_FREE_BYTES = 64 * 2**20  # below this a run would die at its first checkpoint or plot
_PROBE_BYTES = 2**20


def prepare_output(out: str | os.PathLike, min_free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Create ``out`` and prove it is writable before any training starts: a 1 MiB probe file
    must be written and flushed (an empty file can be created on a full disk), and the file
    system must have ``min_free_bytes`` free. Under torchrun only rank 0 checks (and writes)."""
    path = Path(out)
    if not is_leader():
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-") as probe:
            probe.write(bytes(_PROBE_BYTES))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as err:
        raise OSError(f"output folder {str(path)!r} is not writable: {err}") from err
    free = shutil.disk_usage(path).free
    if free < min_free_bytes:
        raise OSError(
            f"output folder {str(path)!r} is on a disk with {free / 2**20:.1f} MiB free; "
            f"a run needs at least {min_free_bytes / 2**20:.0f} MiB for checkpoints and results"
        )
    return path


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_result(result: Result, out: Path, keep_checkpoints: bool = True) -> None:
    """Write ``result.json`` and ``report.md`` into ``out`` (atomically, temp file + rename);
    then, unless ``keep_checkpoints``, delete ``out/checkpoints`` — a finished run has nothing
    to resume. A no-op on every rank but 0 under torchrun."""
    if not is_leader():
        return
    result.files.setdefault("json", str(out / "result.json"))
    result.files.setdefault("report", str(out / "report.md"))
    atomic_write(out / "result.json", json.dumps(result.to_json(), indent=2) + "\n")
    atomic_write(out / "report.md", result.report)
    if not keep_checkpoints:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
