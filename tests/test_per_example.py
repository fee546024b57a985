"""Per-example gradient norms: ghost norms and vmap against a naive per-example loop."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchbayes.per_example import PerExampleGradNorms, pairwise_agreement


def _cnn():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),  # 64 positions: per-example gradients materialized
        nn.ReLU(),
        nn.Conv2d(4, 6, 3, stride=2, dilation=1),  # 9 positions: Gram (ghost) form
        nn.ReLU(),
        nn.Conv2d(6, 5, 2, padding=(1, 0), dilation=(1, 2), bias=False),
        nn.Flatten(),
        nn.Linear(5 * 4 * 1, 7),
        nn.Tanh(),
        nn.Linear(7, 3),
    )


class _Sequence(nn.Module):
    """Linear layers on (m, T, d) inputs plus a LayerNorm the hooks do not cover."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 6)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        return self.head(self.norm(torch.tanh(self.proj(x)))).mean(1)


CASES = {
    "mlp": (lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (9, 6), 3),
    "cnn": (_cnn, (9, 1, 8, 8), 3),
    "sequence": (_Sequence, (9, 7, 5), 4),
}


def _reference(model, x, y):
    """Per-example gradients one example at a time, and the plain mean-loss gradient."""
    params = [p for p in model.parameters() if p.requires_grad]
    per_example = []
    for i in range(len(x)):
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        per_example.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    mean = torch.autograd.grad(F.cross_entropy(model(x), y), params)
    return torch.stack(per_example), mean


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", ["ghost", "vmap", "loop"])
def test_norms_and_grads_match_per_example_gradients(case, method):
    make, shape, classes = CASES[case]
    model = make().double()
    x = torch.randn(shape, dtype=torch.float64)
    y = torch.randint(classes, (shape[0],))
    per_example, mean = _reference(model, x, y)
    loss, sq = PerExampleGradNorms(model, method=method)(x, y)
    torch.testing.assert_close(sq, per_example.square().sum(1))
    torch.testing.assert_close(loss, F.cross_entropy(model(x), y).detach())
    for p, g in zip(model.parameters(), mean, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_frozen_parameters_are_left_out():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)).double()
    model[0].weight.requires_grad_(False)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(2, (6,))
    ghost = PerExampleGradNorms(model)(x, y)[1]
    loop = PerExampleGradNorms(model, method="loop")(x, y)[1]
    torch.testing.assert_close(ghost, loop)
    assert model[0].weight.grad is None


def test_pairwise_agreement_is_the_mean_off_diagonal_inner_product():
    g = torch.randn(7, 30, dtype=torch.float64)
    gram = g @ g.T
    expected = (gram.sum() - gram.diagonal().sum()) / (7 * 6)
    got = pairwise_agreement(g.mean(0).square().sum(), g.square().sum(1))
    torch.testing.assert_close(got, expected)


def test_pairwise_agreement_estimates_the_squared_full_gradient():
    """E over minibatches of u = ‖E g‖² (unbiased), unlike ‖ḡ‖² which adds the noise."""
    generator = torch.Generator().manual_seed(0)
    mu = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    g = mu + torch.randn(20000, 8, 3, generator=generator, dtype=torch.float64)
    u = torch.stack([pairwise_agreement(b.mean(0).square().sum(), b.square().sum(1)) for b in g])
    assert abs(float(u.mean()) - float(mu.square().sum())) < 0.01
    assert float(g.mean(1).square().sum(1).mean()) > 0.4  # ‖ḡ‖² is biased by tr Σ/m = 3/8


def test_a_layer_used_twice_is_refused():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.Tanh(), shared)
    with pytest.raises(RuntimeError, match="ran twice"):
        PerExampleGradNorms(model)(torch.randn(4, 3), torch.randint(3, (4,)))


def test_bad_arguments_name_themselves():
    model = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="method"):
        PerExampleGradNorms(model, method="fast")
    with pytest.raises(ValueError, match="targets"):
        PerExampleGradNorms(model)(torch.randn(4, 3), torch.randint(2, (5,)))
    with pytest.raises(ValueError, match="at least 2"):
        pairwise_agreement(torch.tensor(1.0), torch.ones(1))


def test_hooks_are_quiet_outside_the_measured_pass_and_removable():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    norms = PerExampleGradNorms(model)
    F.cross_entropy(model(torch.randn(5, 3)), torch.randint(2, (5,))).backward()  # plain step
    norms.remove()
    assert not model[0]._forward_hooks
