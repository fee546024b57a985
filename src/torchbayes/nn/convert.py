"""Whole-model helpers: convert plain ↔ Bayesian, sum the KL, switch sampling on and off."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ..priors import Prior
from ..variational import DiagonalGaussian
from .layers import BayesConv2d, BayesianLayer, BayesLinear, PosteriorFactory
from .recurrent import BayesEmbedding, BayesRNN

__all__ = [
    "bayesian_layers",
    "model_kl",
    "posterior_mean",
    "set_sampling",
    "to_bayesian",
    "to_deterministic",
]


def bayesian_layers(model: nn.Module) -> Iterator[tuple[str, BayesianLayer]]:
    """(qualified name, layer) for every Bayesian layer in ``model``."""
    for name, module in model.named_modules():
        if isinstance(module, BayesianLayer):
            yield name, module


def model_kl(model: nn.Module) -> Tensor:
    """Σ over Bayesian layers of KL(q‖p), in nats (the complexity cost of Graves/Blundell)."""
    terms = [layer.kl() for _, layer in bayesian_layers(model)]
    if not terms:
        raise ValueError("model has no Bayesian layers; convert it with to_bayesian(model)")
    return torch.stack(terms).sum() if len(terms) > 1 else terms[0]


def set_sampling(model: nn.Module, sampling: bool) -> None:
    """Sample weights on each forward (``True``) or use the posterior mean (``False``)."""
    for _, layer in bayesian_layers(model):
        layer.sampling = sampling


@contextmanager
def posterior_mean(model: nn.Module) -> Iterator[nn.Module]:
    """Run ``model`` with every Bayesian layer at its posterior mean (Graves' MAP shortcut)."""
    previous = {name: layer.sampling for name, layer in bayesian_layers(model)}
    set_sampling(model, False)
    try:
        yield model
    finally:
        for name, layer in bayesian_layers(model):
            layer.sampling = previous[name]


def _convert(
    module: nn.Module, prior: Prior | None, posterior: PosteriorFactory, estimator: str
) -> nn.Module:
    if isinstance(module, nn.Linear):
        return BayesLinear(
            module.in_features,
            module.out_features,
            module.bias is not None,
            prior=prior,
            posterior=posterior,
            estimator=estimator,
            init_from=module,
        )
    if isinstance(module, nn.Conv2d):
        return BayesConv2d(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            module.stride,
            module.padding,
            module.dilation,
            module.groups,
            module.bias is not None,
            prior=prior,
            posterior=posterior,
            estimator=estimator,
            init_from=module,
        )
    if isinstance(module, nn.RNNBase):
        return BayesRNN(module, prior=prior, posterior=posterior, estimator=estimator)
    if isinstance(module, nn.Embedding):
        return BayesEmbedding(module, prior=prior, posterior=posterior, estimator=estimator)
    return module


def _replace(model: nn.Module, replace) -> nn.Module:
    replaced = replace(model)
    if replaced is not model:
        return replaced
    for name, child in model.named_children():
        setattr(model, name, _replace(child, replace))
    return model


def to_bayesian(
    model: nn.Module,
    prior: Prior | None = None,
    posterior: PosteriorFactory = DiagonalGaussian,
    inplace: bool = False,
    estimator: str = "reparameterize",
) -> nn.Module:
    """Replace every ``nn.Linear``/``nn.Conv2d``/``nn.Embedding``/``nn.LSTM``/``nn.GRU``/``nn.RNN``
    by its Bayesian twin (embedding and recurrent layers take only the "reparameterize" and
    "mean" estimators).

    The current weights become the posterior means, so a trained network can be made
    Bayesian and fine-tuned. All converted layers share the one ``prior`` module and use
    ``estimator`` (see :mod:`torchbayes.nn.layers`).
    """
    target = model if inplace else copy.deepcopy(model)
    return _replace(target, lambda m: _convert(m, prior, posterior, estimator))


def to_deterministic(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with each Bayesian layer replaced by its plain layer at the mean.

    Parameter names of the copy match the names of posterior samples
    (``VariationalPosterior.sample``), so samples plug in with ``functional_call``.
    """
    target = copy.deepcopy(model)
    return _replace(target, lambda m: m.deterministic() if isinstance(m, BayesianLayer) else m)
