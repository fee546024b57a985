"""Variational dropout vs dropout on MNIST — Kingma, Salimans & Welling (2015) §5, Fig. 1.

A 784-h-h-h-10 ReLU network trained with Adam under seven regularizers, each a posterior of
:mod:`torchbayes.variational` plugged into :class:`~torchbayes.nn.BayesLinear` with the local
estimator (so per-example noise, one sample per example):

* ``none``       — point estimate (Delta posterior, flat prior);
* ``binary``     — binary dropout of each layer's inputs, p = 0.2 (input) / 0.5 (hidden);
* ``gaussian-a`` — Gaussian dropout on the inputs, α = p/(1−p) fixed (Srivastava et al. 2014);
* ``gaussian-b`` — Gaussian dropout on pre-activations (independent weight noise), α fixed;
* ``vd-a``       — variational dropout A: α learned per input unit, log-uniform prior;
* ``vd-a2``      — the same with the KL scaled by 1/3 (the paper's A2);
* ``vd-b``       — variational dropout B: independent weight noise, α learned per weight.

Learned α is bounded by 1 (§3.4). Test error is reported for the posterior mean (weight
scaling) and for the Monte Carlo average over weight samples; the plot is test error vs
hidden units (Fig. 1). On a machine without MNIST the run uses Fashion-MNIST and says so.

Writes ``mnist_vd.png``, ``result.json`` and ``report.md`` into the output folder.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import _checks
from ..checkpoint import Checkpoint
from ..data import load_images
from ..data.images import IMAGE_DATASETS
from ..distributed import average_gradients, is_leader, rank, rank_seed, shard, world_size
from ..nn import BayesLinear, posterior_mean
from ..nn.convert import bayesian_layers
from ..posterior import VariationalPosterior
from ..predict import sample_outputs
from ..priors import LogUniform, Uniform, refit_priors
from ..variational import (
    BernoulliDropout,
    CorrelatedVariationalDropout,
    Delta,
    VariationalDropout,
)
from ..vi import FreeEnergy, check_finite
from ._result import Result, Resumable, prepare_output, write_result

METHODS = ("none", "binary", "gaussian-a", "gaussian-b", "vd-a", "vd-a2", "vd-b")
LEARNED = ("vd-a", "vd-a2", "vd-b")

DISTRIBUTED = True  # under torchrun: data-parallel (mnist_vd.Trainer), rank 0 writes


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "auto"
    hidden_sizes: tuple[int, ...] = (50, 100, 200)
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    input_dropout: float = 0.2
    hidden_dropout: float = 0.5
    max_alpha: float = 1.0
    test_samples: int = 20
    train_subset: int = 0  # 0 = every training example
    methods: tuple[str, ...] = METHODS

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, IMAGE_DATASETS)
        _checks.at_least("epochs", self.epochs, 1)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.at_least("test_samples", self.test_samples, 1)
        _checks.at_least("train_subset", self.train_subset, 0)
        _checks.positive("lr", self.lr)
        _checks.positive("max_alpha", self.max_alpha)
        for p, name in (
            (self.input_dropout, "input_dropout"),
            (self.hidden_dropout, "hidden_dropout"),
        ):
            _checks.below_one(name, p, zero_allowed=False)
        for width in self.hidden_sizes:
            _checks.at_least("hidden_sizes", width, 1)
        for m in self.methods:
            _checks.one_of("methods", m, METHODS)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(hidden_sizes=(32,), epochs=2, train_subset=3000, test_samples=4)
        return replace(base, **overrides)


def dropout_layer(method: str, in_features: int, out_features: int, p: float, max_alpha: float):
    """One layer of ``method`` whose inputs are dropped at rate p (α = p / (1 − p))."""
    alpha = p / (1 - p)
    learned = dict(alpha_init=alpha, max_alpha=max_alpha)
    fixed = dict(alpha_init=alpha, max_alpha=None, learn_alpha=False)
    posteriors = {
        "none": (Delta, Uniform(), "mean"),
        "binary": (partial(BernoulliDropout, p=p), Uniform(), "local"),
        "gaussian-a": (partial(CorrelatedVariationalDropout, **fixed), LogUniform(), "local"),
        "gaussian-b": (
            partial(VariationalDropout, granularity="layer", **fixed),
            LogUniform(),
            "local",
        ),
        "vd-a": (partial(CorrelatedVariationalDropout, **learned), LogUniform(), "local"),
        "vd-a2": (partial(CorrelatedVariationalDropout, **learned), LogUniform(), "local"),
        "vd-b": (
            partial(VariationalDropout, granularity="weight", **learned),
            LogUniform(),
            "local",
        ),
    }
    posterior, prior, estimator = posteriors[method]
    return BayesLinear(
        in_features, out_features, prior=prior, posterior=posterior, estimator=estimator
    )


def dropout_mlp(method: str, width: int, config: Config, in_features: int = 784) -> nn.Sequential:
    """784-w-w-w-10 with ReLUs, every layer of ``method`` (the paper's 3 hidden layers)."""
    widths = [in_features, width, width, width, 10]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        p = config.input_dropout if i == 0 else config.hidden_dropout
        layers.append(dropout_layer(method, a, b, p, config.max_alpha))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(nn.Flatten(), *layers)


def learned_alphas(model: nn.Module) -> list[dict[str, float]]:
    """Per layer: median and mean of the weight posterior's α (dropout rates reported)."""
    rows = []
    for name, layer in bayesian_layers(model):
        q = layer.weight_posterior
        if isinstance(q, VariationalDropout):
            alpha = q.alpha.detach().expand_as(q.mu) if q.granularity != "layer" else q.alpha
            rows.append(
                {
                    "layer": name,
                    "median_alpha": float(alpha.median()),
                    "mean_alpha": float(alpha.mean()),
                    "equivalent_p": float((alpha / (1 + alpha)).mean()),
                }
            )
    return rows


def train(
    method: str,
    width: int,
    config: Config,
    data,
    generator: torch.Generator,
    checkpoint: Path | None = None,
):
    """Adam on the minibatch free energy (error + KL/N, KL/(3N) for vd-a2); returns the model
    and the training time in seconds. ``checkpoint``: see :meth:`Trainer.resumable`."""
    x = data[0]
    model = dropout_mlp(method, width, config, x[0].numel())
    trainer = Trainer(model, config, len(x), kl_scale=1 / 3 if method == "vd-a2" else 1.0)
    done = trainer.resumable(checkpoint, generator, config)
    trainer.epochs(data, config.epochs - done, generator, f"{method} h={width}")
    return model, trainer.seconds


class Trainer:
    """Adam on the free energy of ``model``; :meth:`epochs` can be called repeatedly.

    With ``refit=True`` the model's adaptive priors are refitted after every update
    (:func:`torchbayes.priors.refit_priors`, Graves 2011 eq. 15). :meth:`resumable` makes
    every epoch end in a checkpoint (model, Adam, minibatch generator, global RNG, step,
    ``history``) and, on resume, restores the last one.

    Under torchrun it trains data-parallel: every rank builds the same network and minibatch
    order, takes every ``world_size``-th example of each minibatch, draws its own weight
    noise (its global RNG reseeded with :func:`~torchbayes.distributed.rank_seed`) and
    averages the gradients of the free energy before each Adam step, so the replicas stay
    identical and the step uses world-size times the Monte Carlo samples.
    """

    def __init__(
        self,
        model: nn.Module,
        config: Config,
        num_data: int,
        kl_scale: float = 1.0,
        schedule: str = "uniform",
        refit: bool = False,
    ):
        self.model, self.batch_size, self.refit = model, config.batch_size, refit
        if refit:
            refit_priors(model)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        batches = math.ceil(num_data / config.batch_size)
        self.free_energy = FreeEnergy(num_data, batches, schedule=schedule, kl_scale=kl_scale)
        self.step = self.epoch = 0
        self.seconds = 0.0
        self.history: dict[str, list] = {}  # per-epoch records a caller wants kept on resume
        self._saver: Checkpoint | None = None
        self.world = world_size()
        if self.world > 1:  # same initial network on every rank, then each its own noise
            torch.manual_seed(rank_seed(torch.initial_seed()))

    def resumable(self, path: Path | None, generator: torch.Generator, run: Resumable) -> int:
        """Checkpoint to ``path`` every ``run.checkpoint_every`` epochs (``None``: never);
        with ``run.resume``, restore the last checkpoint. Returns the epochs already trained."""
        if path is None:
            return self.epoch
        if self.world > 1:  # ranks differ in their global RNG, so each keeps its own file
            path = path.with_name(f"{path.stem}-rank{rank()}{path.suffix}")
        objects = {"model": self.model, "optimizer": self.optimizer, "generator": generator}
        self._saver, position, extra = run.checkpoint(path, objects)
        if position:  # resumed: continue the counters where the checkpoint left them
            self.epoch, self.step = position, extra.get("step", 0)
            self.seconds = extra.get("seconds", 0.0)
            self.history = extra.get("history", {})
        return self.epoch

    def epochs(
        self,
        data,
        count: int,
        generator: torch.Generator,
        desc: str = "",
        after_epoch: Callable[[], None] | None = None,
    ) -> float:
        """Train ``count`` epochs over ``data`` = (x, y); returns the seconds of training
        (``seconds`` keeps the total over every call and resume).

        ``after_epoch`` runs at the end of each epoch, before its checkpoint and outside the
        timed training (e.g. to append a test error to ``history``)."""
        x, y = data
        before = self.seconds
        for _ in tqdm(range(count), desc=desc, leave=False, mininterval=1):
            start = time.perf_counter()
            order = torch.randperm(len(x), generator=generator)
            for i, batch in enumerate(order.split(self.batch_size)):
                if self.world > 1:
                    batch = shard(batch)
                self.optimizer.zero_grad(set_to_none=True)
                error = F.cross_entropy(self.model(x[batch]), y[batch])
                terms = self.free_energy(self.model, error, i)
                check_finite(terms.loss, self.step)
                terms.loss.backward()
                average_gradients(self.model.parameters())
                self.optimizer.step()
                if self.refit:
                    refit_priors(self.model)
                self.step += 1
            self.epoch += 1
            self.seconds += time.perf_counter() - start
            if after_epoch is not None:
                after_epoch()
            if self._saver is not None:
                self._saver.step(
                    self.epoch, step=self.step, seconds=self.seconds, history=self.history
                )
        return self.seconds - before


def evaluate(model: nn.Module, x: Tensor, y: Tensor, samples: int, generator) -> dict[str, float]:
    """Test error at the posterior mean and of the S-sample predictive average, and NLL."""
    with torch.no_grad(), posterior_mean(model):
        mean_logits = model(x)
    logits = sample_outputs(VariationalPosterior(model), x, samples, generator=generator)
    probs = logits.softmax(-1).mean(0)
    return {
        "mean_error": float((mean_logits.argmax(-1) != y).float().mean()),
        "mc_error": float((probs.argmax(-1) != y).float().mean()),
        "mc_nll": float(F.nll_loss(probs.clamp_min(1e-12).log(), y)),
    }


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    data = load_images(config.dataset)
    x, y = data.train_images, data.train_labels
    if config.train_subset:
        x, y = x[: config.train_subset], y[: config.train_subset]
    metrics: dict[str, dict] = {m: {} for m in config.methods}
    timings: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]):
        for width in config.hidden_sizes:
            for i, method in enumerate(config.methods):
                torch.manual_seed(config.seed)
                generator = torch.Generator().manual_seed(config.seed * 1000 + i)
                saved = out_dir / "checkpoints" / f"{method}-h{width}.pt"
                model, seconds = train(method, width, config, (x, y), generator, saved)
                scores = evaluate(
                    model, data.test_images, data.test_labels, config.test_samples, generator
                )
                scores["alphas"] = learned_alphas(model) if method in LEARNED else []
                metrics[method][str(width)] = scores
                timings[f"{method}_h{width}_train_s"] = seconds
    plot = out_dir / "mnist_vd.png"
    if is_leader():
        _plot(plot, metrics, config, data.name)
    result = Result(
        name="mnist-vd",
        config={**asdict(config), "dataset_used": data.name, "train_examples": len(x)},
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _plot(path: Path, metrics: dict, config: Config, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    widths = list(config.hidden_sizes)
    for method, by_width in metrics.items():
        style = "-o" if method in LEARNED else "--s"
        errors = [100 * by_width[str(w)]["mean_error"] for w in widths]
        ax.plot(widths, errors, style, label=method, markersize=4)
    ax.set_xlabel("hidden units per layer")
    ax.set_ylabel("test error (%)")
    ax.set_title(f"{dataset}: 3 hidden layers, {config.epochs} epochs (Kingma et al. Fig. 1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    widths = [str(w) for w in c["hidden_sizes"]]
    lines = [
        f"# Variational dropout on {c['dataset_used']} (Kingma et al. 2015, Fig. 1)",
        "",
        f"784-h-h-h-10 ReLU, Adam lr {c['lr']}, batch {c['batch_size']}, {c['epochs']} epochs "
        f"on {c['train_examples']} examples; dropout p = {c['input_dropout']} (input) / "
        f"{c['hidden_dropout']} (hidden), learned α ≤ {c['max_alpha']}. "
        f"Test error % at the posterior mean (MC average of {c['test_samples']} samples).",
        "",
        "| method | " + " | ".join(f"h={w}" for w in widths) + " |",
        "|---|" + "---|" * len(widths),
    ]
    for method, by_width in result.metrics.items():
        cells = [
            f"{100 * by_width[w]['mean_error']:.2f} ({100 * by_width[w]['mc_error']:.2f})"
            for w in widths
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Learned dropout rates (median α per layer, input → output):", ""]
    for method in LEARNED:
        for w, scores in result.metrics.get(method, {}).items():
            alphas = ", ".join(f"{row['median_alpha']:.3f}" for row in scores["alphas"])
            lines.append(f"- {method}, h={w}: {alphas}")
    lines.append("")
    return "\n".join(lines)
