"""Word-level language model on the Penn Treebank with SGD and SGLD — Gan et al. (2017) §5.1,
Table 4 (the small network).

Zaremba et al.'s small LSTM: 200-d word embeddings, 2 × 200 LSTM, a 10,000-way decoder, every
weight initialized uniform in ±0.1; SGD with lr 1, halved every epoch after the fourth, gradient
norm clipped at 5, 20 streams of 20 words, 13 epochs. Four methods from the same initial
network on the same minibatches: ``sgd``, ``sgd-dropout`` (Zaremba's naive dropout),
``sgld`` (its sampler twin: the same step plus N(0, 2·lr/N) noise, a N(0, 1) prior) and
``sgld-dropout`` (SGLD + dropout, §4.4); under both minibatch schemes of §5.1 — successive
windows with the state carried (``stream``) and random windows from a zero state
(``random``). After burn-in one parameter set is kept every ``thin_epochs``; each is scored
once on the test words, and the table gives the perplexity of the last iterate and of the
model average (for SGD: checkpoint averaging).

The data is Mikolov's PTB (``$TORCHBAYES_DATA/ptb/ptb.{train,valid,test}.txt``, downloaded
when online); ``data_folder`` reads files of the same format from elsewhere, unchecked.
Writes ``word_lm.png``, ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from .. import _checks
from ..data.text import load_ptb
from ..models import CharRNN
from ..samplers import SGLD
from . import char_lm
from ._result import Result, Resumable, prepare_output, write_result

METHODS = ("sgd", "sgd-dropout", "sgld", "sgld-dropout")
SCHEMES = ("stream", "random")


@dataclass
class Config(Resumable):
    """Settings; defaults are Zaremba's small model, ``quick()`` the CI preset."""

    seed: int = 0
    methods: tuple[str, ...] = METHODS
    schemes: tuple[str, ...] = SCHEMES
    hidden: int = 200
    layers: int = 2
    seq_len: int = 20
    batch_size: int = 20
    epochs: int = 13
    lr: float = 1.0
    lr_decay: float = 0.5
    decay_after: int = 4  # epochs at the full learning rate
    init_scale: float = 0.1
    dropout: float = 0.5
    burn_in_epochs: int = 4
    thin_epochs: float = 0.5
    prior_precision: float = 1.0
    clip: float = 5.0
    train_words: int = 0  # 0 = the whole training split
    test_words: int = 0  # 0 = the whole test split
    data_folder: str = ""  # read ptb.*.txt from here instead of $TORCHBAYES_DATA/ptb
    skip_non_finite: bool = False  # skip (and count) steps with a non-finite loss or gradient

    def __post_init__(self) -> None:
        super().__post_init__()
        for method in self.methods:
            _checks.one_of("methods", method, METHODS)
        for scheme in self.schemes:
            _checks.one_of("schemes", scheme, SCHEMES)
        for name in ("hidden", "layers", "seq_len", "batch_size", "epochs"):
            _checks.at_least(name, getattr(self, name), 1)
        _checks.at_least("burn_in_epochs", self.burn_in_epochs, 0)
        if self.burn_in_epochs >= self.epochs:
            raise ValueError(
                f"burn_in_epochs must be < epochs, got burn_in_epochs={self.burn_in_epochs}"
            )
        _checks.at_least("decay_after", self.decay_after, 0)
        for name in ("thin_epochs", "lr", "lr_decay", "init_scale", "prior_precision", "clip"):
            _checks.positive(name, getattr(self, name))
        _checks.below_one("dropout", self.dropout)
        for name in ("train_words", "test_words"):
            _checks.at_least(name, getattr(self, name), 0)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(
            hidden=16,
            epochs=3,
            decay_after=1,
            burn_in_epochs=1,
            thin_epochs=0.5,
            train_words=20_000,
            test_words=4_000,
        )
        return replace(base, **overrides)


def _optimizer(method: str, model: nn.Module, num_data: int, config: Config, generator):
    if method.startswith("sgd"):
        return torch.optim.SGD(model.parameters(), lr=config.lr)
    return SGLD(
        model.parameters(),
        lr=config.lr,
        num_data=num_data,
        weight_decay=config.prior_precision,
        generator=generator,
    )


def _lr_factor(config: Config):
    """Zaremba's schedule: lr × lr_decay^max(0, epoch + 1 − decay_after), epoch from 0."""
    return lambda epoch: config.lr_decay ** max(0, epoch + 1 - config.decay_after)


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    corpus = load_ptb(folder=config.data_folder or None)
    train_ids = corpus.train[: config.train_words] if config.train_words else corpus.train
    test_ids = corpus.test[: config.test_words] if config.test_words else corpus.test
    metrics: dict[str, dict] = {scheme: {} for scheme in config.schemes}
    timings: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]):
        for scheme in config.schemes:
            for i, method in enumerate(config.methods):
                torch.manual_seed(config.seed)  # the same initial network for every method
                dropout = config.dropout if method.endswith("dropout") else 0.0
                model = CharRNN(corpus.vocab_size, config.hidden, config.layers, "lstm", dropout)
                for p in model.parameters():
                    nn.init.uniform_(p, -config.init_scale, config.init_scale)
                generator = torch.Generator().manual_seed(config.seed * 1000 + i)
                optimizer = _optimizer(method, model, len(train_ids) - 1, config, generator)
                schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config))
                collector, seconds, skipped = char_lm.train(
                    model,
                    optimizer,
                    train_ids,
                    config,
                    generator,
                    out_dir / "checkpoints" / f"{scheme}-{method}.pt",
                    scheduler=schedule,
                    desc=f"{scheme} {method}",
                    scheme=scheme,
                )
                timings[f"{scheme}_{method}_train_s"] = seconds
                start = time.perf_counter()
                last, kept = char_lm.score_samples(model, collector, test_ids, config)
                timings[f"{scheme}_{method}_test_s"] = time.perf_counter() - start
                every = list(range(len(kept)))
                metrics[scheme][method] = {
                    "last_perplexity": math.exp(float(-last.mean())),
                    "averaged_perplexity": math.exp(char_lm.averaged_cross_entropy(kept, every)),
                    "samples": len(kept),
                    "skipped_steps": skipped,
                    "sample_perplexity": [math.exp(float(-k.mean())) for k in kept],
                    "averaged_perplexity_curves": char_lm.selection_curves(kept, collector),
                }
    plot = out_dir / "word_lm.png"
    _plot(plot, metrics)
    result = Result(
        name="word-lm",
        config={
            **asdict(config),
            "vocab_size": corpus.vocab_size,
            "train_words": len(train_ids),
            "test_words": len(test_ids),
        },
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _plot(path: Path, metrics: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, (scheme, by_method) in zip(axes[0], metrics.items(), strict=True):
        for method, m in by_method.items():
            curve = m["averaged_perplexity_curves"]["thinned"]
            style = "--" if method.startswith("sgd") else "-"
            ax.plot(range(1, len(curve) + 1), curve, style, label=method)
        ax.set_xlabel("samples averaged (thinned)")
        ax.set_ylabel("test perplexity")
        ax.set_title(f"PTB, {scheme} minibatches")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    lines = [
        "# Word-level PTB language model (Gan et al. 2017, Table 4, small network)",
        "",
        f"LSTM {c['layers']} × {c['hidden']}, vocabulary {c['vocab_size']}; {c['epochs']} "
        f"epochs, lr {c['lr']} × {c['lr_decay']} per epoch after {c['decay_after']}, "
        f"{c['batch_size']} × {c['seq_len']} windows, dropout {c['dropout']} where named; "
        f"burn-in {c['burn_in_epochs']} epochs, one sample per {c['thin_epochs']} epoch. "
        f"{c['train_words']} training and {c['test_words']} test words.",
        "",
        "| minibatches | method | test perplexity, last iterate | average of kept | samples "
        "| train s |",
        "|---|---|---|---|---|---|",
    ]
    for scheme, by_method in result.metrics.items():
        for method, m in by_method.items():
            seconds = result.timings[f"{scheme}_{method}_train_s"]
            lines.append(
                f"| {scheme} | {method} | {m['last_perplexity']:.2f} "
                f"| {m['averaged_perplexity']:.2f} | {m['samples']} | {seconds:.0f} |"
            )
    lines += ["", "SGD's average is over its checkpoints, SGLD's over posterior samples.", ""]
    return "\n".join(lines)
