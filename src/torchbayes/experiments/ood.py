"""Gradient-uncertainty sampling vs SGLD and MC dropout out of distribution — Park et al. (2018).

The five-layer CNN (:func:`torchbayes.models.five_layer_cnn`) is trained four ways with the
same minibatches, learning rate and Gaussian prior N(0, 1/λ) (weight decay λ/N):

* ``sgd``                  — a point estimate (one sample);
* ``mc-dropout``           — binary dropout on the inputs of the three dense layers, its
  masks the posterior (Gal & Ghahramani 2016), trained with SGD;
* ``sgld``                 — SGLD; after burn-in a :class:`~torchbayes.collect.Collector`
  keeps a thinned set of samples;
* ``gradient-uncertainty`` — :class:`~torchbayes.samplers.GradientUncertainty`: SGD, and on
  the steps where the minibatch's per-example gradients disagree (adaptive quantile
  threshold) the parameters are kept as a sample and N(0, σ²) noise is injected. The
  per-example norms come from ghost norms, no per-example gradients.

Each posterior predicts with ``test_samples`` samples (Park et al.: 60): in-distribution test
accuracy, NLL and ECE; predictive entropy, mutual information and max probability on the
test set and on an out-of-distribution set (see :func:`torchbayes.data.ood.load_ood_images`:
notMNIST for MNIST when present; on a machine without MNIST the model is trained on
Fashion-MNIST and tested on handwritten digits, said so in the output), with the AUROC of
each score for telling the two apart (Table 1). Figures: predictive distributions of the
most confusing test images and of OOD images (Figs. 1–2), and entropy histograms.

Writes ``ood_predictive.png``, ``ood_entropy.png``, ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import _checks
from ..collect import Collector
from ..data import load_images
from ..data.images import IMAGE_DATASETS
from ..data.ood import load_ood_images
from ..metrics import ood_report
from ..models import five_layer_cnn
from ..nn import BayesLinear
from ..per_example import PerExampleGradNorms
from ..posterior import Posterior, SampleSet, VariationalPosterior
from ..predict import ClassPrediction, predict_classes
from ..priors import Uniform
from ..samplers import SGLD, GradientUncertainty
from ..variational import BernoulliDropout
from ..vi import check_finite
from ._result import Result, Resumable, prepare_output, write_result

METHODS = ("sgd", "mc-dropout", "sgld", "gradient-uncertainty")


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "auto"
    methods: tuple[str, ...] = METHODS
    epochs: int = 6
    burn_in_epochs: int = 2
    batch_size: int = 100
    lr: float = 0.05
    prior_precision: float = 1.0
    dropout: float = 0.5
    noise_std: float = 0.01
    quantile: float = 0.1
    window: int = 100
    sgld_samples: int = 100
    test_samples: int = 60
    train_subset: int = 0  # 0 = every training example
    test_subset: int = 0  # 0 = the whole test set

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, IMAGE_DATASETS)
        for m in self.methods:
            _checks.one_of("methods", m, METHODS)
        _checks.at_least("epochs", self.epochs, 1)
        _checks.at_least("burn_in_epochs", self.burn_in_epochs, 0)
        if self.burn_in_epochs >= self.epochs:
            raise ValueError(
                f"burn_in_epochs must be < epochs={self.epochs}, got "
                f"burn_in_epochs={self.burn_in_epochs!r}"
            )
        _checks.at_least("batch_size", self.batch_size, 2)
        _checks.positive("lr", self.lr)
        _checks.non_negative("prior_precision", self.prior_precision)
        _checks.below_one("dropout", self.dropout, zero_allowed=False)
        _checks.positive("noise_std", self.noise_std)
        _checks.below_one("quantile", self.quantile, zero_allowed=False)
        _checks.at_least("window", self.window, 2)
        _checks.at_least("sgld_samples", self.sgld_samples, 1)
        _checks.at_least("test_samples", self.test_samples, 1)
        _checks.at_least("train_subset", self.train_subset, 0)
        _checks.at_least("test_subset", self.test_subset, 0)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(
            epochs=2,
            burn_in_epochs=1,
            train_subset=2000,
            test_subset=500,
            window=10,
            sgld_samples=10,
            test_samples=8,
        )
        return replace(base, **overrides)


def mc_dropout_cnn(p: float) -> nn.Sequential:
    """The five-layer CNN whose dense layers drop their inputs at rate p (weights θ·z/(1−p))."""
    model = five_layer_cnn()
    for i, layer in enumerate(model):
        if isinstance(layer, nn.Linear):
            model[i] = BayesLinear(
                layer.in_features,
                layer.out_features,
                prior=Uniform(),
                posterior=partial(BernoulliDropout, p=p),
                estimator="local",
                init_from=layer,
            )
    return model


@dataclass
class Trained:
    posterior: Posterior
    seconds: float
    ms_per_step: float
    steps: int
    sampled_steps: int = 0
    kept_samples: int = 1


def train(
    method: str, config: Config, x: Tensor, y: Tensor, seed: int, checkpoint: Path | None = None
) -> Trained:
    """Train one method on (x, y); returns its posterior and the training statistics.

    With ``checkpoint`` (a file path) the run is saved every ``config.checkpoint_every``
    epochs and at the end, its samples kept as files beside it; with ``config.resume`` it
    continues from the last save."""
    torch.manual_seed(seed)
    model = mc_dropout_cnn(config.dropout) if method == "mc-dropout" else five_layer_cnn()
    n = len(x)
    steps_per_epoch = math.ceil(n / config.batch_size)
    burn_in = config.burn_in_epochs * steps_per_epoch
    sampling_steps = (config.epochs - config.burn_in_epochs) * steps_per_epoch
    noise = torch.Generator().manual_seed(seed + 1)
    collector, norms = None, None
    samples_dir = checkpoint.with_suffix(".samples") if checkpoint else None
    if method in ("sgd", "mc-dropout"):
        optimizer = torch.optim.SGD(
            model.parameters(), lr=config.lr, weight_decay=config.prior_precision / n
        )
    elif method == "sgld":
        thin = max(1, sampling_steps // config.sgld_samples)
        collector = Collector(model, burn_in=burn_in, thin=thin, directory=samples_dir)
        optimizer = SGLD(model.parameters(), config.lr, n, config.prior_precision, generator=noise)
    else:
        collector = Collector(model, burn_in=burn_in, directory=samples_dir)
        norms = PerExampleGradNorms(model)
        optimizer = GradientUncertainty(
            model.parameters(),
            config.lr,
            n,
            noise_std=config.noise_std,
            quantile=config.quantile,
            window=config.window,
            weight_decay=config.prior_precision,
            generator=noise,
            collector=collector,
        )
    order_generator = torch.Generator().manual_seed(seed)
    objects = {"model": model, "optimizer": optimizer, "order": order_generator, "noise": noise}
    saver, first_epoch, done = config.checkpoint(checkpoint, {**objects, "collector": collector})
    step = first_epoch * steps_per_epoch
    start = time.perf_counter() - done.get("seconds", 0.0)
    model.train()
    epochs = range(first_epoch, config.epochs)
    for epoch in tqdm(epochs, desc=method, leave=False, mininterval=2):
        for batch in torch.randperm(n, generator=order_generator).split(config.batch_size):
            optimizer.zero_grad(set_to_none=True)
            if norms is not None:
                loss, sq_norms = norms(x[batch], y[batch])
                check_finite(loss, step)
                optimizer.step(sq_norms=sq_norms)
            else:
                loss = F.cross_entropy(model(x[batch]), y[batch])
                check_finite(loss, step)
                loss.backward()
                optimizer.step()
                if collector is not None:
                    collector.step()
            step += 1
        if saver is not None:
            seconds = time.perf_counter() - start
            saver.step(epoch + 1, final=epoch + 1 == config.epochs, seconds=seconds)
    seconds = time.perf_counter() - start
    if norms is not None:
        norms.remove()
    model.eval()
    trained = Trained(SampleSet.point(model), seconds, 1000 * seconds / step, step)
    if method == "mc-dropout":
        trained.posterior = VariationalPosterior(model)
        trained.kept_samples = config.test_samples
    elif collector is not None:
        if len(collector) == 0:
            raise RuntimeError(f"{method} kept no samples after burn-in; lower burn_in_epochs")
        count = min(config.test_samples, len(collector))
        trained.posterior = collector.posterior(count, "thinned")
        trained.kept_samples = len(collector)
    if isinstance(optimizer, GradientUncertainty):
        trained.sampled_steps = optimizer.num_sampled
    return trained


def predictive(posterior: Posterior, images: Tensor, config: Config, seed: int) -> ClassPrediction:
    """The S-sample predictive (S capped by the samples a posterior holds), the same S weight
    samples for every input."""
    distinct = posterior.distinct_samples
    samples = config.test_samples if distinct is None else min(distinct, config.test_samples)
    torch.manual_seed(seed)
    return predict_classes(posterior, images, samples, chunk_size=10, input_batch_size=1000)


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    data = load_images(config.dataset)
    ood_name, ood_images = load_ood_images(data.name)
    x, y = data.train_images, data.train_labels
    if config.train_subset:
        x, y = x[: config.train_subset], y[: config.train_subset]
    x_test, y_test = data.test_images, data.test_labels
    if config.test_subset:
        x_test, y_test = x_test[: config.test_subset], y_test[: config.test_subset]
        ood_images = ood_images[: config.test_subset]
    metrics: dict[str, dict] = {}
    timings: dict[str, float] = {}
    predictions: dict[str, tuple[ClassPrediction, ClassPrediction]] = {}
    with torch.random.fork_rng(devices=[]):
        for i, method in enumerate(config.methods):
            seed = config.seed * 1000 + i
            saved = out_dir / "checkpoints" / f"{method}.pt"
            trained = train(method, config, x, y, seed, saved)
            start = time.perf_counter()
            inside = predictive(trained.posterior, x_test, config, seed)
            outside = predictive(trained.posterior, ood_images, config, seed)
            timings[f"{method}_predict_s"] = time.perf_counter() - start
            timings[f"{method}_train_s"] = trained.seconds
            timings[f"{method}_ms_per_step"] = trained.ms_per_step
            scores = ood_report(inside, y_test, outside)
            scores.update(
                steps=trained.steps,
                sampled_steps=trained.sampled_steps,
                kept_samples=trained.kept_samples,
                predictive_samples=min(
                    trained.posterior.distinct_samples or config.test_samples, config.test_samples
                ),
            )
            metrics[method] = scores
            predictions[method] = (inside, outside)
    files = {
        "predictive": str(out_dir / "ood_predictive.png"),
        "entropy": str(out_dir / "ood_entropy.png"),
    }
    _plot_predictive(
        Path(files["predictive"]), predictions, x_test, ood_images, data.name, ood_name
    )
    _plot_entropy(Path(files["entropy"]), predictions, data.name, ood_name)
    result = Result(
        name="ood",
        config={
            **asdict(config),
            "dataset_used": data.name,
            "ood_dataset": ood_name,
            "train_examples": len(x),
            "test_examples": len(x_test),
            "ood_examples": len(ood_images),
        },
        metrics=metrics,
        timings=timings,
        files=files,
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _confusing(predictions: dict[str, tuple[ClassPrediction, ClassPrediction]], k: int) -> Tensor:
    """The k test inputs with the highest predictive entropy averaged over the methods."""
    mean_entropy = torch.stack([inside.total_entropy for inside, _ in predictions.values()])
    return mean_entropy.mean(0).topk(k).indices


def _plot_predictive(
    path: Path,
    predictions: dict[str, tuple[ClassPrediction, ClassPrediction]],
    x_test: Tensor,
    ood_images: Tensor,
    dataset: str,
    ood_name: str,
    per_set: int = 4,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    generator = torch.Generator().manual_seed(0)
    rows = [("in", int(i)) for i in _confusing(predictions, per_set)]
    rows += [
        ("out", int(i)) for i in torch.randperm(len(ood_images), generator=generator)[:per_set]
    ]
    methods = list(predictions)
    fig, axes = plt.subplots(
        len(rows), len(methods) + 1, figsize=(2.2 * (len(methods) + 1), 1.6 * len(rows))
    )
    for r, (where, index) in enumerate(rows):
        image = (x_test if where == "in" else ood_images)[index, 0]
        axes[r, 0].imshow(image.numpy(), cmap="gray")
        axes[r, 0].set_xticks([])
        axes[r, 0].set_yticks([])
        label = f"{dataset} #{index}" if where == "in" else f"{ood_name} #{index}"
        axes[r, 0].set_ylabel(label, fontsize=7)
        for c, method in enumerate(methods, start=1):
            prediction = predictions[method][0 if where == "in" else 1]
            probs = prediction.probs[index].numpy()
            axes[r, c].bar(range(len(probs)), probs, color="C0" if where == "in" else "C3")
            axes[r, c].set_ylim(0, 1)
            axes[r, c].set_xticks(range(len(probs)))
            axes[r, c].tick_params(labelsize=6)
            entropy = float(prediction.total_entropy[index])
            axes[r, c].set_title(f"H = {entropy:.2f}", fontsize=7)
            if r == 0:
                axes[r, c].text(
                    0.5, 1.35, method, transform=axes[r, c].transAxes, ha="center", fontsize=8
                )
    fig.suptitle(
        f"Predictive distributions: confusing {dataset} test images (blue), {ood_name} (red)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_entropy(
    path: Path,
    predictions: dict[str, tuple[ClassPrediction, ClassPrediction]],
    dataset: str,
    ood_name: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(predictions)
    fig, axes = plt.subplots(1, len(methods), figsize=(3 * len(methods), 2.8), sharey=True)
    axes = [axes] if len(methods) == 1 else list(axes)
    bins = torch.linspace(0, math.log(predictions[methods[0]][0].probs.shape[1]), 31)
    for ax, method in zip(axes, methods, strict=True):
        inside, outside = predictions[method]
        for values, label in ((inside.total_entropy, dataset), (outside.total_entropy, ood_name)):
            ax.hist(values.numpy(), bins=bins.numpy(), density=True, alpha=0.6, label=label)
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("predictive entropy (nats)")
    axes[0].set_ylabel("density")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    lines = [
        f"# Out-of-distribution uncertainty: {c['dataset_used']} vs {c['ood_dataset']} "
        "(Park et al. 2018, Table 1)",
        "",
        f"Five-layer CNN, SGD lr {c['lr']}, batch {c['batch_size']}, {c['epochs']} epochs on "
        f"{c['train_examples']} examples (burn-in {c['burn_in_epochs']}), prior N(0, "
        f"1/{c['prior_precision']}); gradient uncertainty: σ = {c['noise_std']}, threshold = "
        f"{c['quantile']}-quantile of the last {c['window']} steps. Up to {c['test_samples']} "
        f"posterior samples; {c['test_examples']} test and {c['ood_examples']} OOD images.",
        "",
        "| method | accuracy % | NLL | ECE | entropy in | entropy OOD | MI OOD "
        "| AUROC entropy | AUROC MI | AUROC max p | samples |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, m in result.metrics.items():
        lines.append(
            f"| {method} | {100 * m['accuracy']:.2f} | {m['nll']:.3f} | {m['ece']:.3f} "
            f"| {m['in_entropy']:.3f} | {m['ood_entropy']:.3f} "
            f"| {m['ood_mutual_information']:.3f} | {m['auroc_entropy']:.3f} "
            f"| {m['auroc_mutual_information']:.3f} | {m['auroc_max_probability']:.3f} "
            f"| {m['predictive_samples']} |"
        )
    lines += [
        "",
        "Paper (MNIST vs notMNIST): OOD entropy 1.355 (gradient uncertainty), 0.107 (SGLD), "
        "0.665 (dropout); accuracy 98.05 %.",
        "",
    ]
    gu = result.metrics.get("gradient-uncertainty")
    if gu:
        lines.append(
            f"Gradient uncertainty sampled on {gu['sampled_steps']} of {gu['steps']} steps "
            f"and kept {gu['kept_samples']} samples after burn-in."
        )
        lines.append("")
    return "\n".join(lines)
