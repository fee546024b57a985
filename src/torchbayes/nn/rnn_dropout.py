"""Gal & Ghahramani's variational dropout for recurrent networks (NeurIPS 2016), the
"Gal's dropout" baseline of Gan et al. (2017, Table 6).

Naive dropout (Zaremba et al. 2014) draws fresh masks at every time step and leaves the
recurrent connection alone. Gal's variant draws **one mask per sequence** for the inputs
and one for the hidden state of every layer and direction, and applies the same masks at
every time step, recurrent connection included:

    gates_t = W_ih (x_t ∘ z_x) + b_ih + W_hh (h_{t−1} ∘ z_h) + b_hh,
    z_x ~ Bernoulli(1 − p_input) / (1 − p_input),  z_h ~ Bernoulli(1 − p_hidden) / (1 − p_hidden).

Dropping a unit of h for a whole sequence is dropping a column of W_hh for that sequence,
so each sequence sees one thinned network — an approximate variational posterior over the
weights (Gal & Ghahramani 2016, §3). A per-sequence mask on h_{t−1} has no fused kernel:
in training the recurrence runs a loop over time (the input projection of all steps is one
matmul); in evaluation, or with both rates 0, the module's own fused kernel runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .. import _checks

__all__ = ["GalDropoutRNN"]

Masks = Sequence[tuple[Tensor, Tensor]]  # per (layer, direction): (input mask, hidden mask)


class GalDropoutRNN(nn.Module):
    """``module`` (an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``, any depth, uni- or bidirectional)
    with masks shared over time on its inputs and its recurrent state.

    ``forward(inputs, lengths=None, state=None, masks=None)`` returns ``(outputs, state)`` as
    the module does; ``lengths`` gives each sequence's true length in a padded batch (outputs
    past it are zero, the final state is taken at it, the backward direction starts there).
    ``masks`` — one ``(input mask, hidden mask)`` pair per layer and direction, in the
    module's order — replaces the random draw (for reproducing a forward pass). The module's
    own between-layer ``dropout`` is not used: each layer's input mask takes its place.
    """

    def __init__(self, module: nn.RNNBase, p_input: float = 0.25, p_hidden: float = 0.25) -> None:
        super().__init__()
        if not isinstance(module, (nn.LSTM, nn.GRU, nn.RNN)):
            raise TypeError(f"module must be an nn.LSTM, nn.GRU or nn.RNN, got {type(module)}")
        if getattr(module, "proj_size", 0):
            raise ValueError(f"proj_size is not supported, got proj_size={module.proj_size}")
        for name, p in (("p_input", p_input), ("p_hidden", p_hidden)):
            _checks.below_one(name, p)
        self.module = module
        self.p_input, self.p_hidden = p_input, p_hidden

    @property
    def bidirectional(self) -> bool:
        return self.module.bidirectional

    def forward(
        self,
        inputs: Tensor,
        lengths: Tensor | None = None,
        state: Tensor | tuple[Tensor, Tensor] | None = None,
        masks: Masks | None = None,
    ):
        if masks is None and (not self.training or self.p_input == self.p_hidden == 0.0):
            return self._fused(inputs, lengths, state)
        x = inputs if self.module.batch_first else inputs.transpose(0, 1)
        outputs, state = self._loop(x, lengths, state, masks)
        return (outputs if self.module.batch_first else outputs.transpose(0, 1)), state

    def _fused(self, inputs: Tensor, lengths: Tensor | None, state):
        if lengths is None:
            return self.module(inputs, state)
        packed = pack_padded_sequence(
            inputs, lengths.cpu(), batch_first=self.module.batch_first, enforce_sorted=False
        )
        outputs, state = self.module(packed, state)
        time = inputs.shape[1 if self.module.batch_first else 0]
        outputs, _ = pad_packed_sequence(
            outputs, batch_first=self.module.batch_first, total_length=time
        )
        return outputs, state

    def _loop(self, x: Tensor, lengths: Tensor | None, state, masks: Masks | None):
        module = self.module
        batch, time, _ = x.shape
        steps = torch.arange(time, device=x.device)
        if lengths is None:
            lengths = torch.full((batch,), time, device=x.device)
        lengths = lengths.to(x.device)
        valid = (steps < lengths[:, None]).unsqueeze(-1)  # (batch, time, 1)
        # Reverses each sequence within its own length (an involution; padding stays put).
        reverse = torch.where(valid.squeeze(-1), lengths[:, None] - 1 - steps, steps)
        directions = 2 if module.bidirectional else 1
        is_lstm = isinstance(module, nn.LSTM)
        h0, c0 = _initial_state(module, state, batch, x)
        finals_h, finals_c = [], []
        layer_input = x
        for layer in range(module.num_layers):
            outs = []
            for direction in range(directions):
                index = layer * directions + direction
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                seq = layer_input if direction == 0 else _gather_time(layer_input, reverse)
                mask_x, mask_h = (
                    masks[index] if masks is not None else self._draw(batch, seq.shape[-1], x)
                )
                w_ih = getattr(module, "weight_ih" + suffix)
                w_hh = getattr(module, "weight_hh" + suffix)
                b_ih = getattr(module, "bias_ih" + suffix) if module.bias else None
                b_hh = getattr(module, "bias_hh" + suffix) if module.bias else None
                projected = nn.functional.linear(seq * mask_x.unsqueeze(1), w_ih, b_ih)
                h, c = h0[index], (c0[index] if is_lstm else None)
                out = []
                for t in range(time):
                    recurrent = nn.functional.linear(h * mask_h, w_hh, b_hh)
                    h_new, c_new = self._cell(projected[:, t], recurrent, h, c)
                    keep = valid[:, t]
                    h = torch.where(keep, h_new, h)
                    if is_lstm:
                        c = torch.where(keep, c_new, c)
                    out.append(h_new * keep)
                out = torch.stack(out, dim=1)
                outs.append(out if direction == 0 else _gather_time(out, reverse))
                finals_h.append(h)
                finals_c.append(c)
            layer_input = torch.cat(outs, dim=-1) if directions > 1 else outs[0]
        final = torch.stack(finals_h)
        return layer_input, ((final, torch.stack(finals_c)) if is_lstm else final)

    def _draw(self, batch: int, features: int, like: Tensor) -> tuple[Tensor, Tensor]:
        hidden = self.module.hidden_size
        return _mask(batch, features, self.p_input, like), _mask(batch, hidden, self.p_hidden, like)

    def _cell(self, gx: Tensor, gh: Tensor, h: Tensor, c: Tensor | None):
        """One step of PyTorch's LSTM / GRU / RNN equations (gate order i, f, g, o / r, z, n)."""
        if isinstance(self.module, nn.LSTM):
            i, f, g, o = (gx + gh).chunk(4, dim=-1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c_new), c_new
        if isinstance(self.module, nn.GRU):
            xr, xz, xn = gx.chunk(3, dim=-1)
            hr, hz, hn = gh.chunk(3, dim=-1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            return (1 - z) * n + z * h, None
        activation = torch.tanh if self.module.nonlinearity == "tanh" else torch.relu
        return activation(gx + gh), None

    def extra_repr(self) -> str:
        return f"p_input={self.p_input}, p_hidden={self.p_hidden}"


def _mask(batch: int, features: int, p: float, like: Tensor) -> Tensor:
    if p == 0.0:
        return like.new_ones(batch, features)
    return like.new_empty(batch, features).bernoulli_(1 - p) / (1 - p)


def _gather_time(x: Tensor, index: Tensor) -> Tensor:
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


def _initial_state(module: nn.RNNBase, state, batch: int, like: Tensor):
    directions = 2 if module.bidirectional else 1
    shape = (module.num_layers * directions, batch, module.hidden_size)
    if state is None:
        zeros = like.new_zeros(shape)
        return zeros, zeros
    return state if isinstance(module, nn.LSTM) else (state, None)
