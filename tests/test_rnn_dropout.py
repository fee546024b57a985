"""Gal's dropout for RNNs: the time loop reproduces the fused kernels, masks are shared over
time and reach the recurrent connection, padding is respected."""

import pytest
import torch
from torch import nn

from torchbayes.nn import GalDropoutRNN

CELLS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


def _ones(module: nn.RNNBase, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    directions = 2 if module.bidirectional else 1
    masks = []
    for layer in range(module.num_layers):
        features = module.input_size if layer == 0 else module.hidden_size * directions
        masks += [(torch.ones(batch, features), torch.ones(batch, module.hidden_size))] * directions
    return masks


@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("bidirectional", [False, True])
def test_loop_with_unit_masks_equals_fused_kernel_on_padded_batches(cell, bidirectional):
    torch.manual_seed(0)
    module = CELLS[cell](4, 6, num_layers=2, batch_first=True, bidirectional=bidirectional)
    layer = GalDropoutRNN(module, 0.3, 0.3)
    x = torch.randn(3, 7, 4)
    lengths = torch.tensor([7, 3, 5])
    fused_out, fused_state = layer.eval()(x, lengths)
    loop_out, loop_state = layer.train()(x, lengths, masks=_ones(module, 3))
    torch.testing.assert_close(loop_out, fused_out)
    torch.testing.assert_close(loop_state, fused_state)  # (h, c) tuples compare elementwise
    assert loop_out.shape == (3, 7, 6 * (2 if bidirectional else 1))
    assert loop_out[1, 3:].abs().max() == 0  # past its length


def test_masks_are_shared_over_time_and_reach_the_recurrent_connection():
    torch.manual_seed(1)
    module = nn.LSTM(3, 5, batch_first=True)
    layer = GalDropoutRNN(module, 0.5, 0.5).train()
    x = torch.randn(2, 6, 3)
    mask_x = torch.bernoulli(torch.full((2, 3), 0.5)) * 2
    mask_h = torch.bernoulli(torch.full((2, 5), 0.5)) * 2
    out, _ = layer(x, masks=[(mask_x, mask_h)])
    cell = nn.LSTMCell(3, 5)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in module.state_dict().items()})
    h = c = torch.zeros(2, 5)
    expected = []
    for t in range(6):  # the same two masks at every step, the hidden one on h_{t-1}
        h, c = cell(x[:, t] * mask_x, (h * mask_h, c))
        expected.append(h)
    torch.testing.assert_close(out, torch.stack(expected, dim=1))


def test_random_masks_drop_at_the_rate_and_train_every_weight():
    torch.manual_seed(2)
    layer = GalDropoutRNN(nn.GRU(8, 8, batch_first=True), 0.5, 0.5).train()
    mask_x, mask_h = layer._draw(4000, 8, torch.zeros(1))
    assert abs(float((mask_x == 0).float().mean()) - 0.5) < 0.02
    assert set(mask_h.unique().tolist()) == {0.0, 2.0}
    out, state = layer(torch.randn(3, 5, 8))
    (out.sum() + state.sum()).backward()
    assert all(p.grad is not None for p in layer.parameters())
    two = [layer(torch.ones(1, 4, 8))[0] for _ in range(2)]
    assert not torch.equal(two[0], two[1])  # a fresh mask per forward pass


def test_gal_dropout_checks_its_arguments():
    with pytest.raises(ValueError, match="p_hidden"):
        GalDropoutRNN(nn.LSTM(2, 2), 0.1, 1.0)
    with pytest.raises(TypeError, match="module"):
        GalDropoutRNN(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="proj_size"):
        GalDropoutRNN(nn.LSTM(2, 4, proj_size=2))
