"""Stochastic-gradient MCMC samplers as ``torch.optim.Optimizer``s.

See :mod:`torchbayes.samplers.base` for the one convention they share (``lr`` is the
optimizer twin's learning rate on the mean loss; noise N(0, 2·lr·T/N)).
"""

from .base import SGMCMC
from .gradient_uncertainty import GradientUncertainty
from .hamiltonian import SGHMC, SGNHT
from .langevin import PSGLD, SGLD
from .schedules import cyclical_cosine, polynomial_decay

__all__ = [
    "PSGLD",
    "SGHMC",
    "SGLD",
    "SGMCMC",
    "SGNHT",
    "GradientUncertainty",
    "cyclical_cosine",
    "polynomial_decay",
]
