"""Reference networks used by the experiments and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from . import _checks
from .nn.rnn_dropout import GalDropoutRNN

__all__ = [
    "DROPOUT_KINDS",
    "RECURRENT_CELLS",
    "CharRNN",
    "SentenceClassifier",
    "WithNoiseScale",
    "detach_state",
    "five_layer_cnn",
    "mlp",
]

RECURRENT_CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}
DROPOUT_KINDS: tuple[str, ...] = ("naive", "gal")


def mlp(
    in_features: int,
    hidden: Sequence[int],
    out_features: int,
    activation: type[nn.Module] = nn.ReLU,
    dropout: float = 0.0,
) -> nn.Sequential:
    """A fully connected network ``in → hidden[0] → … → out`` with ``activation`` between.

    ``dropout`` > 0 inserts ``nn.Dropout`` after each hidden activation.
    """
    _checks.at_least("in_features", in_features, 1)
    _checks.at_least("out_features", out_features, 1)
    for width in hidden:
        _checks.at_least("hidden", width, 1)
    _checks.below_one("dropout", dropout)
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), activation()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


class WithNoiseScale(nn.Module):
    """``network(x)`` followed by one learned raw noise scale per output: (mean, raw σ).

    Homoscedastic Gaussian noise σ = softplus(raw) carried as an ordinary parameter, in the
    layout :func:`torchbayes.predict.predict_regression` reads with ``predicts_noise=True``.
    Each posterior sample therefore holds its own σ: sampled along with the weights by an
    SG-MCMC sampler, a shared point estimate (type-II maximum likelihood) under VI.
    """

    def __init__(self, network: nn.Module, outputs: int = 1, std: float = 1.0) -> None:
        super().__init__()
        _checks.positive("std", std)
        self.network = network
        raw = torch.full((outputs,), float(std)).expm1().log()  # softplus⁻¹(std)
        self.raw_std = nn.Parameter(raw)

    def forward(self, x: Tensor) -> Tensor:
        mean = self.network(x)
        return torch.cat([mean, self.raw_std.expand_as(mean)], dim=-1)


def five_layer_cnn(
    channels: tuple[int, int] = (32, 64),
    hidden: tuple[int, int] = (256, 128),
    num_classes: int = 10,
    image_size: int = 28,
) -> nn.Sequential:
    """The five-layer CNN of the OOD experiment (Park et al. 2018): two 5 × 5 convolutions with
    ReLU and 2 × 2 max-pooling, then three fully connected layers.

    28 × 28 → conv 24 → pool 12 → conv 8 → pool 4, so the first dense layer sees
    ``channels[1]·4·4`` features.
    """
    for c in (*channels, *hidden):
        _checks.at_least("width", c, 1)
    _checks.at_least("num_classes", num_classes, 2)
    side = ((image_size - 4) // 2 - 4) // 2
    if side < 1:
        raise ValueError(f"image_size must be at least 16, got image_size={image_size!r}")
    return nn.Sequential(
        nn.Conv2d(1, channels[0], 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels[0], channels[1], 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(channels[1] * side * side, hidden[0]),
        nn.ReLU(),
        nn.Linear(hidden[0], hidden[1]),
        nn.ReLU(),
        nn.Linear(hidden[1], num_classes),
    )


class CharRNN(nn.Module):
    """Character language model of Gan et al. (2017) Fig. 1: an encoding (embedding), a stack of
    recurrent layers and a decoding layer, all of whose weights an SG-MCMC sampler moves.

    ``cell`` is ``"lstm"``, ``"gru"`` or ``"rnn"`` (tanh), using PyTorch's fused kernels.
    ``dropout`` with ``dropout_kind="naive"`` is Zaremba et al.'s dropout: fresh masks on the
    non-recurrent connections only (the embedding output, between layers, before the
    decoder); ``"gal"`` is Gal & Ghahramani's: one mask per sequence on every layer's input and
    recurrent state, shared over time (:class:`~torchbayes.nn.GalDropoutRNN`; a time loop in
    training). ``forward(inputs, state)`` maps
    (batch, time) ids to (batch, time, vocab) logits and the final state, so a caller can
    carry the state from one window of a stream to the next.
    """

    def __init__(
        self,
        vocab_size: int,
        hidden: int = 128,
        layers: int = 2,
        cell: str = "lstm",
        dropout: float = 0.0,
        dropout_kind: str = "naive",
    ) -> None:
        super().__init__()
        _checks.at_least("vocab_size", vocab_size, 2)
        _checks.at_least("hidden", hidden, 1)
        _checks.at_least("layers", layers, 1)
        _checks.one_of("cell", cell, tuple(RECURRENT_CELLS))
        _check_dropout(dropout, dropout_kind)
        self.cell = cell
        self.encoder = nn.Embedding(vocab_size, hidden)
        gal = dropout_kind == "gal"
        between = dropout if layers > 1 and not gal else 0.0
        self.rnn = RECURRENT_CELLS[cell](hidden, hidden, layers, batch_first=True, dropout=between)
        if gal:
            self.rnn = GalDropoutRNN(self.rnn, dropout, dropout)
        self.input_dropout = nn.Dropout(0.0 if gal else dropout)
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab_size)

    def forward(self, inputs: Tensor, state: Tensor | tuple[Tensor, Tensor] | None = None):
        words = self.input_dropout(self.encoder(inputs))
        if isinstance(self.rnn, GalDropoutRNN):
            outputs, state = self.rnn(words, state=state)
        else:
            outputs, state = self.rnn(words, state)
        return self.decoder(self.dropout(outputs)), state


def _check_dropout(dropout: float, kind: str) -> None:
    _checks.below_one("dropout", dropout)
    _checks.one_of("dropout_kind", kind, DROPOUT_KINDS)


def detach_state(state):
    """The recurrent state cut from the graph (truncated backpropagation through time)."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


class SentenceClassifier(nn.Module):
    """Gan et al. (2017) §5.4: word embedding → (bidirectional) recurrent layer → the final
    hidden state of each direction, concatenated → linear classifier.

    Padded batches are packed (``lengths``), so padding never enters the recurrence and the
    backward direction starts at each sentence's true last word. ``dropout`` applies to the
    sentence vector and, with ``dropout_kind="naive"`` (Zaremba), to each embedded word
    independently; ``"gal"`` instead drops embedding dimensions and recurrent units with one
    mask per sentence shared over its words (:class:`~torchbayes.nn.GalDropoutRNN`).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed: int = 300,
        hidden: int = 400,
        cell: str = "lstm",
        bidirectional: bool = True,
        dropout: float = 0.0,
        dropout_kind: str = "naive",
    ) -> None:
        super().__init__()
        _checks.at_least("vocab_size", vocab_size, 2)
        _checks.at_least("num_classes", num_classes, 2)
        _checks.at_least("embed", embed, 1)
        _checks.at_least("hidden", hidden, 1)
        _checks.one_of("cell", cell, tuple(RECURRENT_CELLS))
        _check_dropout(dropout, dropout_kind)
        self.cell = cell
        self.encoder = nn.Embedding(vocab_size, embed, padding_idx=0)
        self.rnn = RECURRENT_CELLS[cell](
            embed, hidden, batch_first=True, bidirectional=bidirectional
        )
        gal = dropout_kind == "gal"
        if gal:
            self.rnn = GalDropoutRNN(self.rnn, dropout, dropout)
        self.word_dropout = nn.Dropout(0.0 if gal else dropout)
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden * (2 if bidirectional else 1), num_classes)

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        words = self.word_dropout(self.encoder(ids))
        if isinstance(self.rnn, GalDropoutRNN):
            _, state = self.rnn(words, lengths)
        else:
            packed = pack_padded_sequence(
                words, lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            _, state = self.rnn(packed)
        final = state[0] if isinstance(state, tuple) else state  # LSTM: (h, c)
        directions = 2 if self.rnn.bidirectional else 1
        sentence = torch.cat(list(final[-directions:]), dim=-1)
        return self.decoder(self.dropout(sentence))
