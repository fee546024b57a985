"""Per-step time of each SG-MCMC sampler vs its optimizer twin, one run.

784-400-400-10 ReLU MLP, batch 128, random MNIST-shaped data, CPU, N = 60,000. Each pair
(sampler, twin) is timed in interleaved rounds; the table gives median ms/step and the
sampler/twin ratio. Twins use the foreach implementation too, so the ratio isolates what the
sampler adds (noise, thermostat), not a different code path.

    python benchmarks/sampler_overhead.py [--steps 300] [--rounds 5] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import benchmark_args, interleaved_medians

from torchbayes.models import mlp
from torchbayes.samplers import PSGLD, SGHMC, SGLD, SGNHT

NUM_DATA, BATCH = 60_000, 128

PAIRS: dict[str, tuple[Callable, Callable]] = {
    "SGLD vs SGD": (
        lambda p: SGLD(p, lr=0.1, num_data=NUM_DATA, weight_decay=1.0),
        lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=1.0 / NUM_DATA, foreach=True),
    ),
    "pSGLD vs RMSprop": (
        lambda p: PSGLD(p, lr=1e-3, num_data=NUM_DATA, weight_decay=1.0),
        lambda p: torch.optim.RMSprop(
            p, lr=1e-3, alpha=0.99, eps=1e-8, weight_decay=1.0 / NUM_DATA, foreach=True
        ),
    ),
    "SGHMC vs SGD+momentum": (
        lambda p: SGHMC(p, lr=0.1, num_data=NUM_DATA, momentum=0.9, weight_decay=1.0),
        lambda p: torch.optim.SGD(
            p, lr=0.1, momentum=0.9, weight_decay=1.0 / NUM_DATA, foreach=True
        ),
    ),
    "SGNHT vs SGD+momentum": (
        lambda p: SGNHT(p, lr=0.1, num_data=NUM_DATA, diffusion=0.1, weight_decay=1.0),
        lambda p: torch.optim.SGD(
            p, lr=0.1, momentum=0.9, weight_decay=1.0 / NUM_DATA, foreach=True
        ),
    ),
}


def step_fn(make_optimizer, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    net = mlp(784, [400, 400], 10)
    opt = make_optimizer(net.parameters())

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def main() -> None:
    args = benchmark_args(__doc__.splitlines()[0], default_steps=300)
    torch.manual_seed(0)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    results = {}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    print(f"| {'pair':<24} | {'sampler ms':>10} | {'twin ms':>8} | {'ratio':>6} |")
    print(f"|{'-' * 26}|{'-' * 12}|{'-' * 10}|{'-' * 8}|")
    for name, (make_sampler, make_twin) in PAIRS.items():
        pair = {"sampler": step_fn(make_sampler, x, y), "twin": step_fn(make_twin, x, y)}
        medians = interleaved_medians(pair, args.steps, args.rounds)
        s_ms, t_ms = medians["sampler"], medians["twin"]
        results[name] = {"sampler_ms": s_ms, "twin_ms": t_ms, "ratio": s_ms / t_ms}
        print(f"| {name:<24} | {s_ms:10.2f} | {t_ms:8.2f} | {s_ms / t_ms:6.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
