"""Reproduced results, one module each; ``EXPERIMENTS`` maps CLI names to them.

Each module has a ``Config`` dataclass (paper settings as defaults, ``quick()`` for CI) and
``run(config, out) -> Result`` that writes JSON, plots and a markdown report into ``out``.
"""

from . import (
    char_lm,
    gradient_variance,
    mlp_sgmcmc,
    mnist_bbb,
    mnist_graves,
    mnist_prune,
    mnist_vd,
    mushroom,
    ood,
    regression,
    sentence,
    uci,
    word_lm,
)
from ._result import Result

EXPERIMENTS = {
    "char-lm": char_lm,
    "gradient-variance": gradient_variance,
    "mlp-sgmcmc": mlp_sgmcmc,
    "mnist-bbb": mnist_bbb,
    "mnist-graves": mnist_graves,
    "mnist-prune": mnist_prune,
    "mnist-vd": mnist_vd,
    "mushroom": mushroom,
    "ood": ood,
    "regression": regression,
    "sentence": sentence,
    "uci": uci,
    "word-lm": word_lm,
}

__all__ = ["EXPERIMENTS", "Result"]
