"""Per-step training time of each Bayesian-layer estimator vs the plain network, one run.

784-400-400-10 ReLU MLP, batch 128, Adam, N(0, 1) prior (closed-form KL), random
MNIST-shaped data, CPU. Every estimator trains the same network; the table gives median
ms/step and the ratio to the deterministic network, timed in interleaved rounds.

    python benchmarks/estimators.py [--steps 200] [--rounds 5] [--threads 2] [--fused-adam]
                                    [--json out.json]
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import benchmark_args, interleaved_medians

from torchbayes import FreeEnergy
from torchbayes.models import mlp
from torchbayes.nn import to_bayesian
from torchbayes.nn.layers import ESTIMATORS
from torchbayes.priors import Gaussian

NUM_DATA, BATCH = 60_000, 128


def step_fn(
    x: torch.Tensor, y: torch.Tensor, estimator: str | None, fused: bool = False
) -> Callable[[], None]:
    """One Adam step of the plain MLP (``None``) or its Bayesian twin with ``estimator``."""
    net = mlp(784, [400, 400], 10)
    if estimator is not None:
        net = to_bayesian(net, prior=Gaussian(0.0, 1.0), estimator=estimator)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=fused)
    free_energy = FreeEnergy(NUM_DATA, NUM_DATA // BATCH)
    counter = iter(range(10**9))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        error = F.cross_entropy(net(x), y)
        loss = error if estimator is None else free_energy(net, error, next(counter)).loss
        loss.backward()
        opt.step()

    return step


def main() -> None:
    flags = {"fused-adam": "Adam(fused=True) for every variant (one kernel per step)"}
    args = benchmark_args(__doc__.splitlines()[0], default_steps=200, flags=flags)
    x, y = torch.randn(BATCH, 784), torch.randint(10, (BATCH,))
    variants = {"plain": step_fn(x, y, None, args.fused_adam)}
    variants.update({name: step_fn(x, y, name, args.fused_adam) for name in ESTIMATORS})
    medians = interleaved_medians(variants, args.steps, args.rounds)
    plain = medians["plain"]
    print(f"{'estimator':<16} {'ms/step':>8} {'x plain':>8}")
    for name, ms in medians.items():
        print(f"{name:<16} {ms:>8.2f} {ms / plain:>8.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"ms_per_step": medians, "args": vars(args)}, handle, indent=2)


if __name__ == "__main__":
    main()
