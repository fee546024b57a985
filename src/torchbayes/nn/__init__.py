"""Bayesian layers and whole-model helpers."""

from .convert import (
    bayesian_layers,
    model_kl,
    posterior_mean,
    set_sampling,
    to_bayesian,
    to_deterministic,
)
from .layers import ESTIMATORS, BayesConv2d, BayesianLayer, BayesLinear, PosteriorFactory

__all__ = [
    "ESTIMATORS",
    "BayesConv2d",
    "BayesLinear",
    "BayesianLayer",
    "PosteriorFactory",
    "bayesian_layers",
    "model_kl",
    "posterior_mean",
    "set_sampling",
    "to_bayesian",
    "to_deterministic",
]
