"""Character-level language models under RMSprop and pSGLD — Gan et al. (2017) §5.1, Table 3,
Fig. 2.

Two-layer LSTM, GRU and vanilla-RNN language models (:class:`~torchbayes.models.CharRNN`,
128 units) trained on War and Peace with RMSprop and with its sampler twin pSGLD
(:class:`~torchbayes.samplers.PSGLD`, the same lr, β and prior), on the same windows from the
same initial weights. Windows follow each other in ``batch_size`` parallel streams with the
hidden state carried over (``scheme="stream"``), or come at random offsets from a zero state
(``scheme="random"``). Gradients are clipped to norm ``clip`` for both methods.

After burn-in a :class:`~torchbayes.collect.Collector` keeps one parameter set every
``thin_epochs``. Every kept set is run once over the test text (streams, carried state) and
its per-character log-probabilities stored, so any subset's model average is a
``logsumexp`` away: reported are the test cross-entropy (nats per character) of the last
iterate and of the average of all kept sets (for RMSprop that average is checkpoint
averaging, M2 of Table 7, not a posterior), and Fig. 2 — the perplexity of each single sample
and of the average of the first K samples under forward, backward and thinned collection.

Writes ``char_lm.png``, ``result.json`` and ``report.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import _checks
from ..collect import SELECTIONS, Collector
from ..data import CharCorpus, load_text, random_windows, stream_batches
from ..data.text import CORPORA
from ..models import RECURRENT_CELLS, CharRNN, detach_state
from ..vi import FiniteGuard
from ._optim import rmsprop_or_psgld, sampling_temperature
from ._result import Result, Resumable, prepare_output, write_result

METHODS = ("rmsprop", "psgld")
SCHEMES = ("stream", "random")
PAPER = {"lstm": {"rmsprop": 1.3607, "psgld": 1.3375}}  # Table 3, War and Peace, test CE


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    corpus: str = "warpeace"
    cells: tuple[str, ...] = ("lstm", "gru", "rnn")
    methods: tuple[str, ...] = METHODS
    hidden: int = 128
    layers: int = 2
    seq_len: int = 100
    batch_size: int = 100
    epochs: int = 6
    burn_in_epochs: int = 2
    thin_epochs: float = 0.25
    lr: float = 2e-3
    alpha: float = 0.99
    prior_precision: float = 1.0
    temperature: float = 1.0  # pSGLD samples p(θ|D)^(1/T)
    paper_noise: bool = False  # T = 2/N instead: the noise scale of Gan et al.'s code
    clip: float = 5.0
    scheme: str = "stream"
    train_chars: int = 0  # 0 = the whole training split
    test_chars: int = 0  # 0 = the whole test split
    skip_non_finite: bool = False  # skip (and count) steps with a non-finite loss or gradient

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.one_of("corpus", self.corpus, tuple(CORPORA))
        for cell in self.cells:
            _checks.one_of("cells", cell, tuple(RECURRENT_CELLS))
        for method in self.methods:
            _checks.one_of("methods", method, METHODS)
        _checks.one_of("scheme", self.scheme, SCHEMES)
        for name in ("hidden", "layers", "seq_len", "batch_size", "epochs"):
            _checks.at_least(name, getattr(self, name), 1)
        _checks.at_least("burn_in_epochs", self.burn_in_epochs, 0)
        if self.burn_in_epochs >= self.epochs:
            raise ValueError(
                f"burn_in_epochs must be < epochs, got burn_in_epochs={self.burn_in_epochs}"
            )
        for name in ("thin_epochs", "lr", "prior_precision", "clip"):
            _checks.positive(name, getattr(self, name))
        _checks.non_negative("temperature", self.temperature)
        _checks.at_least("train_chars", self.train_chars, 0)
        _checks.at_least("test_chars", self.test_chars, 0)

    @classmethod
    def quick(cls, **overrides) -> Config:
        base = cls(
            corpus="tinyshakespeare",
            hidden=32,
            seq_len=50,
            batch_size=20,
            epochs=3,
            burn_in_epochs=1,
            thin_epochs=0.5,
            train_chars=40_000,
            test_chars=5_000,
        )
        return replace(base, **overrides)


def _windows(ids: Tensor, config: Config, generator: torch.Generator, scheme: str):
    if scheme == "stream":
        return stream_batches(ids, config.batch_size, config.seq_len)
    return random_windows(ids, config.batch_size, config.seq_len, generator)


def steps_per_epoch(num_chars: int, config: Config, scheme: str | None = None) -> int:
    if (scheme or config.scheme) == "stream":
        return math.ceil(((num_chars - 1) // config.batch_size) / config.seq_len)
    return max(1, (num_chars - 1) // (config.batch_size * config.seq_len))


def train(
    model: CharRNN,
    optimizer: torch.optim.Optimizer,
    ids: Tensor,
    config: Config,
    generator: torch.Generator,
    checkpoint: Path | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    desc: str = "",
    scheme: str | None = None,
) -> tuple[Collector, float, int]:
    """Train ``model`` on the token stream ``ids`` with ``optimizer`` (an optimizer or an
    SG-MCMC sampler; ``scheduler`` stepped once per epoch). Returns the collector of kept
    parameter sets, the seconds spent in the training loop and the skipped steps.

    ``config`` needs the fields of :class:`Config` used here (the word model shares this
    loop); ``scheme`` overrides ``config.scheme``. With ``checkpoint`` (a file path) the run
    is saved every ``config.checkpoint_every`` epochs and at the end, its samples kept as
    files beside it; with ``config.resume`` it continues from there (a finished run is only
    reloaded)."""
    scheme = scheme or config.scheme
    per_epoch = steps_per_epoch(len(ids), config, scheme)
    collector = Collector(
        model,
        burn_in=config.burn_in_epochs * per_epoch,
        thin=Collector.epochs(config.thin_epochs, per_epoch),
        directory=checkpoint.with_suffix(".samples") if checkpoint else None,
    )
    objects = {"model": model, "optimizer": optimizer, "collector": collector}
    objects.update(scheduler=scheduler, generator=generator)
    saver, first_epoch, done = config.checkpoint(checkpoint, objects)
    guard = FiniteGuard(model, skip=config.skip_non_finite)
    guard.skipped = done.get("skipped", 0)
    model.train()
    step, start = first_epoch * per_epoch, time.perf_counter() - done.get("seconds", 0.0)
    epochs = range(first_epoch, config.epochs)
    for epoch in tqdm(epochs, desc=desc, leave=False):
        state = None
        for inputs, targets in _windows(ids, config, generator, scheme):
            if scheme == "random":
                state = None
            optimizer.zero_grad(set_to_none=True)
            logits, state = model(inputs, state)
            state = detach_state(state)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            if guard(loss, step):
                nn.utils.clip_grad_norm_(model.parameters(), config.clip)
                optimizer.step()
            collector.step()
            step += 1
        if scheduler is not None:
            scheduler.step()
        if saver is not None:
            seconds = time.perf_counter() - start
            final = epoch + 1 == config.epochs
            saver.step(epoch + 1, final=final, seconds=seconds, skipped=guard.skipped)
    return collector, time.perf_counter() - start, guard.skipped


@torch.no_grad()
def test_log_probs(
    model: CharRNN, params: dict[str, Tensor], ids: Tensor, config: Config
) -> Tensor:
    """log p(x_t | x_<t) of every test character under one parameter set, reading the test text
    as ``batch_size`` streams with carried state (shape: characters used)."""
    model.load_state_dict(params, strict=False)
    model.eval()
    state, out = None, []
    for inputs, targets in stream_batches(ids, config.batch_size, config.seq_len):
        logits, state = model(inputs, state)
        out.append(logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    return torch.cat(out, dim=1).reshape(-1)


def score_samples(
    model: CharRNN, collector: Collector, ids: Tensor, config: Config
) -> tuple[Tensor, Tensor]:
    """Test log-probabilities under the final parameters (characters,) and under every kept
    sample (samples, characters), each scored once."""
    last = test_log_probs(model, dict(model.named_parameters()), ids, config)
    kept = torch.stack([test_log_probs(model, p, ids, config) for p in collector.samples()])
    return last, kept


def averaged_cross_entropy(log_probs: Tensor, index: list[int]) -> float:
    """Test cross-entropy (nats/char) of the model average of the samples ``index``:
    −mean_t log( (1/K) Σ_k p_k(x_t) )."""
    chosen = log_probs[index]
    return float(-(chosen.logsumexp(0) - math.log(len(index))).mean())


def selection_curves(log_probs: Tensor, collector: Collector) -> dict[str, list[float]]:
    """Perplexity of the average of K samples, K = 1…n, for each collection scheme (Fig. 2)."""
    n = len(log_probs)
    return {
        how: [math.exp(averaged_cross_entropy(log_probs, collector.selection(k, how)))
              for k in range(1, n + 1)]
        for how in SELECTIONS
    }  # fmt: skip


def run(config: Config, out: str | Path) -> Result:
    out_dir = prepare_output(out)
    corpus: CharCorpus = load_text(config.corpus)
    train_ids = corpus.train[: config.train_chars] if config.train_chars else corpus.train
    test_ids = corpus.test[: config.test_chars] if config.test_chars else corpus.test
    metrics: dict[str, dict] = {cell: {} for cell in config.cells}
    timings: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]):
        for cell in config.cells:
            for i, method in enumerate(config.methods):
                torch.manual_seed(config.seed)  # the same initial network for both methods
                model = CharRNN(corpus.vocab_size, config.hidden, config.layers, cell)
                generator = torch.Generator().manual_seed(config.seed * 1000 + i)
                saved = out_dir / "checkpoints" / f"{cell}-{method}.pt"
                optimizer = rmsprop_or_psgld(
                    method,
                    model.parameters(),
                    lr=config.lr,
                    alpha=config.alpha,
                    num_data=len(train_ids) - 1,  # every character but the first is a target
                    prior_precision=config.prior_precision,
                    generator=generator,
                    temperature=sampling_temperature(
                        config.temperature, config.paper_noise, len(train_ids) - 1
                    ),
                )
                collector, seconds, skipped = train(
                    model, optimizer, train_ids, config, generator, saved, desc=f"{cell} {method}"
                )
                timings[f"{cell}_{method}_train_s"] = seconds
                start = time.perf_counter()
                last, kept = score_samples(model, collector, test_ids, config)
                timings[f"{cell}_{method}_test_s"] = time.perf_counter() - start
                every = list(range(len(kept)))
                per_sample = (-kept.mean(1)).tolist()
                metrics[cell][method] = {
                    "last_cross_entropy": float(-last.mean()),
                    "averaged_cross_entropy": averaged_cross_entropy(kept, every),
                    "samples": len(kept),
                    "skipped_steps": skipped,
                    "sample_perplexity": [math.exp(c) for c in per_sample],
                    "averaged_perplexity": selection_curves(kept, collector),
                }
    plot = out_dir / "char_lm.png"
    _plot(plot, metrics, corpus.name)
    result = Result(
        name="char-lm",
        config={
            **asdict(config),
            "vocab_size": corpus.vocab_size,
            "train_characters": len(train_ids),
            "test_characters": len(test_ids),
        },
        metrics=metrics,
        timings=timings,
        files={"plot": str(plot)},
    )
    result.report = _report(result)
    write_result(result, out_dir, config.keep_checkpoints)
    return result


def _plot(path: Path, metrics: dict, corpus: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(metrics)
    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 4), squeeze=False)
    for ax, cell in zip(axes[0], cells, strict=True):
        for method, m in metrics[cell].items():
            k = range(1, m["samples"] + 1)
            dashed = method == "rmsprop"
            ax.plot(k, m["sample_perplexity"], "o", ms=3, alpha=0.5,
                    label=f"{method}: single sample")  # fmt: skip
            for how, curve in m["averaged_perplexity"].items():
                ax.plot(k, curve, "--" if dashed else "-", label=f"{method}: {how} average")
        ax.set_title(f"{corpus}, {cell.upper()}")
        ax.set_xlabel("samples (collection order) / samples averaged")
        ax.set_ylabel("test perplexity")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Gan et al. Fig. 2: single samples and model averages (dashed: RMSprop, M2)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(result: Result) -> str:
    c = result.config
    lines = [
        f"# Character language models on {c['corpus']} (Gan et al. 2017, Table 3, Fig. 2)",
        "",
        f"{c['layers']}-layer, {c['hidden']}-unit nets; {c['epochs']} epochs of "
        f"{c['train_characters']} characters ({c['scheme']} minibatches, {c['batch_size']} × "
        f"{c['seq_len']}), lr {c['lr']}, clip {c['clip']}; burn-in {c['burn_in_epochs']} epochs, "
        f"one sample per {c['thin_epochs']} epoch. Test cross-entropy in nats per character on "
        f"{c['test_characters']} characters.",
        "",
        "| cell | method | last iterate | average of kept | samples | train s | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell, by_method in result.metrics.items():
        for method, m in by_method.items():
            paper = PAPER.get(cell, {}).get(method, "–") if c["corpus"] == "warpeace" else "–"
            lines.append(
                f"| {cell} | {method} | {m['last_cross_entropy']:.4f} "
                f"| {m['averaged_cross_entropy']:.4f} | {m['samples']} "
                f"| {result.timings[f'{cell}_{method}_train_s']:.0f} | {paper} |"
            )
    lines += [
        "",
        "RMSprop's average is over its checkpoints (M2), not a posterior. Paper: Table 3, "
        "War and Peace, 2 × 128 units, trained to convergence.",
        "",
    ]
    return "\n".join(lines)
