"""Graves' (2011) posterior × prior grid on MNIST, with MDL accounting — Table 1 on images.

Graves' task (TIMIT phoneme recognition) is not public; his grid is run here on a 784-w-w-10
ReLU network instead. Every row is one posterior and one prior, all from the library:

* posteriors — ``delta`` (a point: the complexity is −log p(μ)), ``fixed`` (weight noise
  N(μ, σ₀²), σ₀ = 0.075), ``adaptive`` (N(μ, σ²), σ = softplus ρ learned);
* priors — ``uniform`` (flat), ``laplace`` / ``gaussian`` fixed at scale s₀, or
  ``adaptive-laplace`` / ``adaptive-gaussian`` refitted in closed form after every update
  (eq. 15, §5.1).

Each row trains with Adam on the free energy (error + complexity/N per example) and reports
test error at the posterior mean, the epochs used, and the description length: error loss
L_E on the training set (one weight sample per batch), complexity loss L_C = KL(q‖p), bits
per weight, and the compression ratio N·log₂10 / (L_E + L_C) (Graves Table 1 "Ratio"). A
delta posterior has no proper code length for its weights (it would need quantization), so
its complexity is reported as −log p(μ) in nats and its ratio flagged; under the flat prior
L_C = −H[q] is relative to an improper prior and flagged too. On a machine without
MNIST it runs on Fashion-MNIST and says so. Writes ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
from torch import nn

from .. import _checks
from ..data import load_images
from ..data.images import IMAGE_DATASETS
from ..nn import BayesLinear
from ..priors import AdaptiveGaussian, AdaptiveLaplace, Gaussian, Laplace, Prior, Uniform
from ..variational import Delta, DiagonalGaussian, FixedGaussian
from ..vi import description_length
from ._result import Result, Resumable, prepare_output, write_result
from .mnist_bbb import _mean_error, _train_nll_nats
from .mnist_vd import Trainer

POSTERIORS = ("delta", "fixed", "adaptive")
PRIORS = ("uniform", "laplace", "gaussian", "adaptive-laplace", "adaptive-gaussian")
ROWS = tuple(f"{q}/{p}" for q in POSTERIORS for p in PRIORS)

DISTRIBUTED = True  # under torchrun: data-parallel (mnist_vd.Trainer), rank 0 writes


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "auto"
    rows: tuple[str, ...] = ROWS
    hidden: int = 400
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    fixed_noise: float = 0.075
    prior_scale: float = 0.1
    rho_init: float = -5.0
    train_subset: int = 0  # 0 = every training example

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, IMAGE_DATASETS)
        for row in self.rows:
            _checks.one_of("rows", row, ROWS)
        _checks.at_least("hidden", self.hidden, 1)
        _checks.at_least("epochs", self.epochs, 1)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.positive("lr", self.lr)
        _checks.positive("fixed_noise", self.fixed_noise)
        _checks.positive("prior_scale", self.prior_scale)
        _checks.at_least("train_subset", self.train_subset, 0)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(hidden=32, epochs=2, train_subset=3000)
        return replace(base, **overrides)


def make_prior(name: str, scale: float) -> Prior:
    """One prior module of the grid (a fresh one per network: adaptive priors hold state)."""
    return {
        "uniform": lambda: Uniform(),
        "laplace": lambda: Laplace(0.0, scale),
        "gaussian": lambda: Gaussian(0.0, scale),
        "adaptive-laplace": lambda: AdaptiveLaplace(0.0, scale),
        "adaptive-gaussian": lambda: AdaptiveGaussian(0.0, scale),
    }[name]()


def graves_mlp(row: str, config: Config, in_features: int = 784) -> nn.Sequential:
    """784-w-w-10 ReLU network with the row's posterior; one prior shared by all layers."""
    posterior_name, prior_name = row.split("/")
    prior = make_prior(prior_name, config.prior_scale)
    posterior, estimator = {
        "delta": (Delta, "mean"),
        "fixed": (partial(FixedGaussian, std=config.fixed_noise), "local"),
        "adaptive": (partial(DiagonalGaussian, rho_init=config.rho_init), "local"),
    }[posterior_name]
    widths = [in_features, config.hidden, config.hidden, 10]
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(BayesLinear(a, b, prior=prior, posterior=posterior, estimator=estimator))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    data = load_images(config.dataset)
    x, y = data.train_images, data.train_labels
    if config.train_subset:
        x, y = x[: config.train_subset], y[: config.train_subset]
    metrics: dict[str, dict] = {}
    timings: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]):
        for i, row in enumerate(config.rows):
            torch.manual_seed(config.seed)
            generator = torch.Generator().manual_seed(config.seed * 1000 + i)
            model = graves_mlp(row, config, x[0].numel())
            trainer = Trainer(model, config, len(x), refit=row.split("/")[1].startswith("adaptive"))
            saved = out_dir / "checkpoints" / f"{row.replace('/', '-')}.pt"
            done = trainer.resumable(saved, generator, config)
            trainer.epochs((x, y), config.epochs - done, generator, row)
            seconds = trainer.seconds
            dl = description_length(model, _train_nll_nats(model, x, y), len(x), data.num_classes)
            prior = model[1].prior
            metrics[row] = {
                "test_error": _mean_error(model, data.test_images, data.test_labels),
                "epochs": config.epochs,
                **dl.as_dict(),
                "prior": {k: float(v) for k, v in prior.state_dict().items()},
            }
            timings[f"{row}_train_s"] = seconds
    result = Result(
        name="mnist-graves",
        config={**asdict(config), "dataset_used": data.name, "train_examples": len(x)},
        metrics=metrics,
        timings=timings,
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _report(result: Result) -> str:
    c = result.config
    lines = [
        f"# Graves (2011) posterior × prior grid on {c['dataset_used']} (Table 1)",
        "",
        f"784-{c['hidden']}-{c['hidden']}-10 ReLU, Adam lr {c['lr']}, batch {c['batch_size']}, "
        f"{c['epochs']} epochs on {c['train_examples']} examples; fixed weight noise σ₀ = "
        f"{c['fixed_noise']}, fixed priors at scale {c['prior_scale']}. Error at the posterior "
        "mean; L_E on the training set, L_C = KL(q‖p).",
        "",
        "| posterior / prior | test error % | L_E (kbit) | L_C (kbit) | bits / weight | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row, m in result.metrics.items():
        flag = " ‡" if row.endswith("/uniform") else ""
        if row.startswith("delta/") and not row.endswith("uniform"):
            flag = " †"
        lines.append(
            f"| {row} | {100 * m['test_error']:.2f} | {m['error_bits'] / 1e3:.1f} "
            f"| {m['complexity_bits'] / 1e3:.1f}{flag} | {m['bits_per_weight']:.3f} "
            f"| {m['compression_ratio']:.3f}{flag} |"
        )
    lines += [
        "",
        "† a delta posterior's complexity −log p(μ) is a density, not a code length.",
        "‡ under the improper flat prior L_C = −H[q] is defined up to a constant: only",
        "differences between such rows mean anything.",
        "",
    ]
    return "\n".join(lines)
