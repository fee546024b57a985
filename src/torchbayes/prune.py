"""Pruning by signal-to-noise ratio (Blundell et al. 2015 §5.1, Table 2; Graves 2011 §7).

A weight whose posterior is wide relative to its mean, |μ|/σ small, carries little
information: setting it to zero barely changes the predictive. Two ways to choose:

* :func:`masks_by_fraction` — remove exactly a fraction of all weights, lowest |μ|/σ first,
  ranked over the whole network (Blundell Table 2: 0, 50, 75, 95, 98 %);
* :func:`masks_by_threshold` — remove every weight with |μ|/σ < λ (Graves eqs. 19–20; λ ≈ 0.83
  is his safe point).

Masks are ``dict[str, BoolTensor]`` (True = kept) keyed like posterior samples. A pruned
posterior (:class:`MaskedPosterior`) feeds the predictive API unchanged; :func:`sparsify`
stores a network's pruned linear layers once, as sparse CSR matrices; :func:`pruning_report`
counts what is left and its bits.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from . import _checks
from .kl import kl_per_weight
from .nn.convert import bayesian_layers
from .posterior import Posterior

__all__ = [
    "MaskedPosterior",
    "SparseLinear",
    "hold_masks",
    "masks_by_fraction",
    "masks_by_threshold",
    "pruning_report",
    "signal_to_noise",
    "sparsify",
]

Masks = dict[str, Tensor]


def signal_to_noise(model: nn.Module, include_biases: bool = True) -> dict[str, Tensor]:
    """|μ|/σ of every weight of ``model``'s Bayesian layers, keyed like posterior samples.

    A weight with σ = 0 (a delta posterior) has infinite SNR and is never pruned.
    """
    snr: dict[str, Tensor] = {}
    for prefix, layer in bayesian_layers(model):
        for name, q in layer.posteriors():
            if name != "weight" and not include_biases:
                continue
            key = f"{prefix}.{name}" if prefix else name
            with torch.no_grad():
                snr[key] = q.mean.abs() / q.stddev.expand_as(q.mean)
    if not snr:
        raise ValueError("model has no Bayesian layers; signal-to-noise needs a posterior σ")
    return snr


def masks_by_fraction(snr: Mapping[str, Tensor], fraction: float) -> Masks:
    """Masks removing exactly ⌊fraction·W⌉ of the W weights, lowest SNR first, network-wide."""
    _checks.probability("fraction", fraction)
    flat = torch.cat([v.reshape(-1) for v in snr.values()])
    removed = round(fraction * flat.numel())
    keep = torch.ones(flat.numel(), dtype=torch.bool, device=flat.device)
    if removed:
        keep[torch.argsort(flat, stable=True)[:removed]] = False
    masks, start = {}, 0
    for key, value in snr.items():
        masks[key] = keep[start : start + value.numel()].reshape(value.shape)
        start += value.numel()
    return masks


def masks_by_threshold(snr: Mapping[str, Tensor], threshold: float) -> Masks:
    """Masks removing every weight with |μ|/σ < λ = ``threshold`` (Graves eq. 20)."""
    _checks.non_negative("threshold", threshold)
    return {key: value >= threshold for key, value in snr.items()}


class MaskedPosterior(Posterior):
    """A posterior with the pruned weights fixed at zero in every sample."""

    def __init__(self, posterior: Posterior, masks: Mapping[str, Tensor]) -> None:
        self.posterior, self.masks = posterior, dict(masks)
        self.network = posterior.network
        names = dict(self.network.named_parameters())
        for key, mask in self.masks.items():
            if key not in names or names[key].shape != mask.shape:
                raise ValueError(f"mask {key!r} of shape {tuple(mask.shape)} fits no parameter")

    @property
    def distinct_samples(self) -> int | None:
        return self.posterior.distinct_samples

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        samples = dict(self.posterior.sample(num_samples, generator))
        params = dict(self.network.named_parameters())
        for key, mask in self.masks.items():
            value = samples.get(key, params[key].detach().expand(num_samples, *mask.shape))
            samples[key] = value * mask
        return samples


class SparseLinear(nn.Module):
    """A linear layer whose weight is stored once, as a sparse CSR matrix of the kept entries."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        with warnings.catch_warnings():  # CSR is "beta" in torch; the ops used here are stable
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            csr = weight.detach().to_sparse_csr()
        self.register_buffer(  # 32-bit indices: half the index storage of the default
            "weight",
            torch.sparse_csr_tensor(
                csr.crow_indices().int(),
                csr.col_indices().int(),
                csr.values(),
                csr.shape,
                check_invariants=True,
            ),
        )
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        out = (self.weight @ flat.T).T
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def storage_bytes(self) -> int:
        """Bytes of the CSR arrays (values, column indices, row pointers) and the bias."""
        w = self.weight
        parts = [w.values(), w.col_indices(), w.crow_indices()]
        if self.bias is not None:
            parts.append(self.bias)
        return sum(t.numel() * t.element_size() for t in parts)


def sparsify(network: nn.Module, masks: Mapping[str, Tensor]) -> nn.Module:
    """A copy of a plain ``network`` with each masked ``nn.Linear`` as a :class:`SparseLinear`
    (weights at their current values, pruned entries dropped); other layers are masked
    densely. The result is for prediction only."""
    pruned = copy.deepcopy(network)
    with torch.no_grad():
        for key, param in pruned.named_parameters():
            if key in masks:
                param.mul_(masks[key])
    for name, module in list(pruned.named_modules()):
        if isinstance(module, nn.Linear) and (f"{name}.weight" if name else "weight") in masks:
            sparse = SparseLinear(module.weight, module.bias)
            if not name:
                return sparse
            parent_name, _, child = name.rpartition(".")
            setattr(pruned.get_submodule(parent_name), child, sparse)
    return pruned


def hold_masks(
    network: nn.Module, masks: Mapping[str, Tensor]
) -> list[torch.utils.hooks.RemovableHandle]:
    """Zero the pruned entries of a plain ``network``'s parameters and keep them zero while it
    is retrained: a gradient hook masks each gradient, so any optimizer without weight decay
    leaves them at 0 (with decay they also stay 0, being 0). Returns the hook handles
    (``handle.remove()`` ends the hold).

    Retraining after pruning (Graves §7) is then ordinary training of the pruned posterior-mean
    network, e.g. ``VariationalPosterior(model).network``.
    """
    params = dict(network.named_parameters())
    handles = []
    for key, mask in masks.items():
        if key not in params or params[key].shape != mask.shape:
            raise ValueError(f"mask {key!r} of shape {tuple(mask.shape)} fits no parameter")
        keep = mask.to(params[key].dtype)
        with torch.no_grad():
            params[key].mul_(keep)
        handles.append(params[key].register_hook(lambda grad, keep=keep: grad * keep))
    return handles


def pruning_report(model: nn.Module, masks: Mapping[str, Tensor]) -> dict[str, float]:
    """Weights kept, their share, and the complexity of what is left: Σ KL(qᵢ‖p) over the
    kept weights, in bits in total and per kept weight."""
    kept_bits, total, kept = 0.0, 0, 0
    for prefix, layer in bayesian_layers(model):
        for name, q in layer.posteriors():
            key = f"{prefix}.{name}" if prefix else name
            mask = masks.get(key, torch.ones_like(q.mean, dtype=torch.bool))
            total += mask.numel()
            kept += int(mask.sum())
            kept_bits += float(kl_per_weight(q, layer.prior)[mask].sum()) / math.log(2.0)
    return {
        "weights": total,
        "kept": kept,
        "kept_fraction": kept / total,
        "kept_complexity_bits": kept_bits,
        "bits_per_kept_weight": kept_bits / kept if kept else float("nan"),
    }
