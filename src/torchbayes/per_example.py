"""Per-example squared gradient norms ‖∇ℓᵢ‖² without m per-example gradient copies.

For a layer z = a·Wᵀ + b the i-th example's gradient is Gᵢ = δᵢᵀaᵢ (δ = ∂ℓ/∂z, a the layer's
input), so its squared Frobenius norm needs only the layer's activations and output
gradients (Goodfellow 2015, "ghost norm"):

* one position per example (Linear on (m, in)):   ‖Gᵢ‖² = ‖aᵢ‖²·‖δᵢ‖²;
* T positions (Conv2d after unfolding, Linear on sequences): either the ghost form
  ‖Gᵢ‖² = ⟨aᵢaᵢᵀ, δᵢδᵢᵀ⟩ (two T×T Gram matrices) or Gᵢ itself (out × in), whichever is
  smaller (Li et al. 2022, "mixed ghost clipping"); the bias adds ‖Σ_t δᵢₜ‖².

:class:`PerExampleGradNorms` backpropagates the mean loss into ``.grad`` as an ordinary
training step would and returns ‖∇ℓᵢ‖² for every example in the same pass. Its
``method``:

* ``"ghost"`` — hooks on ``nn.Linear`` / ``nn.Conv2d`` (groups = 1, zero padding); trainable
  parameters anywhere else are handled by ``torch.func.vmap(grad)`` over those parameters only;
* ``"vmap"``  — ``torch.func.vmap(grad)`` over every parameter (materializes m gradients);
* ``"loop"``  — one ``autograd.grad`` per example: the slow reference.

Examples must not interact in the forward pass (no BatchNorm in training mode): otherwise a
per-example gradient is not defined by the minibatch loss alone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from . import _checks

__all__ = ["METHODS", "PerExampleGradNorms", "pairwise_agreement"]

METHODS: tuple[str, ...] = ("ghost", "vmap", "loop")

LossFn = Callable[[Tensor, Tensor], Tensor]


def _cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(outputs, targets, reduction="none")


def pairwise_agreement(mean_grad_sq_norm: Tensor, sq_norms: Tensor) -> Tensor:
    """(1/(m(m−1))) Σ_{i≠j}⟨gᵢ, gⱼ⟩ from ‖ḡ‖² and the per-example ‖gᵢ‖² (Park et al. 2018 eq. 2).

    Uses Σ_{i≠j}⟨gᵢ,gⱼ⟩ = ‖Σᵢgᵢ‖² − Σᵢ‖gᵢ‖² with Σᵢgᵢ = m·ḡ. Dividing by the m(m−1) pairs
    makes it an unbiased estimate of ‖E g‖², the squared norm of the full-data gradient:
    large while the examples pull the same way, near zero (or negative) once they disagree.
    """
    m = sq_norms.numel()
    if m < 2:
        raise ValueError(f"gradient agreement needs at least 2 examples, got a batch of {m}")
    return (m * m * mean_grad_sq_norm - sq_norms.sum()) / (m * (m - 1))


def _supported(module: nn.Module) -> bool:
    if isinstance(module, nn.Linear):
        return True
    return (
        isinstance(module, nn.Conv2d)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and not isinstance(module.padding, str)
    )


def _unfold_conv(module: nn.Conv2d, a: Tensor) -> Tensor:
    """Conv2d input as patches (m, T, in·k²), T the number of output positions."""
    patches = F.unfold(
        a,
        module.kernel_size,
        dilation=module.dilation,
        padding=module.padding,
        stride=module.stride,
    )
    return patches.transpose(1, 2)


def _weight_sq_norms(a: Tensor, delta: Tensor) -> Tensor:
    """‖δᵢᵀaᵢ‖² for a (m, T, p) and δ (m, T, q): the cheaper of Gram matrices or Gᵢ itself."""
    if a.shape[1] == 1:
        return a.square().sum((1, 2)) * delta.square().sum((1, 2))
    if a.shape[1] ** 2 < a.shape[2] * delta.shape[2]:
        return (a @ a.transpose(1, 2) * (delta @ delta.transpose(1, 2))).sum((1, 2))
    return (delta.transpose(1, 2) @ a).square().sum((1, 2))


class PerExampleGradNorms:
    """Backpropagate the mean loss and return the per-example squared gradient norms.

    Args:
        model: the network; its trainable parameters are the ones measured.
        loss_fn: per-example losses ``loss_fn(outputs, targets) -> (m,)`` (default:
            cross-entropy with ``reduction="none"``).
        method: ``"ghost"``, ``"vmap"`` or ``"loop"`` (see the module docstring).

    ``norms(inputs, targets)`` computes L̄ = (1/m) Σᵢ ℓᵢ, adds ∇L̄ into every parameter's
    ``.grad`` (as ``L̄.backward()`` does) and returns ``(L̄, s)`` with sᵢ = ‖∇ℓᵢ‖².
    """

    def __init__(
        self, model: nn.Module, loss_fn: LossFn | None = None, method: str = "ghost"
    ) -> None:
        _checks.one_of("method", method, METHODS)
        self.model, self.method = model, method
        self.loss_fn = loss_fn if loss_fn is not None else _cross_entropy
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._calls: dict[nn.Module, int] = {}
        self._sq: Tensor | None = None
        covered: set[int] = set()
        if method == "ghost":
            for module in model.modules():
                if _supported(module):
                    self._handles.append(module.register_forward_hook(self._forward_hook))
                    covered.update(id(p) for p in module.parameters(recurse=False))
        self._others = [
            name for name, p in model.named_parameters() if p.requires_grad and id(p) not in covered
        ]

    def remove(self) -> None:
        """Detach the hooks from the model."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # -- ghost path -------------------------------------------------------------------------

    def _forward_hook(self, module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        if self._sq is None or not output.requires_grad:
            return
        self._calls[module] = self._calls.get(module, 0) + 1
        if self._calls[module] > 1:
            raise RuntimeError(
                f"{type(module).__name__} ran twice in one forward pass; ghost norms need each "
                "layer used once per pass (use method='vmap')"
            )
        a = inputs[0].detach()
        output.register_hook(lambda delta: self._accumulate(module, a, delta))

    def _accumulate(self, module: nn.Module, a: Tensor, delta: Tensor) -> None:
        assert self._sq is not None
        m = a.shape[0]
        if isinstance(module, nn.Conv2d):
            a = _unfold_conv(module, a)
            delta = delta.reshape(m, delta.shape[1], -1).transpose(1, 2)
        else:
            a, delta = a.reshape(m, -1, a.shape[-1]), delta.reshape(m, -1, delta.shape[-1])
        if module.weight.requires_grad:
            self._sq += _weight_sq_norms(a, delta)
        if module.bias is not None and module.bias.requires_grad:
            self._sq += delta.sum(1).square().sum(1)

    # -- the three methods --------------------------------------------------------------------

    def __call__(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        m = inputs.shape[0]
        if targets.shape[0] != m:
            raise ValueError(f"inputs hold {m} examples but targets {targets.shape[0]}")
        if self.method == "vmap":
            names = [n for n, p in self.model.named_parameters() if p.requires_grad]
            loss, sq = self._vmap(names, inputs, targets, accumulate=True)
            return loss, sq
        if self.method == "loop":
            return self._loop(inputs, targets)
        self._sq, self._calls = inputs.new_zeros(m), {}
        try:
            loss = self.loss_fn(self.model(inputs), targets).mean()
            loss.backward()
            sq = self._sq * (m * m)  # the hooks saw ∂L̄/∂z = (1/m)∂ℓᵢ/∂zᵢ
        finally:
            self._sq = None
        if self._others:
            sq = sq + self._vmap(self._others, inputs, targets, accumulate=False)[1]
        return loss.detach(), sq

    def _vmap(
        self, names: list[str], inputs: Tensor, targets: Tensor, accumulate: bool
    ) -> tuple[Tensor, Tensor]:
        """Per-example gradients of the parameters ``names`` by vmap(grad); the rest fixed."""
        params = dict(self.model.named_parameters())
        free = {n: params[n].detach() for n in names}
        fixed = {n: p.detach() for n, p in params.items() if n not in free}

        def example_loss(free: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
            out = functional_call(self.model, {**fixed, **free}, (x.unsqueeze(0),))
            return self.loss_fn(out, y.unsqueeze(0)).squeeze(0)

        sq_active, self._sq = self._sq, None  # keep the ghost hooks quiet in this pass
        try:
            grads, losses = vmap(grad_and_value(example_loss), in_dims=(None, 0, 0))(
                free, inputs, targets
            )
        finally:
            self._sq = sq_active
        sq = sum(g.flatten(1).square().sum(1) for g in grads.values())
        if accumulate:
            for name, g in grads.items():
                p = params[name]
                p.grad = g.mean(0) if p.grad is None else p.grad + g.mean(0)
        return losses.mean().detach(), sq

    def _loop(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        losses = self.loss_fn(self.model(inputs), targets)
        sq = inputs.new_zeros(inputs.shape[0])
        for i in range(inputs.shape[0]):
            grads = torch.autograd.grad(losses[i], params, retain_graph=True, allow_unused=True)
            sq[i] = sum(g.square().sum() for g in grads if g is not None)
        loss = losses.mean()
        loss.backward()
        return loss.detach(), sq
