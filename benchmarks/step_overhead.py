"""Per-step training time of a Bayes-by-Backprop MLP vs the same plain MLP, one run.

784-400-400-10 ReLU network, batch 128, Adam (lr 1e-3), random MNIST-shaped data, CPU.
Each variant runs warm-up steps then timed steps, interleaved in rounds so that machine
noise hits all variants alike; the table reports the median ms/step and the ratio to plain.

Peers are timed in the same run when installed — their wheels pin no torch we need, so
install them without dependencies to keep the CPU build:

    pip install --no-deps bayesian-torch blitz-bayesian-pytorch torchbnn
    python benchmarks/step_overhead.py [--steps 300] [--rounds 5] [--threads 2] [--json out.json]

Each peer runs its own Bayes-by-Backprop linear layer with its defaults for the prior and
KL: bayesian-torch (Gaussian prior, closed-form KL), torchbnn (Gaussian prior, closed-form
KL), blitz (scale-mixture prior, Monte Carlo KL).
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


def _peer_step_fn(layers, kl_fn, x, y) -> Callable[[], None]:
    net = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = net(x)
        out = out[0] if isinstance(out, tuple) else out
        (F.cross_entropy(out, y) + kl_fn(net) / NUM_DATA).backward()
        opt.step()

    return step


def peer_variants(x: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], None]]:
    """Bayes-by-Backprop MLPs from the peer libraries that are installed."""
    sizes = [(784, 400), (400, 400), (400, 10)]
    variants: dict[str, Callable[[], None]] = {}
    try:
        from bayesian_torch.layers import LinearReparameterization

        class _NoKL(LinearReparameterization):
            def forward(self, inputs):  # the Sequential wants a tensor; KL comes from kl_loss()
                return super().forward(inputs, return_kl=False)

        layers = [_NoKL(i, o, prior_variance=1.0) for i, o in sizes]
        kl = lambda net: sum(m.kl_loss() for m in net if isinstance(m, _NoKL))  # noqa: E731
        variants["peer: bayesian-torch 0.5"] = _peer_step_fn(layers, kl, x, y)
    except ImportError:
        pass
    try:
        import torchbnn

        layers = [torchbnn.BayesLinear(0.0, 1.0, i, o) for i, o in sizes]
        kl_loss = torchbnn.BKLLoss(reduction="sum", last_layer_only=False)
        variants["peer: torchbnn 1.2"] = _peer_step_fn(layers, kl_loss, x, y)
    except ImportError:
        pass
    try:
        from blitz.modules import BayesianLinear

        layers = [BayesianLinear(i, o) for i, o in sizes]

        def blitz_kl(net):
            return sum(
                m.log_variational_posterior - m.log_prior
                for m in net
                if isinstance(m, BayesianLinear)
            )

        variants["peer: blitz 0.2.8 (MC KL)"] = _peer_step_fn(layers, blitz_kl, x, y)
    except ImportError:
        pass
    return variants


def main() -> None:
    args = benchmark_args(__doc__.splitlines()[0], default_steps=200)
    torch.manual_seed(0)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    variants = {
        "plain MLP": plain_step_fn(x, y),
        "BBB, Gaussian prior (closed-form KL)": bbb_step_fn(x, y, Gaussian(0.0, 1.0)),
        "BBB, scale-mixture prior (MC KL)": bbb_step_fn(x, y, ScaleMixture(0.5, 1.0, 2.0**-6)),
        **peer_variants(x, y),
    }
    median = interleaved_medians(variants, args.steps, args.rounds)
    base = median["plain MLP"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    print(f"| {'variant':<40} | {'ms/step':>8} | {'× plain':>7} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 9}|")
    for name, ms in median.items():
        print(f"| {name:<40} | {ms:8.2f} | {ms / base:7.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ms_per_step": median, "ratio": {k: v / base for k, v in median.items()}}, f)


if __name__ == "__main__":
    main()
