"""Sentence-classification sets in Kim's (2014) format — Gan et al. (2017) §5.4, Table 6.

One sentence per line, ``label token token …``, already tokenized (harvardnlp/sent-conv-torch).
TREC (6 question types) comes with its train/test split; MR, CR, SUBJ and MPQA (binary) are
one file each and are scored by k-fold cross-validation (:func:`cv_folds`). Files are read as
Latin-1, which maps every byte to one character, because some of them are not valid UTF-8.

:class:`Vocabulary` maps tokens to ids (0 = padding, 1 = unknown) from the training sentences
only; :meth:`Vocabulary.encode` pads a list of sentences into one id tensor plus lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import _checks
from ._files import fetch

__all__ = ["SENTENCE_SETS", "SentenceSet", "Vocabulary", "cv_folds", "load_sentences"]

_BASE = "https://raw.githubusercontent.com/harvardnlp/sent-conv-torch/master/data/"
_FILES = {
    "TREC.train.all": "c8183fd8c2a5cc4a9a1c56548d7c6410a8b71ed7843df9ef1f0a05cd7cf2fb3e",
    "TREC.test.all": "92a6a3cede5678b447ef5f1d7ec474134fcda211e6590e6fa627b4a2c68e4566",
    "rt-polarity.all": "b8846c3bbd59241f901efdc58f7c515e4b280ab3561fd1858caa5aa48da95a8a",
    "custrev.all": "a3839a79bd3285177a07158c6104b49038a7a06ab2abe897734cde5d22e5e325",
    "subj.all": "f3ffbe2aa8e4f3ba3e63e46dce51613854edbca122fb3aa758b9bce047ded23c",
    "mpqa.all": "661de8a069da4b9845fc8b9ae59cc97ffe554f3018fa6bf0e640e3d626a4eaf7",
}
SENTENCE_SETS: dict[str, tuple[str, ...]] = {
    "trec": ("TREC.train.all", "TREC.test.all"),
    "mr": ("rt-polarity.all",),
    "cr": ("custrev.all",),
    "subj": ("subj.all",),
    "mpqa": ("mpqa.all",),
}


@dataclass
class SentenceSet:
    """Tokenized sentences and integer labels; ``test_*`` is ``None`` for the CV sets."""

    name: str
    sentences: list[list[str]]
    labels: Tensor
    test_sentences: list[list[str]] | None = None
    test_labels: Tensor | None = None

    @property
    def num_classes(self) -> int:
        labels = self.labels
        if self.test_labels is not None:
            labels = torch.cat([labels, self.test_labels])
        return int(labels.max()) + 1


def _read(filename: str, download: bool) -> tuple[list[list[str]], Tensor]:
    path = fetch(f"sentence/{filename}", _BASE + filename, _FILES[filename], download=download)
    sentences, labels = [], []
    # split on "\n" only: some files hold byte 0x85, which str.splitlines() takes for NEL
    for number, line in enumerate(path.read_text(encoding="latin-1").split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        if not fields[0].isdigit():
            raise ValueError(f"{path}:{number}: expected 'label tokens…', got {line[:60]!r}")
        labels.append(int(fields[0]))
        sentences.append(fields[1:])
    return sentences, torch.tensor(labels)


def load_sentences(name: str = "trec", download: bool = True) -> SentenceSet:
    """Read ``sentence/<file>`` under ``$TORCHBAYES_DATA`` (downloaded if absent and online)."""
    _checks.one_of("name", name, tuple(SENTENCE_SETS))
    files = SENTENCE_SETS[name]
    sentences, labels = _read(files[0], download)
    if len(files) == 1:
        return SentenceSet(name, sentences, labels)
    test_sentences, test_labels = _read(files[1], download)
    return SentenceSet(name, sentences, labels, test_sentences, test_labels)


def cv_folds(num_examples: int, folds: int, seed: int = 0) -> list[Tensor]:
    """A random partition of ``range(num_examples)`` into ``folds`` near-equal test folds."""
    _checks.at_least("folds", folds, 2)
    if folds > num_examples:
        raise ValueError(f"folds={folds} exceeds the {num_examples} examples")
    order = torch.randperm(num_examples, generator=torch.Generator().manual_seed(seed))
    return list(order.tensor_split(folds))


class Vocabulary:
    """Token ↔ id map built from training sentences: 0 is padding, 1 any unseen token."""

    PAD, UNK = 0, 1

    def __init__(self, sentences: Sequence[Sequence[str]], min_count: int = 1) -> None:
        _checks.at_least("min_count", min_count, 1)
        counts = Counter(token for sentence in sentences for token in sentence)
        kept = sorted(t for t, c in counts.items() if c >= min_count)
        self.tokens = ["<pad>", "<unk>", *kept]
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, sentences: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor]:
        """Ids (batch, longest) padded with 0, and each sentence's length (at least 1)."""
        lengths = torch.tensor([max(1, len(s)) for s in sentences])
        ids = torch.zeros(len(sentences), int(lengths.max()), dtype=torch.long)
        for row, sentence in enumerate(sentences):
            ids[row, : len(sentence)] = torch.tensor(
                [self.index.get(t, self.UNK) for t in sentence], dtype=torch.long
            )
        if any(len(s) == 0 for s in sentences):
            ids[torch.tensor([len(s) == 0 for s in sentences]), 0] = self.UNK
        return ids, lengths
