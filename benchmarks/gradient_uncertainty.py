"""Per-step time of the gradient-uncertainty sampler vs plain SGD, one run.

Two networks — the five-layer CNN of the OOD experiment and the 784-400-400-10 ReLU MLP —
batch 100, random MNIST-shaped data, CPU. Each step computes the mean-loss gradient and the
per-example squared gradient norms by one of three paths (ghost norms, torch.func vmap(grad),
a naive per-example loop), then takes a :class:`GradientUncertainty` step (adaptive
threshold, so some steps add noise). The baseline is ``torch.optim.SGD`` on the same
network. SGD and the ghost path are timed in interleaved rounds; vmap and the loop, which
allocate m gradient copies or run m backward passes, are timed after them on their own (run
in the same rounds they perturbed the allocator and slowed the ghost path by up to a third).
The table gives median ms/step and the ratio to SGD.

    python benchmarks/gradient_uncertainty.py [--steps 60] [--rounds 3] [--threads 2] [--json f]
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import benchmark_args, interleaved_medians

from torchbayes.models import five_layer_cnn, mlp
from torchbayes.per_example import PerExampleGradNorms
from torchbayes.samplers import GradientUncertainty

NUM_DATA, BATCH = 60_000, 100

NETWORKS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "five-layer CNN": (five_layer_cnn, (BATCH, 1, 28, 28)),
    "784-400-400-10 MLP": (lambda: mlp(784, [400, 400], 10), (BATCH, 784)),
}


def sgd_step(make_net, x, y) -> Callable[[], None]:
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, weight_decay=1.0 / NUM_DATA, foreach=True)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def sampler_step(make_net, x, y, method: str) -> Callable[[], None]:
    net = make_net()
    norms = PerExampleGradNorms(net, method=method)
    opt = GradientUncertainty(
        net.parameters(),
        lr=0.05,
        num_data=NUM_DATA,
        noise_std=0.01,
        quantile=0.2,
        window=10,
        weight_decay=1.0,
    )

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        _, sq_norms = norms(x, y)
        opt.step(sq_norms=sq_norms)

    return step


def main() -> None:
    args = benchmark_args(__doc__.splitlines()[0], default_steps=60)
    torch.manual_seed(0)
    results: dict[str, dict[str, float]] = {}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    print(f"| {'network':<20} | {'path':<6} | {'ms/step':>8} | {'× SGD':>6} |")
    print(f"|{'-' * 22}|{'-' * 8}|{'-' * 10}|{'-' * 8}|")
    for name, (make_net, shape) in NETWORKS.items():
        x, y = torch.randn(shape), torch.randint(0, 10, (BATCH,))
        pair = {"sgd": sgd_step(make_net, x, y), "ghost": sampler_step(make_net, x, y, "ghost")}
        medians = interleaved_medians(pair, args.steps, args.rounds, warmup=5)
        # vmap's m gradient copies (~140 MB here) churn the allocator; timed apart from the pair
        vmap = {"vmap": sampler_step(make_net, x, y, "vmap")}
        medians.update(interleaved_medians(vmap, max(3, args.steps // 4), 1, warmup=2))
        loop = {"loop": sampler_step(make_net, x, y, "loop")}
        medians.update(interleaved_medians(loop, max(2, args.steps // 20), 1, warmup=1))
        results[name] = {
            **{f"{k}_ms": v for k, v in medians.items()},
            **{f"{k}_ratio": v / medians["sgd"] for k, v in medians.items() if k != "sgd"},
        }
        for path, ms in medians.items():
            print(f"| {name:<20} | {path:<6} | {ms:8.2f} | {ms / medians['sgd']:6.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
