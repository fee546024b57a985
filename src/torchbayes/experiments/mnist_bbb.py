"""Bayes by Backprop on MNIST — Blundell et al. (2015) §5.1, Table 1, Figs. 2–4 — and pruning.

784-w-w-10 ReLU networks (Table 1: w = 400 and 1200) trained with Adam under four methods,
each a posterior of :mod:`torchbayes.variational` on :class:`~torchbayes.nn.BayesLinear`:

* ``sgd``          — point estimate (Delta posterior, flat prior, no noise);
* ``dropout``      — binary dropout, p = 0.2 on the inputs and 0.5 on hidden units;
* ``bbb-gaussian`` — Bayes by Backprop, diagonal Gaussian posterior, N(0, s²) prior;
* ``bbb-mixture``  — the same under the scale-mixture prior (eq. 7), KL by Monte Carlo.

BBB uses one weight sample per minibatch and Blundell's KL weights πᵢ = 2^(M−i)/(2^M − 1).
Reported: test error at the posterior mean and of the Monte Carlo average, after every epoch
(Fig. 2); weight histograms (Fig. 3); the signal-to-noise density and CDF (Fig. 4); the
description length of each BBB net (Graves 2011: error and complexity in bits, compression
ratio); and for the BBB nets the pruning tables — test error after removing a fraction of the
weights by |μ|/σ (Table 2), and after removing every weight under λ (Graves eq. 20), with the
pruned network stored sparsely. On a machine without MNIST the run uses Fashion-MNIST and
says so. Writes ``mnist_bbb.png``, ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _checks
from ..data import load_images
from ..data.images import IMAGE_DATASETS
from ..distributed import is_leader
from ..nn import BayesLinear, posterior_mean
from ..posterior import VariationalPosterior
from ..priors import Gaussian, ScaleMixture, Uniform
from ..prune import (
    SparseLinear,
    hold_masks,
    masks_by_fraction,
    masks_by_threshold,
    pruning_report,
    signal_to_noise,
    sparsify,
)
from ..variational import BernoulliDropout, Delta, DiagonalGaussian
from ..vi import check_finite, description_length
from ._result import Result, Resumable, prepare_output, write_result
from .mnist_vd import Trainer, evaluate

METHODS = ("sgd", "dropout", "bbb-gaussian", "bbb-mixture")
BAYESIAN = ("bbb-gaussian", "bbb-mixture")

DISTRIBUTED = True  # under torchrun: data-parallel (mnist_vd.Trainer), rank 0 writes


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "auto"
    methods: tuple[str, ...] = METHODS
    hidden_sizes: tuple[int, ...] = (400, 1200)
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    gaussian_prior_std: float = 1.0
    mixture_pi: float = 0.5
    mixture_log_sigma1: float = 0.0
    mixture_log_sigma2: float = -6.0
    rho_init: float = -5.0
    input_dropout: float = 0.2
    hidden_dropout: float = 0.5
    test_samples: int = 10
    prune_fractions: tuple[float, ...] = (0.0, 0.5, 0.75, 0.95, 0.98)
    prune_thresholds: tuple[float, ...] = (0.5, 0.83, 1.0, 2.0)
    retrain_epochs: int = 1  # Adam epochs on the pruned posterior-mean net; 0 = no retraining
    retrain_lr: float = 1e-3  # Adam's step size when retraining (a fine-tune wants less than lr)
    train_subset: int = 0  # 0 = every training example

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, IMAGE_DATASETS)
        for m in self.methods:
            _checks.one_of("methods", m, METHODS)
        for w in self.hidden_sizes:
            _checks.at_least("hidden_sizes", w, 1)
        _checks.at_least("epochs", self.epochs, 1)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.positive("lr", self.lr)
        _checks.positive("gaussian_prior_std", self.gaussian_prior_std)
        _checks.probability("mixture_pi", self.mixture_pi)
        _checks.at_least("test_samples", self.test_samples, 1)
        _checks.at_least("train_subset", self.train_subset, 0)
        _checks.at_least("retrain_epochs", self.retrain_epochs, 0)
        _checks.positive("retrain_lr", self.retrain_lr)
        for f in self.prune_fractions:
            _checks.probability("prune_fractions", f)
        for t in self.prune_thresholds:
            _checks.non_negative("prune_thresholds", t)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(hidden_sizes=(32,), epochs=2, train_subset=3000, test_samples=4)
        return replace(base, **overrides)


def bbb_mlp(method: str, width: int, config: Config, in_features: int = 784) -> nn.Sequential:
    """784-w-w-10 ReLU network whose layers carry ``method``'s posterior and prior."""
    if method == "bbb-gaussian":
        prior = Gaussian(0.0, config.gaussian_prior_std)
    else:
        prior = ScaleMixture(
            config.mixture_pi,
            math.exp(config.mixture_log_sigma1),
            math.exp(config.mixture_log_sigma2),
        )
    widths = [in_features, width, width, 10]
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        if method == "sgd":
            layer = BayesLinear(a, b, prior=Uniform(), posterior=Delta, estimator="mean")
        elif method == "dropout":
            p = config.input_dropout if i == 0 else config.hidden_dropout
            q = partial(BernoulliDropout, p=p)
            layer = BayesLinear(a, b, prior=Uniform(), posterior=q, estimator="local")
        else:
            q = partial(DiagonalGaussian, rho_init=config.rho_init)
            layer = BayesLinear(a, b, prior=prior, posterior=q, estimator="reparameterize")
        layers.append(layer)
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _mean_error(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad(), posterior_mean(model):
        return float((model(x).argmax(-1) != y).float().mean())


def _train_nll_nats(model: nn.Module, x: Tensor, y: Tensor, batch: int = 1000) -> float:
    """−Σₙ log p(yₙ|xₙ, w), one weight sample per batch: the error loss L_E in nats."""
    with torch.no_grad():
        return sum(
            float(F.cross_entropy(model(xb), yb, reduction="sum"))
            for xb, yb in zip(x.split(batch), y.split(batch), strict=True)
        )


def _network_error(network: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((network(x).argmax(-1) != y).float().mean())


def retrain_pruned(
    network: nn.Module,
    masks: dict[str, Tensor],
    data: tuple[Tensor, Tensor],
    config: Config,
    generator: torch.Generator,
) -> nn.Module:
    """A copy of the plain ``network`` trained ``config.retrain_epochs`` epochs with Adam on the
    cross-entropy while its pruned weights are held at zero (Graves 2011 §7: retraining after
    pruning)."""
    network = copy.deepcopy(network).train()
    handles = hold_masks(network, masks)
    optimizer = torch.optim.Adam(network.parameters(), lr=config.retrain_lr)
    x, y = data
    for _ in range(config.retrain_epochs):
        for batch in torch.randperm(len(x), generator=generator).split(config.batch_size):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(network(x[batch]), y[batch])
            check_finite(loss, 0)
            loss.backward()
            optimizer.step()
    for handle in handles:
        handle.remove()
    return network.eval()


def prune_tables(
    model: nn.Module,
    config: Config,
    test: tuple[Tensor, Tensor],
    train: tuple[Tensor, Tensor] | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, list]:
    """Test error of the pruned posterior-mean network, by fraction and by threshold λ; with
    ``train`` and ``config.retrain_epochs`` > 0 also after retraining each pruned network."""
    x, y = test
    snr = signal_to_noise(model)
    network = VariationalPosterior(model).network
    dense_bytes = sum(p.numel() * p.element_size() for p in network.parameters())
    rows: dict[str, list] = {"fraction": [], "threshold": []}
    for kind, values, make in (
        ("fraction", config.prune_fractions, masks_by_fraction),
        ("threshold", config.prune_thresholds, masks_by_threshold),
    ):
        for value in values:
            masks = make(snr, value)
            sparse = sparsify(network, masks)
            stored = sum(
                m.storage_bytes() if isinstance(m, SparseLinear) else 0 for m in sparse.modules()
            )
            report = pruning_report(model, masks)
            row = {
                kind: value,
                "removed": 1.0 - report["kept_fraction"],
                "kept": report["kept"],
                "test_error": _network_error(sparse, x, y),
                "bits_per_kept_weight": report["bits_per_kept_weight"],
                "stored_fraction_of_dense": stored / dense_bytes,
            }
            if train is not None and config.retrain_epochs:
                retrained = retrain_pruned(network, masks, train, config, generator)
                row["retrained_test_error"] = _network_error(sparsify(retrained, masks), x, y)
            rows[kind].append(row)
    return rows


def run(config: Config, out: str | Path, name: str = "mnist-bbb") -> Result:
    out_dir = prepare_output(out)
    data = load_images(config.dataset)
    x, y = data.train_images, data.train_labels
    if config.train_subset:
        x, y = x[: config.train_subset], y[: config.train_subset]
    x_test, y_test = data.test_images, data.test_labels
    metrics: dict[str, dict] = {m: {} for m in config.methods}
    timings: dict[str, float] = {}
    figures: dict[str, dict] = {"weights": {}, "snr": {}}
    with torch.random.fork_rng(devices=[]):
        for width in config.hidden_sizes:
            for i, method in enumerate(config.methods):
                torch.manual_seed(config.seed)
                generator = torch.Generator().manual_seed(config.seed * 1000 + i)
                model = bbb_mlp(method, width, config, x[0].numel())
                schedule = "blundell" if method in BAYESIAN else "uniform"
                trainer = Trainer(model, config, len(x), schedule=schedule)
                saved = out_dir / "checkpoints" / f"{method}-w{width}.pt"
                done = trainer.resumable(saved, generator, config)
                curve = trainer.history.setdefault("curve", [])

                def record_test_error(model=model, curve=curve) -> None:
                    curve.append(_mean_error(model, x_test, y_test))

                trainer.epochs(
                    (x, y),
                    config.epochs - done,
                    generator,
                    f"{method} w={width}",
                    after_epoch=record_test_error,
                )
                seconds = trainer.seconds
                scores = evaluate(model, x_test, y_test, config.test_samples, generator)
                scores["curve"] = curve
                timings[f"{method}_w{width}_train_s"] = seconds
                weights = VariationalPosterior(model).sample(1, generator)
                figures["weights"][(method, width)] = torch.cat(
                    [v.reshape(-1) for k, v in weights.items() if k.endswith("weight")]
                )
                if method in BAYESIAN:
                    snr = signal_to_noise(model, include_biases=False)
                    figures["snr"][(method, width)] = torch.cat(
                        [v.reshape(-1) for v in snr.values()]
                    )
                    nll = _train_nll_nats(model, x, y)
                    scores["description_length"] = description_length(
                        model, nll, len(x), data.num_classes
                    ).as_dict()
                    start = time.perf_counter()
                    scores["pruning"] = prune_tables(
                        model, config, (x_test, y_test), (x, y), generator
                    )
                    timings[f"{method}_w{width}_prune_s"] = time.perf_counter() - start
                metrics[method][str(width)] = scores
    plot = out_dir / "mnist_bbb.png"
    if is_leader():
        _plot(plot, metrics, figures, config, data.name)
    result = Result(
        name=name,
        config={**asdict(config), "dataset_used": data.name, "train_examples": len(x)},
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _plot(path: Path, metrics: dict, figures: dict, config: Config, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = config.hidden_sizes[-1]
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    for method, by_width in metrics.items():
        for w, scores in by_width.items():
            epochs = range(1, len(scores["curve"]) + 1)
            axes[0].plot(epochs, [100 * e for e in scores["curve"]], label=f"{method} w={w}")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("test error % (posterior mean)")
    axes[0].set_title(f"{dataset}: learning curves (Fig. 2)")
    axes[0].legend(fontsize=7)
    for (method, w), values in figures["weights"].items():
        if w == width:
            axes[1].hist(
                values.numpy(),
                bins=200,
                range=(-0.3, 0.3),
                density=True,
                histtype="step",
                label=method,
            )
    axes[1].set_title(f"weights, one posterior sample, w={width} (Fig. 3)")
    axes[1].legend(fontsize=7)
    for (method, w), snr in figures["snr"].items():
        db = (10 * torch.log10(snr.clamp_min(1e-12))).numpy()
        axes[2].hist(db, bins=100, density=True, histtype="step", label=f"{method} w={w}")
        ordered = torch.sort(torch.as_tensor(db)).values
        axes[3].plot(
            ordered.numpy(), torch.linspace(0, 1, len(ordered)).numpy(), label=f"{method} w={w}"
        )
    axes[2].set_xlabel("signal-to-noise ratio (dB)")
    axes[2].set_title("SNR density (Fig. 4)")
    axes[3].set_xlabel("signal-to-noise ratio (dB)")
    axes[3].set_title("SNR CDF (Fig. 4)")
    for ax in axes[2:]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    widths = [str(w) for w in c["hidden_sizes"]]
    lines = [
        f"# Bayes by Backprop on {c['dataset_used']} (Blundell et al. 2015, Table 1)",
        "",
        f"784-w-w-10 ReLU, Adam lr {c['lr']}, batch {c['batch_size']}, {c['epochs']} epochs on "
        f"{c['train_examples']} examples. Test error % at the posterior mean (MC average of "
        f"{c['test_samples']} samples).",
        "",
        "| method | " + " | ".join(f"w={w} | train s" for w in widths) + " |",
        "|---|" + "---|---|" * len(widths),
    ]
    for method, by_width in result.metrics.items():
        cells = [
            f"{100 * by_width[w]['mean_error']:.2f} ({100 * by_width[w]['mc_error']:.2f}) "
            f"| {result.timings[f'{method}_w{w}_train_s']:.0f}"
            for w in widths
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Paper (MNIST): BBB with the scale-mixture prior 1.36 % at 2×400 (Table 1).", ""]
    for method in BAYESIAN:
        for w, scores in result.metrics.get(method, {}).items():
            dl = scores["description_length"]
            lines += [
                f"## {method}, w={w}",
                "",
                f"Description length: error {dl['error_bits']:.0f} bits + complexity "
                f"{dl['complexity_bits']:.0f} bits; {dl['bits_per_weight']:.3f} bits/weight; "
                f"compression ratio {dl['compression_ratio']:.3f}.",
                "",
                f"Retrained: {c['retrain_epochs']} Adam epoch(s) at lr {c['retrain_lr']:g} on "
                "the pruned posterior-mean network with the pruned weights held at zero.",
                "",
                "| removed by SNR | test error % | retrained | bits / kept weight "
                "| stored (of dense) |",
                "|---|---|---|---|---|",
            ]
            for row in scores["pruning"]["fraction"]:
                lines.append(
                    f"| {100 * row['removed']:.0f} % | {100 * row['test_error']:.2f} "
                    f"| {_retrained(row)} | {row['bits_per_kept_weight']:.3f} "
                    f"| {100 * row['stored_fraction_of_dense']:.1f} % |"
                )
            lines += [
                "",
                "| λ (removed if SNR < λ) | removed | test error % | retrained |",
                "|---|---|---|---|",
            ]
            for row in scores["pruning"]["threshold"]:
                lines.append(
                    f"| {row['threshold']} | {100 * row['removed']:.1f} % "
                    f"| {100 * row['test_error']:.2f} | {_retrained(row)} |"
                )
            lines.append("")
    return "\n".join(lines)


def _retrained(row: dict) -> str:
    error = row.get("retrained_test_error")
    return "–" if error is None else f"{100 * error:.2f}"
