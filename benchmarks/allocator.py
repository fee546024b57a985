"""Per-step time and page faults with glibc's default allocator vs ``keep_freed_memory``.

Each (variant, allocator) pair trains alone in a fresh process, as a real run does: one
process's earlier frees move glibc's dynamic mmap threshold, so an in-process comparison
would measure the history, not the setting. 784-400-400-10 ReLU MLP, batch 128, Adam,
N(0, 1) prior; the variants are the plain network and the estimators of
``benchmarks/estimators.py``. Median ms/step over rounds, minor page faults per step.

    python benchmarks/allocator.py [--steps 200] [--rounds 5] [--repeats 2] [--threads 2]
                                   [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch
from estimators import step_fn

from torchbayes.runtime import keep_freed_memory

VARIANTS = ("plain", "reparameterize", "local", "mean")
ALLOCATORS = ("glibc", "kept")


def child(variant: str, allocator: str, steps: int, rounds: int) -> dict[str, float]:
    """Train ``variant`` in this process; median ms/step and minor faults per step."""
    if allocator == "kept" and not keep_freed_memory():
        raise RuntimeError("keep_freed_memory() did not apply (not glibc?)")
    x, y = torch.randn(128, 784), torch.randint(10, (128,))
    step = step_fn(x, y, None if variant == "plain" else variant)
    for _ in range(30):
        step()
    per_round = max(1, steps // rounds)
    times, faults = [], 0
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(per_round):
            step()
        times.append((time.perf_counter() - start) / per_round * 1e3)
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return {"ms": statistics.median(times), "faults": faults / (rounds * per_round)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "ALLOCATOR"), default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(child(*args.child, args.steps, args.rounds)))
        return
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        v: {a: [] for a in ALLOCATORS} for v in VARIANTS
    }
    for _ in range(args.repeats):  # alternate so machine load hits both settings alike
        for variant in VARIANTS:
            for allocator in ALLOCATORS:
                command = [sys.executable, __file__, "--child", variant, allocator]
                command += ["--steps", str(args.steps), "--rounds", str(args.rounds)]
                command += ["--threads", str(args.threads)]
                out = subprocess.run(command, check=True, capture_output=True, text=True)
                results[variant][allocator].append(json.loads(out.stdout.splitlines()[-1]))
    print("| variant | glibc ms/step | faults/step | kept ms/step | faults/step | speed-up |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for variant, runs in results.items():
        row = {
            a: {k: statistics.median(r[k] for r in runs[a]) for k in ("ms", "faults")}
            for a in ALLOCATORS
        }
        summary[variant] = row
        g, k = row["glibc"], row["kept"]
        print(
            f"| {variant} | {g['ms']:.2f} | {g['faults']:.0f} | {k['ms']:.2f} | "
            f"{k['faults']:.0f} | {g['ms'] / k['ms']:.2f}× |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"median": summary, "runs": results, "args": vars(args)}, handle, indent=2)


if __name__ == "__main__":
    main()
