"""Real data sets. Loaders return tensors; see each function for where the data comes from."""

from ._files import data_root, fetch
from .digits import load_digits
from .images import IMAGE_DATASETS, ImageData, load_images
from .mushroom import Mushroom, load_mushroom
from .text import (
    CORPORA,
    CharCorpus,
    WordCorpus,
    load_ptb,
    load_text,
    random_windows,
    stream_batches,
)
from .uci import UCI_DATASETS, UCIRegression, load_uci

__all__ = [
    "CORPORA",
    "IMAGE_DATASETS",
    "UCI_DATASETS",
    "CharCorpus",
    "ImageData",
    "Mushroom",
    "UCIRegression",
    "WordCorpus",
    "data_root",
    "fetch",
    "load_digits",
    "load_images",
    "load_mushroom",
    "load_ptb",
    "load_text",
    "load_uci",
    "random_windows",
    "stream_batches",
]
