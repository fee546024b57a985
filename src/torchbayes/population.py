"""K independent posteriors over one network's parameters, stacked and run as one.

Online problems (bandits, several seeds, several agents) need many small networks trained
side by side. A :class:`Population` holds K members of one inference method: every
parameter of ``network`` becomes one :class:`~torchbayes.variational.VariationalDistribution`
over a tensor of shape ``(K, *param.shape)`` — a Delta for point estimates (plain training,
SG-MCMC), a DiagonalGaussian for Bayes by Backprop, VariationalDropout, … — so one
``rsample`` draws a weight sample for every member, and :func:`population_outputs` runs all
members' forward passes as one ``vmap`` over ``functional_call``. Members never interact:
the summed loss of all members has, for each member's parameters, that member's gradient,
so any elementwise optimizer or sampler over the stacked tensors is K independent ones.

:meth:`Population.member` hands member k out as an ordinary
:class:`~torchbayes.posterior.Posterior`, so everything downstream stays unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from . import _checks
from .kl import has_closed_form, kl_divergence, monte_carlo_kl
from .posterior import Posterior
from .priors import Prior
from .variational import Delta, Draw, VariationalDistribution

__all__ = ["MemberPosterior", "Population", "population_outputs"]

StackedFactory = Callable[[Tensor], VariationalDistribution]


def _reinitialized(network: nn.Module) -> nn.Module:
    clone = copy.deepcopy(network)
    for module in clone.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    return clone


class Population(nn.Module):
    """K members, each a posterior q_k(w) over the parameters of ``network``.

    Args:
        network: the deterministic network every member's weight samples plug into.
        size: K, the number of members; each starts from a fresh ``reset_parameters`` draw
            of the global RNG (seed it for reproducible members).
        posterior: factory ``stacked_init (K, *shape) -> VariationalDistribution``
            (default :class:`~torchbayes.variational.Delta`, a point estimate).
        prior: p(w) for the complexity cost; ``None`` means no complexity cost.
        train_samples: weight samples per member per training step, averaged (Blundell et
            al. 2015 average two in the bandit experiment).
    """

    def __init__(
        self,
        network: nn.Module,
        size: int,
        posterior: StackedFactory = Delta,
        prior: Prior | None = None,
        train_samples: int = 1,
    ) -> None:
        super().__init__()
        _checks.at_least("size", size, 1)
        _checks.at_least("train_samples", train_samples, 1)
        members = [_reinitialized(network) for _ in range(size)]
        stacked, buffers = stack_module_state(members)
        if buffers:
            raise ValueError(f"network has buffers {sorted(buffers)}; populations need none")
        self.network = copy.deepcopy(network).eval()
        self.size = size
        self.names = list(stacked)
        self.posteriors = nn.ModuleList(posterior(stacked[name]) for name in self.names)
        self.prior = prior
        self.train_samples = train_samples
        self._last: dict[str, Draw] = {}

    def sample(
        self, num_samples: int = 1, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """``num_samples`` reparameterized draws per member, shape ``(S·K, *param.shape)``.

        Sample-major: row s·K + k is draw s of member k. Gradients flow to the variational
        parameters; the draws are kept for :meth:`kl`.
        """
        _checks.at_least("num_samples", num_samples, 1)
        self._last = {
            name: q.draw(generator, (num_samples,))
            for name, q in zip(self.names, self.posteriors, strict=True)
        }
        return {name: d.sample.flatten(0, 1) for name, d in self._last.items()}

    def mean(self) -> dict[str, Tensor]:
        """The posterior mean of every member, shape ``(K, *param.shape)``."""
        return {name: q.mean for name, q in zip(self.names, self.posteriors, strict=True)}

    def kl(self) -> Tensor:
        """Σ_k KL(q_k‖p) in nats: closed form, else Monte Carlo at the last :meth:`sample`."""
        if self.prior is None:
            return torch.zeros(())
        total = torch.zeros(())
        for name, q in zip(self.names, self.posteriors, strict=True):
            draw = self._last.get(name)
            if draw is None:
                total = total + kl_divergence(q, self.prior)
            elif has_closed_form(q, self.prior):
                total = total + kl_divergence(q, self.prior, draw)
            else:
                total = total + monte_carlo_kl(q, self.prior, draw) / draw.sample.shape[0]
        return total

    def member(self, k: int) -> MemberPosterior:
        """Member k as a :class:`~torchbayes.posterior.Posterior` (a view, not a copy)."""
        if not 0 <= k < self.size:
            raise ValueError(f"k must lie in [0, {self.size}), got k={k!r}")
        return MemberPosterior(self, k)


class MemberPosterior(Posterior):
    """One member of a :class:`Population`, sampled through the common interface."""

    def __init__(self, population: Population, k: int) -> None:
        self.population, self.k = population, k
        self.network = population.network

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        _checks.at_least("num_samples", num_samples, 1)
        with torch.no_grad():
            return {
                name: q.rsample((num_samples,), generator)[:, self.k]
                for name, q in zip(self.population.names, self.population.posteriors, strict=True)
            }


def population_outputs(
    network: nn.Module, params: dict[str, Tensor], inputs: Tensor | Sequence[Tensor]
) -> Tensor:
    """``network`` under M parameter sets at once: ``params[name]`` has shape (M, *shape),
    ``inputs`` shape (M, B, …) — each parameter set sees its own inputs."""

    def forward(p: dict[str, Tensor], x: Tensor) -> Tensor:
        return functional_call(network, p, (x,))

    return vmap(forward)(params, inputs)
