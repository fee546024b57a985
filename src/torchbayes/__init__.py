"""torchbayes — Bayesian deep learning on PyTorch.

Learn a distribution over a network's weights and use it: every inference method ends in a
:class:`~torchbayes.posterior.Posterior` that yields weight samples, and prediction,
uncertainty and downstream tools use only that.
"""

from . import kl, nn, predict, priors, variational, vi
from .population import Population
from .posterior import Posterior, SampleSet, VariationalPosterior
from .predict import predict_classes, predict_regression, sample_outputs
from .vi import FreeEnergy

__version__ = "0.1.0"

__all__ = [
    "FreeEnergy",
    "Population",
    "Posterior",
    "SampleSet",
    "VariationalPosterior",
    "__version__",
    "kl",
    "nn",
    "predict",
    "predict_classes",
    "predict_regression",
    "priors",
    "sample_outputs",
    "variational",
    "vi",
]
