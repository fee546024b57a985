"""Sentence classification with a bidirectional LSTM under RMSprop and pSGLD — Gan et al.
(2017) §5.4, Tables 6–7, Fig. 6.

A :class:`~torchbayes.models.SentenceClassifier` (300-d word embeddings learned from scratch,
bidirectional LSTM with 400 units, the two final states → linear) is trained four ways from the
same initial weights on the same minibatches:

* ``rmsprop`` / ``rmsprop-dropout`` — the optimizer, without and with naive dropout (0.5 on
  the words and on the sentence vector);
* ``rmsprop-gal-dropout`` — RMSprop with Gal's dropout for RNNs (one mask per sentence on the
  embedding dimensions and on the recurrent state of each direction, shared over its words,
  plus 0.5 on the sentence vector);
* ``psgld`` / ``psgld-dropout`` — its sampler twin pSGLD, without and with naive dropout
  (SGLD + dropout, §4.4); ``psgld-gal-dropout`` on request.

After burn-in a :class:`~torchbayes.collect.Collector` keeps one parameter set every
``thin_epochs``. Each kept set is scored once on the test sentences (dropout off); Table 6 is
the error of the model average — for pSGLD a posterior average, for RMSprop checkpoint
averaging (M2 of Table 7) — and Table 7 adds the last iterate (M1). TREC uses its given
split ``repeats`` times (seeds ``seed``, ``seed`` + 1, …); MR, CR, SUBJ and MPQA use
``folds``-fold cross-validation (one run per fold). Fig. 6 in words: the test sentences whose
pSGLD predictive is most uncertain, with the mean and standard deviation over samples of the
predicted class's probability.

Writes ``sentence.png``, ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import _checks
from ..collect import Collector
from ..data.sentence import SENTENCE_SETS, Vocabulary, cv_folds, load_sentences
from ..models import SentenceClassifier
from ..vi import FiniteGuard
from ._optim import rmsprop_or_psgld, sampling_temperature
from ._result import Result, Resumable, prepare_output, write_result

METHODS = (
    "rmsprop",
    "rmsprop-dropout",
    "rmsprop-gal-dropout",
    "psgld",
    "psgld-dropout",
    "psgld-gal-dropout",
)
DEFAULT_METHODS = METHODS[:5]  # Table 6's rows
PAPER = {"trec": {"rmsprop": 8.14, "psgld": 7.48}}  # Table 6, test error %


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    dataset: str = "trec"
    methods: tuple[str, ...] = DEFAULT_METHODS
    repeats: int = 3  # TREC: runs with seeds seed, seed + 1, …
    folds: int = 10
    embed: int = 300
    hidden: int = 400
    dropout: float = 0.5
    epochs: int = 8
    burn_in_epochs: int = 3
    thin_epochs: float = 0.5
    batch_size: int = 50
    lr: float = 1e-3
    alpha: float = 0.99
    prior_precision: float = 1.0
    temperature: float = 1.0  # pSGLD samples p(θ|D)^(1/T)
    paper_noise: bool = False  # T = 2/N instead: the noise scale of Gan et al.'s code
    clip: float = 5.0
    train_subset: int = 0  # 0 = every training sentence
    most_uncertain: int = 8
    skip_non_finite: bool = False  # skip (and count) steps with a non-finite loss or gradient

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("dataset", self.dataset, tuple(SENTENCE_SETS))
        for method in self.methods:
            _checks.one_of("methods", method, METHODS)
        _checks.at_least("repeats", self.repeats, 1)
        _checks.at_least("folds", self.folds, 2)
        for name in ("embed", "hidden", "epochs", "batch_size"):
            _checks.at_least(name, getattr(self, name), 1)
        _checks.at_least("burn_in_epochs", self.burn_in_epochs, 0)
        if self.burn_in_epochs >= self.epochs:
            raise ValueError(
                f"burn_in_epochs must be < epochs, got burn_in_epochs={self.burn_in_epochs}"
            )
        _checks.below_one("dropout", self.dropout)
        for name in ("thin_epochs", "lr", "prior_precision", "clip"):
            _checks.positive(name, getattr(self, name))
        _checks.non_negative("temperature", self.temperature)
        _checks.at_least("train_subset", self.train_subset, 0)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(
            repeats=1,
            folds=2,
            embed=16,
            hidden=16,
            epochs=3,
            burn_in_epochs=1,
            train_subset=600,
            most_uncertain=3,
        )
        return replace(base, **overrides)


@dataclass
class Split:
    """One train/test split, encoded with a vocabulary of its training sentences."""

    train: tuple[Tensor, Tensor, Tensor]  # ids, lengths, labels
    test: tuple[Tensor, Tensor, Tensor]
    test_text: list[str]
    vocab_size: int


def _encode(sentences, labels, test_sentences, test_labels) -> Split:
    vocab = Vocabulary(sentences)
    return Split(
        (*vocab.encode(sentences), labels),
        (*vocab.encode(test_sentences), test_labels),
        [" ".join(s) for s in test_sentences],
        len(vocab),
    )


def splits(config: Config) -> list[tuple[int, Split]]:
    """(seed, split) for every run: TREC's own split once per seed, or one run per CV fold."""
    data = load_sentences(config.dataset)
    sentences, labels = data.sentences, data.labels
    if data.test_sentences is not None:
        if config.train_subset:
            sentences, labels = sentences[: config.train_subset], labels[: config.train_subset]
        split = _encode(sentences, labels, data.test_sentences, data.test_labels)
        return [(config.seed + r, split) for r in range(config.repeats)]
    runs = []
    for fold, test_index in enumerate(cv_folds(len(sentences), config.folds, config.seed)):
        mask = torch.ones(len(sentences), dtype=torch.bool)
        mask[test_index] = False
        train_index = mask.nonzero().squeeze(1)
        if config.train_subset:
            train_index = train_index[: config.train_subset]
        runs.append((
            config.seed + fold,
            _encode(
                [sentences[i] for i in train_index.tolist()],
                labels[train_index],
                [sentences[i] for i in test_index.tolist()],
                labels[test_index],
            ),
        ))  # fmt: skip
    return runs


def train(
    method: str,
    split: Split,
    num_classes: int,
    config: Config,
    seed: int,
    checkpoint: Path | None = None,
) -> tuple[SentenceClassifier, Collector, float]:
    """Train one network with ``method``; returns it, its collector and the training seconds.

    With ``checkpoint`` (a file path) the run is saved every ``config.checkpoint_every``
    epochs and at the end, its samples kept as files beside it; with ``config.resume`` it
    continues from there (a finished run is only reloaded)."""
    torch.manual_seed(seed)  # the same initial network for every method
    dropout = config.dropout if method.endswith("dropout") else 0.0
    kind = "gal" if "-gal-" in method else "naive"
    model = SentenceClassifier(
        split.vocab_size,
        num_classes,
        config.embed,
        config.hidden,
        dropout=dropout,
        dropout_kind=kind,
    )
    ids, lengths, labels = split.train
    generator = torch.Generator().manual_seed(seed)  # the same minibatches for every method
    noise = torch.Generator().manual_seed(seed + 7919)
    optimizer = rmsprop_or_psgld(
        method,
        model.parameters(),
        lr=config.lr,
        alpha=config.alpha,
        num_data=len(ids),
        prior_precision=config.prior_precision,
        generator=noise,
        temperature=sampling_temperature(config.temperature, config.paper_noise, len(ids)),
    )
    per_epoch = math.ceil(len(ids) / config.batch_size)
    collector = Collector(
        model,
        burn_in=config.burn_in_epochs * per_epoch,
        thin=Collector.epochs(config.thin_epochs, per_epoch),
        directory=checkpoint.with_suffix(".samples") if checkpoint else None,
    )
    objects = {"model": model, "optimizer": optimizer, "collector": collector}
    generators = {"batches": generator, "noise": noise}
    saver, first_epoch, done = config.checkpoint(checkpoint, {**objects, **generators})
    guard = FiniteGuard(model, skip=config.skip_non_finite)
    guard.skipped = done.get("skipped", 0)
    model.train()
    step, start = first_epoch * per_epoch, time.perf_counter() - done.get("seconds", 0.0)
    epochs = range(first_epoch, config.epochs)
    for epoch in tqdm(epochs, desc=f"{method} seed {seed}", leave=False):
        for batch in torch.randperm(len(ids), generator=generator).split(config.batch_size):
            optimizer.zero_grad(set_to_none=True)
            width = int(lengths[batch].max())
            loss = F.cross_entropy(model(ids[batch, :width], lengths[batch]), labels[batch])
            loss.backward()
            if guard(loss, step):
                nn.utils.clip_grad_norm_(model.parameters(), config.clip)
                optimizer.step()
            collector.step()
            step += 1
        if saver is not None:
            seconds = time.perf_counter() - start
            final = epoch + 1 == config.epochs
            saver.step(epoch + 1, final=final, seconds=seconds, skipped=guard.skipped)
    return model, collector, time.perf_counter() - start, guard.skipped


@torch.no_grad()
def test_probs(model: SentenceClassifier, params: list[dict[str, Tensor]], split: Split) -> Tensor:
    """Class probabilities (samples, sentences, classes) of each parameter set, dropout off.

    A loop over samples, not vmap: the packed fused LSTM kernel has no batching rule.
    """
    model.eval()
    ids, lengths, _ = split.test
    out = []
    for p in params:
        model.load_state_dict(p, strict=False)
        out.append(model(ids, lengths).softmax(-1))
    return torch.stack(out)


def _error(probs: Tensor, labels: Tensor) -> float:
    return float((probs.argmax(-1) != labels).float().mean())


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    runs = splits(config)
    data_classes = load_sentences(config.dataset).num_classes
    per_run: dict[str, list[dict[str, float]]] = {m: [] for m in config.methods}
    timings: dict[str, float] = {}
    uncertain: list[dict] = []
    curves: dict[str, list[float]] = {}
    with torch.random.fork_rng(devices=[]):
        for run_index, (seed, split) in enumerate(runs):
            labels = split.test[2]
            for method in config.methods:
                saved = out_dir / "checkpoints" / f"{method}-run{run_index}.pt"
                model, collector, seconds, skipped = train(
                    method, split, data_classes, config, seed, saved
                )
                timings[f"{method}_run{run_index}_train_s"] = seconds
                last = test_probs(model, [dict(model.named_parameters())], split)[0]
                probs = test_probs(model, collector.samples(), split)
                average = probs.mean(0)
                per_run[method].append({
                    "seed": seed,
                    "last_error": _error(last, labels),
                    "averaged_error": _error(average, labels),
                    "samples": len(probs),
                    "skipped_steps": skipped,
                })  # fmt: skip
                if run_index == 0:
                    running = probs.cumsum(0) / torch.arange(1, len(probs) + 1).view(-1, 1, 1)
                    curves[method] = [_error(r, labels) for r in running]
                    if method.startswith("psgld"):
                        uncertain += _most_uncertain(method, probs, split, config)
    metrics = {
        method: {
            "runs": rows,
            **{
                f"{key}_mean": statistics.mean(r[key] for r in rows)
                for key in ("last_error", "averaged_error")
            },
            **{
                f"{key}_std": statistics.stdev(r[key] for r in rows) if len(rows) > 1 else 0.0
                for key in ("last_error", "averaged_error")
            },
            "error_vs_samples": curves.get(method, []),
        }
        for method, rows in per_run.items()
    }
    metrics["most_uncertain"] = uncertain
    plot = out_dir / "sentence.png"
    _plot(plot, curves, config.dataset)
    result = Result(
        name="sentence",
        config={
            **asdict(config),
            "runs": len(runs),
            "train_sentences": len(runs[0][1].train[0]),
            "test_sentences": len(runs[0][1].test[0]),
            "vocab_size": runs[0][1].vocab_size,
        },
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _most_uncertain(method: str, probs: Tensor, split: Split, config: Config) -> list[dict]:
    """The test sentences with the highest predictive entropy under ``method``'s samples."""
    average = probs.mean(0)
    entropy = -(average * average.clamp_min(1e-12).log()).sum(-1)
    predicted = average.argmax(-1)
    chosen = probs.gather(-1, predicted.expand(len(probs), -1).unsqueeze(-1)).squeeze(-1)
    rows = []
    for i in entropy.argsort(descending=True)[: config.most_uncertain].tolist():
        rows.append({
            "method": method,
            "sentence": split.test_text[i],
            "label": int(split.test[2][i]),
            "predicted": int(predicted[i]),
            "probability_mean": float(chosen[:, i].mean()),
            "probability_std": float(chosen[:, i].std()) if len(probs) > 1 else 0.0,
            "entropy": float(entropy[i]),
        })  # fmt: skip
    return rows


def _plot(path: Path, curves: dict[str, list[float]], dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, curve in curves.items():
        style = "--" if method.startswith("rmsprop") else "-"
        ax.plot(range(1, len(curve) + 1), [100 * e for e in curve], style, label=method)
    ax.set_xlabel("samples averaged (collection order)")
    ax.set_ylabel("test error %")
    ax.set_title(f"{dataset}: model averaging (dashed: RMSprop checkpoints, M2)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    how = f"{c['runs']} seeds" if c["dataset"] == "trec" else f"{c['runs']}-fold CV"
    lines = [
        f"# Sentence classification on {c['dataset']} (Gan et al. 2017, Tables 6–7)",
        "",
        f"Bidirectional LSTM, {c['hidden']} units, {c['embed']}-d embeddings learned from "
        f"scratch; {c['epochs']} epochs, batch {c['batch_size']}, lr {c['lr']}; burn-in "
        f"{c['burn_in_epochs']} epochs, one sample per {c['thin_epochs']} epoch; dropout "
        f"{c['dropout']} where named. {c['train_sentences']} training and "
        f"{c['test_sentences']} test sentences; mean ± std over {how}.",
        "",
        "| method | test error %, average of kept (Table 6) | last iterate, M1 (Table 7) "
        "| samples | paper |",
        "|---|---|---|---|---|",
    ]
    for method, m in result.metrics.items():
        if method == "most_uncertain":
            continue
        paper = PAPER.get(c["dataset"], {}).get(method, "–")
        lines.append(
            f"| {method} | {100 * m['averaged_error_mean']:.2f} ± "
            f"{100 * m['averaged_error_std']:.2f} | {100 * m['last_error_mean']:.2f} ± "
            f"{100 * m['last_error_std']:.2f} | {m['runs'][0]['samples']} | {paper} |"
        )
    lines += [
        "",
        "RMSprop's average is over its checkpoints (M2 of Table 7), pSGLD's over posterior "
        "samples.",
        "",
        "## Most uncertain test sentences (pSGLD, first run; Fig. 6 in words)",
        "",
        "| method | sentence | label | predicted | p(predicted): mean ± std | entropy |",
        "|---|---|---|---|---|---|",
    ]
    for row in result.metrics["most_uncertain"]:
        sentence = row["sentence"].replace("|", "\\|")
        lines.append(
            f"| {row['method']} | {sentence} | {row['label']} | {row['predicted']} "
            f"| {row['probability_mean']:.2f} ± {row['probability_std']:.2f} "
            f"| {row['entropy']:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)
