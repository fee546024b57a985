"""Variance of the stochastic gradient under each estimator — Kingma et al. (2015) Table 1.

A 784-h-h-h-10 ReLU network regularized by variational dropout B (independent weight noise,
learned α ≤ 1) is trained with the local estimator. After ``checkpoints`` epochs the training
stops and, at those parameters, the gradient of the minibatch loss with respect to the top
and the bottom layer's weight means θ is drawn ``repeats`` times under every estimator:

* ``local``          — local reparameterization (Kingma §2.3);
* ``per_example``    — a separate weight sample per example;
* ``reparameterize`` — one weight sample per minibatch;
* ``flipout``        — one shared sample decorrelated by random signs (Wen et al. 2018);
* ``mean``           — no dropout noise (only the minibatch varies: the floor).

Every estimator sees the same minibatches (common random numbers). Reported: the empirical
variance of each gradient entry over the repeats, averaged over the layer's entries.

Writes ``gradient_variance.png``, ``result.json`` and ``report.md`` into the output folder.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _checks
from ..data import load_images
from ..data.images import IMAGE_DATASETS
from ..distributed import is_leader
from ..nn.convert import bayesian_layers
from . import mnist_vd
from ._result import Result, Resumable, prepare_output, write_result

ESTIMATORS = ("local", "per_example", "reparameterize", "flipout", "mean")

DISTRIBUTED = True  # under torchrun: data-parallel (mnist_vd.Trainer), rank 0 writes


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "auto"
    hidden: int = 100
    checkpoints: tuple[int, ...] = (10, 100)
    batch_size: int = 100
    repeats: int = 200
    lr: float = 1e-3
    train_subset: int = 0  # 0 = every training example
    estimators: tuple[str, ...] = ESTIMATORS

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, IMAGE_DATASETS)
        _checks.at_least("hidden", self.hidden, 1)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.at_least("repeats", self.repeats, 2)
        _checks.at_least("train_subset", self.train_subset, 0)
        _checks.positive("lr", self.lr)
        if not self.checkpoints or list(self.checkpoints) != sorted(set(self.checkpoints)):
            raise ValueError(
                f"checkpoints must be increasing epoch counts, got checkpoints={self.checkpoints}"
            )
        for c in self.checkpoints:
            _checks.at_least("checkpoints", c, 1)
        for e in self.estimators:
            _checks.one_of("estimators", e, ESTIMATORS)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(hidden=32, checkpoints=(1, 2), repeats=8, train_subset=2000)
        return replace(base, **overrides)


def gradient_variance(
    model: nn.Module,
    estimator: str,
    data: tuple[Tensor, Tensor],
    batches: list[Tensor],
) -> dict[str, float]:
    """Mean over entries of Var[∂L/∂θ] for the bottom and top layers' weight means, over the
    given minibatches, with every Bayesian layer of ``model`` set to ``estimator``."""
    x, y = data
    layers = [layer for _, layer in bayesian_layers(model)]
    previous = [layer.estimator for layer in layers]
    targets = {"bottom": layers[0].weight_posterior.mu, "top": layers[-1].weight_posterior.mu}
    grads: dict[str, list[Tensor]] = {k: [] for k in targets}
    try:
        for layer in layers:
            layer.estimator = estimator
        for batch in batches:
            loss = F.cross_entropy(model(x[batch]), y[batch])
            values = torch.autograd.grad(loss, list(targets.values()))
            for key, g in zip(targets, values, strict=True):
                grads[key].append(g.flatten())
    finally:
        for layer, name in zip(layers, previous, strict=True):
            layer.estimator = name
    return {key: float(torch.stack(g).var(0).mean()) for key, g in grads.items()}


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    data = load_images(config.dataset)
    x, y = data.train_images, data.train_labels
    if config.train_subset:
        x, y = x[: config.train_subset], y[: config.train_subset]
    vd = mnist_vd.Config(lr=config.lr, batch_size=config.batch_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        model = mnist_vd.dropout_mlp("vd-b", config.hidden, vd, x[0].numel())
        trainer = mnist_vd.Trainer(model, vd, len(x))
        saved = out_dir / "checkpoints" / "vd-b.pt"
        trainer.resumable(saved, generator, config)
        trainer.history.setdefault("variance", {e: {} for e in config.estimators})
        trainer.history.setdefault("timings", {})

        def measure_at_checkpoint() -> None:
            epochs = trainer.epoch
            if epochs not in config.checkpoints:
                return
            trainer.history["timings"][f"train_to_{epochs}_s"] = trainer.seconds
            batches = [
                torch.randperm(len(x), generator=generator)[: config.batch_size]
                for _ in range(config.repeats)
            ]
            for estimator in config.estimators:
                torch.manual_seed(config.seed + epochs)
                trainer.history["variance"][estimator][str(epochs)] = gradient_variance(
                    model, estimator, (x, y), batches
                )

        remaining = config.checkpoints[-1] - trainer.epoch
        trainer.epochs((x, y), remaining, generator, "vd-b", after_epoch=measure_at_checkpoint)
        metrics, timings = trainer.history["variance"], trainer.history["timings"]
    plot = out_dir / "gradient_variance.png"
    if is_leader():
        _plot(plot, metrics, config)
    result = Result(
        name="gradient-variance",
        config={**asdict(config), "dataset_used": data.name, "train_examples": len(x)},
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _plot(path: Path, metrics: dict, config: Config) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    names = list(metrics)
    width = 0.8 / len(config.checkpoints)
    for ax, layer in zip(axes, ("top", "bottom"), strict=True):
        for j, epochs in enumerate(config.checkpoints):
            values = [metrics[n][str(epochs)][layer] for n in names]
            positions = [i + j * width for i in range(len(names))]
            ax.bar(positions, values, width, label=f"after {epochs} epochs")
        ax.set_xticks([i + width * (len(config.checkpoints) - 1) / 2 for i in range(len(names))])
        ax.set_xticklabels(names, rotation=20)
        ax.set_yscale("log")
        ax.set_title(f"{layer} layer")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("mean gradient variance")
    axes[1].legend(fontsize=8)
    fig.suptitle("Gradient variance by estimator (Kingma et al. 2015, Table 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    epochs = [str(e) for e in c["checkpoints"]]
    header = [f"top @{e}" for e in epochs] + [f"bottom @{e}" for e in epochs]
    lines = [
        f"# Gradient variance by estimator on {c['dataset_used']} (Kingma et al. 2015, Table 1)",
        "",
        f"784-{c['hidden']}-{c['hidden']}-{c['hidden']}-10 ReLU with variational dropout B, "
        f"trained with the local estimator (Adam lr {c['lr']}, batch {c['batch_size']}, "
        f"{c['train_examples']} examples); variance over {c['repeats']} minibatches, mean "
        "over the layer's weight means.",
        "",
        "| estimator | " + " | ".join(header) + " |",
        "|---|" + "---|" * len(header),
    ]
    for name, by_epoch in result.metrics.items():
        cells = [f"{by_epoch[e]['top']:.3g}" for e in epochs]
        cells += [f"{by_epoch[e]['bottom']:.3g}" for e in epochs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paper's ordering (MNIST, both layers, both checkpoints): local reparameterization < "
        "separate weight samples < one weight sample per minibatch, with no noise lowest.",
        "",
    ]
    return "\n".join(lines)
