"""Per-step training time of a Bayes-by-Backprop MLP vs the same plain MLP, one run.

784-400-400-10 ReLU network, batch 128, Adam (lr 1e-3), random MNIST-shaped data, CPU.
Each variant runs warm-up steps then timed steps, interleaved in rounds so that machine
noise hits all variants alike; the table reports the median ms/step and the ratio to plain.

    python benchmarks/step_overhead.py [--steps 200] [--rounds 5] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from torchbayes import FreeEnergy
from torchbayes.models import mlp
from torchbayes.nn import to_bayesian
from torchbayes.priors import Gaussian, ScaleMixture

NUM_DATA, BATCH = 60_000, 128


def plain_step_fn(x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    net = mlp(784, [400, 400], 10)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def bbb_step_fn(x: torch.Tensor, y: torch.Tensor, prior) -> Callable[[], None]:
    net = to_bayesian(mlp(784, [400, 400], 10), prior=prior)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    free_energy = FreeEnergy(NUM_DATA, NUM_DATA // BATCH)
    counter = iter(range(10**9))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        free_energy(net, F.cross_entropy(net(x), y), next(counter)).loss.backward()
        opt.step()

    return step


def time_steps(step: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    variants = {
        "plain MLP": plain_step_fn(x, y),
        "BBB, Gaussian prior (closed-form KL)": bbb_step_fn(x, y, Gaussian(0.0, 1.0)),
        "BBB, scale-mixture prior (MC KL)": bbb_step_fn(x, y, ScaleMixture(0.5, 1.0, 2.0**-6)),
    }
    for step in variants.values():
        time_steps(step, 20)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, step in variants.items():
            times[name].append(time_steps(step, args.steps // args.rounds))
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["plain MLP"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    print(f"{'variant':<40} {'ms/step':>8} {'ratio':>6}")
    for name, ms in median.items():
        print(f"{name:<40} {ms:8.2f} {ms / base:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ms_per_step": median, "ratio": {k: v / base for k, v in median.items()}}, f)


if __name__ == "__main__":
    main()
