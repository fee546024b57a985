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
from .recurrent import RECURRENT_ESTIMATORS, BayesEmbedding, BayesRNN
from .rnn_dropout import GalDropoutRNN

__all__ = [
    "ESTIMATORS",
    "RECURRENT_ESTIMATORS",
    "BayesConv2d",
    "BayesEmbedding",
    "BayesLinear",
    "BayesRNN",
    "BayesianLayer",
    "GalDropoutRNN",
    "PosteriorFactory",
    "bayesian_layers",
    "model_kl",
    "posterior_mean",
    "set_sampling",
    "to_bayesian",
    "to_deterministic",
]
