"""Bayesian layers for sequence models: every weight of an LSTM, GRU or tanh RNN stack, and an
embedding (Gan et al.'s "encoding weights").

Gan et al. (2017, Fig. 1) put uncertainty on the input, recurrent and bias weights of every
layer and direction; Fortunato et al. (2017) sample them once per minibatch of sequences and
share the sample across time steps, so a sequence sees one network, as in the SG-MCMC case.
:class:`BayesRNN` does that and then runs PyTorch's fused kernel on the sampled weights
(``torch.func.functional_call``), so it costs one sample of the weights plus the plain
recurrence.

Only the ``"reparameterize"`` and ``"mean"`` estimators apply: per-example or local noise
would give each time step's pre-activations independent noise, which is not one network.
"""

from __future__ import annotations

import copy
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ..priors import Prior
from ..variational import DiagonalGaussian
from .layers import BayesianLayer, PosteriorFactory

__all__ = ["RECURRENT_ESTIMATORS", "BayesEmbedding", "BayesRNN"]

RECURRENT_ESTIMATORS: tuple[str, ...] = ("reparameterize", "mean")


class BayesRNN(BayesianLayer):
    """A Bayesian twin of ``module`` (an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``, any number of
    layers, uni- or bidirectional).

    Its parameters become the posterior means; ``forward(x, state)`` has the plain module's
    signature and outputs. Posterior names follow the module's parameter names
    (``weight_ih_l0``, ``weight_hh_l1_reverse``, …) so samples plug into the plain twin.
    """

    def __init__(
        self,
        module: nn.RNNBase,
        prior: Prior | None = None,
        posterior: PosteriorFactory = DiagonalGaussian,
        estimator: str = "reparameterize",
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.RNNBase):
            raise TypeError(f"module must be an nn.LSTM, nn.GRU or nn.RNN, got {type(module)}")
        _check_estimator(estimator)
        init = {name: p.detach().clone() for name, p in module.named_parameters()}
        self._init_posteriors(init, prior, posterior, estimator)
        # The plain module only supplies the fused op; it is not a submodule, so its own
        # parameters are never trained or saved.
        self.__dict__["_template"] = copy.deepcopy(module).requires_grad_(False)

    def forward(self, x: Tensor, state: Any = None):
        return self._apply_weights(x, state, **self.weights())

    def _apply_weights(self, x: Tensor, state: Any = None, **weights: Tensor):
        return functional_call(self._template, weights, (x, state))

    def deterministic(self) -> nn.RNNBase:
        return self._copy_mean_into(copy.deepcopy(self._template).requires_grad_(True))

    def extra_repr(self) -> str:
        return f"{self._template.extra_repr()}, estimator={self.estimator}"


class BayesEmbedding(BayesianLayer):
    """Token ids → rows of a weight matrix w ~ q(·|θ); the Bayesian twin of ``module``, an
    ``nn.Embedding`` (its weights become the posterior mean). One sample per forward call."""

    def __init__(
        self,
        module: nn.Embedding,
        prior: Prior | None = None,
        posterior: PosteriorFactory = DiagonalGaussian,
        estimator: str = "reparameterize",
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Embedding):
            raise TypeError(f"module must be an nn.Embedding, got {type(module)}")
        _check_estimator(estimator)
        self.num_embeddings, self.embedding_dim = module.num_embeddings, module.embedding_dim
        init = {"weight": module.weight.detach().clone()}
        self._init_posteriors(init, prior, posterior, estimator)

    def forward(self, ids: Tensor) -> Tensor:
        return self._apply_weights(ids, **self.weights())

    def _apply_weights(self, ids: Tensor, weight: Tensor) -> Tensor:
        return F.embedding(ids, weight)

    def deterministic(self) -> nn.Embedding:
        q = self.weight_posterior
        layer = nn.Embedding(
            self.num_embeddings, self.embedding_dim, device=q.mu.device, dtype=q.mu.dtype
        )
        return self._copy_mean_into(layer)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, estimator={self.estimator}"


def _check_estimator(estimator: str) -> None:
    if estimator not in RECURRENT_ESTIMATORS:
        raise ValueError(
            f"estimator must be one of {RECURRENT_ESTIMATORS} for a recurrent or embedding "
            f"layer (one weight sample shared over time steps), got estimator={estimator!r}"
        )
