"""Timing helpers shared by the benchmark scripts (each script still runs on its own)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from torchbayes.runtime import keep_freed_memory


def time_steps(step: Callable[[], None], steps: int) -> float:
    """Mean milliseconds per call of ``step`` over ``steps`` calls."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def interleaved_medians(
    variants: dict[str, Callable[[], None]], steps: int, rounds: int, warmup: int = 20
) -> dict[str, float]:
    """Median ms/step of each variant, timed in interleaved rounds so load hits all alike."""
    for step in variants.values():
        time_steps(step, warmup)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            times[name].append(time_steps(step, max(1, steps // rounds)))
    return {name: statistics.median(t) for name, t in times.items()}


def benchmark_args(
    description: str, default_steps: int, flags: dict[str, str] | None = None
) -> argparse.Namespace:
    """--steps/--rounds/--threads/--json/--glibc-malloc plus boolean ``flags`` (name → help);
    applies the thread count and, unless --glibc-malloc, :func:`keep_freed_memory` (as the CLI
    does), and prints which allocator setting the run used."""
    parser = argparse.ArgumentParser(description=description)
    for name, text in (flags or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument(
        "--glibc-malloc",
        action="store_true",
        help="keep glibc's default mmap/trim thresholds (freed large blocks are unmapped)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.kept_freed_memory = apply_allocator(args.glibc_malloc)
    return args


def apply_allocator(glibc_malloc: bool) -> bool:
    """:func:`keep_freed_memory` unless ``glibc_malloc``; prints which setting the run uses."""
    kept = False if glibc_malloc else keep_freed_memory()
    print(f"allocator: {'freed memory kept' if kept else 'glibc default'}")
    return kept
