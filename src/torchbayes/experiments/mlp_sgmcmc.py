"""SG-MCMC vs optimizers on a real classification set — Gan et al. (2017) §4–5 on an MLP.

SGD, RMSprop, SGLD, pSGLD, SGHMC and SGNHT train the same ReLU MLP on the digits data
(scikit-learn's copy of UCI optical digits; MNIST once it is available offline) with the same
Gaussian prior N(0, 1/λ) (weight decay λ/N for the optimizers). After burn-in a
:class:`~torchbayes.collect.Collector` keeps one parameter set per ``thin_epochs``; for the
samplers that is the posterior, for the optimizers it is checkpoint averaging (M2 of Gan et al.
Table 7). The last iterate alone is M1. Reported: test error and NLL of the model average as
the number of averaged samples grows, in collection order.

Launched with ``torchrun --nproc_per_node K -m torchbayes run mlp-sgmcmc``, every rank runs
its own chain of each method (its own minibatch order and noise, the same initial network)
and the kept samples of all ranks are pooled into one posterior (parallel chains); rank 0
writes the results.

Writes ``mlp_sgmcmc.png``, ``result.json`` and ``report.md`` into the output folder.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from .. import _checks
from ..collect import Collector
from ..data import load_digits
from ..distributed import gather_samples, is_leader, rank, rank_seed, world_size
from ..models import mlp
from ..posterior import SampleSet
from ..predict import sample_outputs
from ..samplers import PSGLD, SGHMC, SGLD, SGNHT
from ..vi import check_finite
from ._result import Result, Resumable, prepare_output, write_result

METHODS = ("sgd", "rmsprop", "sgld", "psgld", "sghmc", "sgnht")
DISTRIBUTED = True  # under torchrun: one chain per rank, samples pooled


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    hidden: tuple[int, ...] = (200, 200)
    epochs: int = 200
    burn_in_epochs: int = 100
    thin_epochs: float = 1.0
    batch_size: int = 64
    prior_precision: float = 1.0
    methods: tuple[str, ...] = METHODS
    lr: dict[str, float] = field(
        default_factory=lambda: {
            "sgd": 0.1,
            "rmsprop": 1e-3,
            "sgld": 0.1,
            "psgld": 1e-3,
            "sghmc": 0.01,
            "sgnht": 0.01,
        }
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.at_least("epochs", self.epochs, 1)
        _checks.at_least("burn_in_epochs", self.burn_in_epochs, 0)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.positive("thin_epochs", self.thin_epochs)
        _checks.positive("prior_precision", self.prior_precision)
        if self.burn_in_epochs >= self.epochs:
            raise ValueError(
                f"burn_in_epochs must be < epochs, got burn_in_epochs={self.burn_in_epochs}"
            )
        for m in self.methods:
            _checks.one_of("methods", m, METHODS)

    @classmethod
    def quick(cls, **overrides) -> Config:
        return replace(cls(epochs=24, burn_in_epochs=12, hidden=(100, 100)), **overrides)


def make_optimizer(name: str, params, lr: float, num_data: int, precision: float, generator):
    """The optimizer or sampler ``name`` with the shared prior."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=precision / num_data)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=0.99, weight_decay=precision / num_data)
    samplers = {"sgld": SGLD, "psgld": PSGLD, "sghmc": SGHMC, "sgnht": SGNHT}
    return samplers[name](
        params, lr=lr, num_data=num_data, weight_decay=precision, generator=generator
    )


def averaged_curves(logits: Tensor, targets: Tensor) -> tuple[list[float], list[float]]:
    """Test error and NLL of the average of the first k samples' predictive, k = 1…K."""
    probs = logits.softmax(-1)
    counts = torch.arange(1, len(probs) + 1, dtype=probs.dtype).view(-1, 1, 1)
    running = probs.cumsum(0) / counts
    error = (running.argmax(-1) != targets).float().mean(-1)
    nll = -torch.log(
        running.gather(-1, targets.expand(len(probs), -1).unsqueeze(-1)).clamp_min(1e-12)
    )
    return error.tolist(), nll.squeeze(-1).mean(-1).tolist()


def _train(
    name: str,
    config: Config,
    data,
    generator: torch.Generator,
    checkpoint: Path | None = None,
) -> tuple[Collector, float]:
    """Train ``name`` for ``config.epochs``; returns its collector and the training seconds.

    With ``checkpoint`` (a file path) the run is saved every ``config.checkpoint_every``
    epochs and at the end, its samples kept as files beside it; with ``config.resume`` it
    continues from the last save (a finished run is only reloaded)."""
    x_train, y_train = data[0], data[1]
    n = len(x_train)
    steps_per_epoch = math.ceil(n / config.batch_size)
    net = mlp(x_train.shape[1], config.hidden, 10)
    opt = make_optimizer(
        name, net.parameters(), config.lr[name], n, config.prior_precision, generator
    )
    collector = Collector(
        net,
        burn_in=config.burn_in_epochs * steps_per_epoch,
        thin=Collector.epochs(config.thin_epochs, steps_per_epoch),
        directory=checkpoint.with_suffix(".samples") if checkpoint else None,
    )
    objects = {"model": net, "optimizer": opt, "collector": collector, "generator": generator}
    saver, first_epoch, done = config.checkpoint(checkpoint, objects)
    start = time.perf_counter() - done.get("seconds", 0.0)
    step = first_epoch * steps_per_epoch
    epochs = range(first_epoch, config.epochs)
    for epoch in tqdm(epochs, desc=name, leave=False, mininterval=0.5):
        order = torch.randperm(n, generator=generator)
        for batch in order.split(config.batch_size):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x_train[batch]), y_train[batch])
            check_finite(loss, step)
            loss.backward()
            opt.step()
            collector.step()
            step += 1
        if saver is not None:
            seconds = time.perf_counter() - start
            saver.step(epoch + 1, final=epoch + 1 == config.epochs, seconds=seconds)
    return collector, time.perf_counter() - start


def _plot(path: Path, curves: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, c in curves.items():
        k = range(1, len(c["error"]) + 1)
        style = "--" if name in ("sgd", "rmsprop") else "-"
        axes[0].plot(k, [100 * e for e in c["error"]], style, label=name)
        axes[1].plot(k, c["nll"], style, label=name)
    for ax, label in zip(axes, ("test error (%)", "test NLL (nats)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("samples averaged")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("Model averaging over collected samples (dashed: optimizer checkpoints)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    lines = [
        "# SG-MCMC vs optimizers on digits (Gan et al. 2017, model averaging)",
        "",
        f"MLP 64-{'-'.join(map(str, result.config['hidden']))}-10, "
        f"{result.config['epochs']} epochs, burn-in {result.config['burn_in_epochs']} epochs, "
        f"one sample per {result.config['thin_epochs']} epoch; prior N(0, 1/"
        f"{result.config['prior_precision']}). "
        + (
            f"{result.config['chains']} parallel chains per method (torchrun), samples pooled; "
            "the last iterate is the last chain's."
            if result.config["chains"] > 1
            else ""
        ),
        "",
        "| method | last iterate error % (M1) | averaged error % | last NLL | averaged NLL "
        "| samples | train s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in result.metrics.items():
        lines.append(
            f"| {name} | {100 * m['last_error']:.2f} | {100 * m['averaged_error']:.2f} | "
            f"{m['last_nll']:.4f} | {m['averaged_nll']:.4f} | {m['samples']} | "
            f"{result.timings[name + '_train_s']:.1f} |"
        )
    lines += ["", "For SGD and RMSprop the average is over checkpoints (M2), not a posterior.", ""]
    return "\n".join(lines)


def run(config: Config, out: str | Path) -> Result:
    chains, leader = world_size(), is_leader()
    out_dir = prepare_output(out) if leader else Path(out)
    data = load_digits(seed=config.seed)
    x_test, y_test = data[2], data[3]
    metrics, curves, timings = {}, {}, {}
    with torch.random.fork_rng(devices=[]):
        for i, name in enumerate(config.methods):
            torch.manual_seed(config.seed)  # the same initial network for every method
            generator = torch.Generator().manual_seed(rank_seed(config.seed * 1000 + i))
            saved = out_dir / "checkpoints" / f"{name}-rank{rank()}.pt"
            collector, seconds = _train(name, config, data, generator, saved)
            timings[f"{name}_train_s"] = seconds
            posterior = SampleSet(collector.model, gather_samples(collector.samples()))
            logits = sample_outputs(posterior, x_test, len(posterior))
            error, nll = averaged_curves(logits, y_test)
            curves[name] = {"error": error, "nll": nll}
            last_error, last_nll = _single(logits[-1], y_test)
            metrics[name] = {
                "last_error": last_error,
                "last_nll": last_nll,
                "averaged_error": error[-1],
                "averaged_nll": nll[-1],
                "samples": len(posterior),
                "error_vs_samples": error,
                "nll_vs_samples": nll,
            }
    plot = out_dir / "mlp_sgmcmc.png"
    result = Result(
        name="mlp-sgmcmc",
        config={**asdict(config), "chains": chains},
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    if leader:
        _plot(plot, curves)
        write_result(result, out_dir, config.keep_checkpoints)
    return result


def _single(logits: Tensor, targets: Tensor) -> tuple[float, float]:
    error = float((logits.argmax(-1) != targets).float().mean())
    return error, float(F.cross_entropy(logits, targets))
