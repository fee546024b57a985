"""Bayesian layers: a variational posterior q(w|θ) and a prior p(w) per weight tensor.

In sampling mode the forward pass injects the posterior's noise by one of five estimators
of the expected log-likelihood gradient (``estimator=``):

* ``"reparameterize"`` — one weight sample w = μ + σε per minibatch (Blundell et al. 2015
  §3.2); cheap, but every example shares the noise, so gradient variance does not fall with
  the batch size (Kingma et al. 2015 §2.2).
* ``"per_example"`` — an independent weight sample per example, run as one vmapped op: the
  low-variance baseline, with B× the weight samples.
* ``"local"`` — the local reparameterization trick (Kingma et al. 2015 §2.3, eq. 6): for
  factorized Gaussian q the pre-activations b = x w are Gaussian, so sample them directly:
  b = x μ + √(x² σ²) ε — per-example noise at the cost of a second matmul. For posteriors
  whose noise is shared by each input unit (dropout A, binary dropout) it multiplies the
  inputs by per-example noise instead (Kingma §3.2), exact and one matmul.
* ``"flipout"`` — Wen et al. (2018): one shared perturbation Δw = σε, decorrelated across
  examples by random signs: b = x μ + ((x ∘ s) Δw) ∘ r, s, r ∈ {±1} (needs independent,
  symmetric weight noise).
* ``"mean"`` — no noise: the posterior mean (the complexity cost still counts).

In mean mode (:meth:`BayesianLayer.deterministic`, ``posterior_mean``) the layer uses μ
(Graves 2011's MAP shortcut for prediction). The layer's ``kl()`` is KL(q‖p) of its weights,
closed form where one exists, else the Monte Carlo estimate at the weight sample of the last
forward pass (Blundell eq. 2) — or at a fresh sample for estimators that draw none.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import vmap
from torch.nn.modules.utils import _pair

from .. import _checks
from ..kl import kl_divergence
from ..priors import Gaussian, Prior
from ..variational import DiagonalGaussian, Draw, VariationalDistribution

__all__ = ["ESTIMATORS", "BayesConv2d", "BayesLinear", "BayesianLayer", "PosteriorFactory"]

PosteriorFactory = Callable[[Tensor], VariationalDistribution]
ESTIMATORS: tuple[str, ...] = ("reparameterize", "per_example", "local", "flipout", "mean")


class BayesianLayer(nn.Module):
    """Base class: owns ``<name>_posterior`` modules for each weight tensor and one prior.

    Subclasses call :meth:`_init_posteriors` and implement :meth:`_apply_weights` (the
    deterministic op given weight tensors) and :meth:`deterministic` (the plain layer the
    weight samples plug into).
    """

    weight_names: tuple[str, ...] = ("weight", "bias")

    def _init_posteriors(
        self,
        init: dict[str, Tensor | None],
        prior: Prior | None,
        posterior: PosteriorFactory,
        estimator: str,
    ) -> None:
        _checks.one_of("estimator", estimator, ESTIMATORS)
        self.prior = prior if prior is not None else Gaussian(0.0, 1.0)
        self.estimator = estimator
        self.sampling = True
        self._last_draw: dict[str, Draw] = {}
        names = []
        for name, value in init.items():
            if value is None:
                self.register_module(f"{name}_posterior", None)
            else:
                self.register_module(f"{name}_posterior", posterior(value))
                names.append(name)
        self.weight_names = tuple(names)
        if estimator == "flipout" and getattr(self.weight_posterior, "noise_on_inputs", False):
            raise ValueError(
                "estimator='flipout' needs weight noise independent per weight and symmetric; "
                f"{type(self.weight_posterior).__name__} shares it across each input unit: "
                "use estimator='local'"
            )

    def __getstate__(self) -> dict[str, Any]:
        # The cached sample belongs to one autograd graph; copies and pickles drop it.
        state = self.__dict__.copy()
        state["_last_draw"] = {}
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> BayesianLayer:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__getstate__().items():
            clone.__dict__[key] = copy.deepcopy(value, memo)
        return clone

    def posteriors(self) -> Iterator[tuple[str, VariationalDistribution]]:
        """(weight name, q) for each weight tensor, names as in the plain layer."""
        for name in self.weight_names:
            yield name, getattr(self, f"{name}_posterior")

    def weights(self) -> dict[str, Tensor]:
        """One weight sample (or the mean when not sampling), kept for :meth:`kl`."""
        if not self.sampling:
            self._last_draw = {}
            return {name: q.mean for name, q in self.posteriors()}
        self._last_draw = {name: q.draw() for name, q in self.posteriors()}
        return {name: d.sample for name, d in self._last_draw.items()}

    def kl(self) -> Tensor:
        """KL(q‖p) in nats over this layer's weights.

        A Monte Carlo KL uses the weight sample of the last forward pass so that it shares
        the sample with the likelihood (Blundell eq. 2); without one it draws its own. A
        closed form reuses the σ that pass computed. Call it after the forward pass whose loss
        it joins, before ``backward``.
        """
        total = None
        for name, q in self.posteriors():
            term = kl_divergence(q, self.prior, self._last_draw.get(name))
            total = term if total is None else total + term
        assert total is not None
        return total

    def sample_weights(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """``num_samples`` independent draws of every weight, stacked on dim 0 (no grad)."""
        with torch.no_grad():  # detach: a delta posterior's "sample" is a view of μ
            return {
                name: q.rsample((num_samples,), generator).detach() for name, q in self.posteriors()
            }

    def _check_input(self, x: Tensor) -> None:
        """ValueError naming ``x`` when its shape cannot be the layer's input."""

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        if not self.sampling or self.estimator == "reparameterize":
            return self._apply_weights(x, **self.weights())
        means = {name: q.mean for name, q in self.posteriors()}
        if self.estimator == "mean":
            self._last_draw = {name: Draw(None, q.stddev) for name, q in self.posteriors()}
            return self._apply_weights(x, **means)
        if self.estimator == "flipout":
            return self._flipout(x, means)
        if self.estimator == "per_example":
            return self._per_example(x)
        stds = {name: q.stddev for name, q in self.posteriors()}
        self._last_draw = {name: Draw(None, std) for name, std in stds.items()}
        if self.weight_posterior.noise_on_inputs:
            return self._noisy_inputs(x, means, stds)
        mean = self._apply_weights(x, **means)
        var = self._apply_weights(x.square(), **{k: v.square() for k, v in stds.items()})
        return torch.addcmul(mean, var.clamp_min(1e-16).sqrt(), torch.randn_like(mean))

    def _noisy_inputs(self, x: Tensor, means: dict[str, Tensor], stds: dict[str, Tensor]) -> Tensor:
        """Local estimator for a posterior whose weight noise is shared by each input unit
        (dropout A, binary dropout): per-example input noise, exact and one matmul."""
        out = self._apply_weights(x * self.weight_posterior.input_noise(x), means["weight"])
        if "bias" in means:
            shape = (1, -1) + (1,) * (out.ndim - 2)
            bias, std = means["bias"].reshape(shape), stds["bias"].reshape(shape)
            noise = torch.randn(
                out.shape[:2] + (1,) * (out.ndim - 2), dtype=out.dtype, device=out.device
            )
            out = out + torch.addcmul(bias, std, noise)
        return out

    def _flipout(self, x: Tensor, means: dict[str, Tensor]) -> Tensor:
        """x μ + ((x ∘ s) Δw) ∘ r (+ Δb ∘ r') with one shared draw Δ = σε and per-example
        random signs s, r, r' — each example's marginal is exact, their noise uncorrelated."""
        self._last_draw = {name: q.draw() for name, q in self.posteriors()}
        delta = {k: d.sample - means[k] for k, d in self._last_draw.items()}
        mean = self._apply_weights(x, **means)
        noise = self._apply_weights(x * _random_signs(x), delta["weight"])
        out = torch.addcmul(mean, noise, _random_signs(noise))
        if "bias" in delta:
            bias = delta["bias"].reshape((1, -1) + (1,) * (out.ndim - 2))
            out = torch.addcmul(out, bias, _random_signs(out))
        return out

    def _per_example(self, x: Tensor) -> Tensor:
        """An independent weight sample for each of the B examples, as one vmapped op."""
        self._last_draw = {name: Draw(None, q.stddev) for name, q in self.posteriors()}
        samples = {name: q.rsample((x.shape[0],)) for name, q in self.posteriors()}

        def one(xi: Tensor, w: dict[str, Tensor]) -> Tensor:
            return self._apply_weights(xi.unsqueeze(0), **w).squeeze(0)

        return vmap(one)(x, samples)

    def _apply_weights(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def deterministic(self) -> nn.Module:
        """A plain layer of the same shape holding the posterior mean."""
        raise NotImplementedError

    def _copy_mean_into(self, layer: nn.Module) -> nn.Module:
        with torch.no_grad():
            for name, q in self.posteriors():
                getattr(layer, name).copy_(q.mean)
        return layer


def _random_signs(like: Tensor) -> Tensor:
    """±1 with probability ½ per example and channel (shared over spatial positions)."""
    shape = like.shape[:2] + (1,) * (like.ndim - 2)
    signs = torch.empty(shape, device=like.device, dtype=like.dtype).bernoulli_()
    return signs.mul_(2).sub_(1)


class BayesLinear(BayesianLayer):
    """y = x wᵀ + b with w, b ~ q(·|θ); the Bayesian twin of :class:`torch.nn.Linear`.

    Args:
        in_features, out_features, bias: as ``nn.Linear``.
        prior: p(w) for weight and bias (default N(0, 1)).
        posterior: factory ``init_mean -> VariationalDistribution`` (default DiagonalGaussian).
        estimator: gradient estimator; "reparameterize" draws one weight sample per forward.
        init_from: an ``nn.Linear`` whose weights become the initial posterior mean.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        prior: Prior | None = None,
        posterior: PosteriorFactory = DiagonalGaussian,
        estimator: str = "reparameterize",
        init_from: nn.Linear | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _checks.at_least("in_features", in_features, 1)
        _checks.at_least("out_features", out_features, 1)
        self.in_features, self.out_features = in_features, out_features
        base = init_from or nn.Linear(in_features, out_features, bias, device=device, dtype=dtype)
        init = {"weight": base.weight, "bias": base.bias if bias else None}
        self._init_posteriors(init, prior, posterior, estimator)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; BayesLinear(in_features={self.in_features}) "
                f"needs its last dimension to be {self.in_features}"
            )

    def _apply_weights(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return F.linear(x, weight, bias)

    def deterministic(self) -> nn.Linear:
        q = self.weight_posterior
        layer = nn.Linear(
            self.in_features,
            self.out_features,
            bias="bias" in self.weight_names,
            device=q.mu.device,
            dtype=q.mu.dtype,
        )
        return self._copy_mean_into(layer)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={'bias' in self.weight_names}, estimator={self.estimator}"
        )


class BayesConv2d(BayesianLayer):
    """2-d convolution with w, b ~ q(·|θ); the Bayesian twin of :class:`torch.nn.Conv2d`.

    Takes the arguments of ``nn.Conv2d`` (zero padding only) plus ``prior``, ``posterior``,
    ``estimator`` and ``init_from`` as in :class:`BayesLinear`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        prior: Prior | None = None,
        posterior: PosteriorFactory = DiagonalGaussian,
        estimator: str = "reparameterize",
        init_from: nn.Conv2d | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _checks.at_least("in_channels", in_channels, 1)
        _checks.at_least("out_channels", out_channels, 1)
        base = init_from or nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            device=device,
            dtype=dtype,
        )
        if base.padding_mode != "zeros":
            raise ValueError(
                f"padding_mode must be 'zeros', got padding_mode={base.padding_mode!r}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(base.kernel_size)
        self.stride, self.padding = base.stride, base.padding
        self.dilation, self.groups = base.dilation, base.groups
        init = {"weight": base.weight, "bias": base.bias if bias else None}
        self._init_posteriors(init, prior, posterior, estimator)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; BayesConv2d(in_channels={self.in_channels}) "
                f"needs (batch, {self.in_channels}, height, width) or ({self.in_channels}, "
                "height, width)"
            )

    def _apply_weights(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def deterministic(self) -> nn.Conv2d:
        q = self.weight_posterior
        layer = nn.Conv2d(
            self.in_channels,
            self.out_channels,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            bias="bias" in self.weight_names,
            device=q.mu.device,
            dtype=q.mu.dtype,
        )
        return self._copy_mean_into(layer)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, estimator={self.estimator}"
        )
