import math

import pytest
import torch

from torchbayes.models import mlp
from torchbayes.nn import model_kl, to_bayesian
from torchbayes.priors import ScaleMixture
from torchbayes.vi import (
    DescriptionLength,
    FreeEnergy,
    check_finite,
    description_length,
    kl_weights,
)


@pytest.mark.parametrize("schedule", ["uniform", "blundell"])
@pytest.mark.parametrize("m", [1, 2, 7, 469, 2000])
def test_kl_weights_sum_to_one_over_an_epoch(schedule, m):
    w = kl_weights(m, schedule)
    assert w.shape == (m,)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-12)
    assert bool((w >= 0).all())


def test_blundell_weights_are_the_paper_formula():
    m = 10
    expected = torch.tensor(
        [2.0 ** (m - i) / (2.0**m - 1) for i in range(1, m + 1)], dtype=torch.float64
    )
    torch.testing.assert_close(kl_weights(m, "blundell"), expected)


def test_epoch_of_minibatch_losses_is_one_free_energy():
    """Σ_i (batch size) · loss_i = KL + Σ_n NLL_n: the minibatch costs add up to F."""
    torch.manual_seed(0)
    net = to_bayesian(mlp(2, [4], 1), prior=ScaleMixture())
    n, m = 40, 4
    x, y = torch.randn(n, 2), torch.randn(n, 1)
    for schedule in ("uniform", "blundell"):
        fe = FreeEnergy(num_data=n, num_batches=m, schedule=schedule)
        total, kl_total, nll_total = 0.0, 0.0, 0.0
        for i, (xb, yb) in enumerate(zip(x.chunk(m), y.chunk(m), strict=True)):
            nll = ((net(xb) - yb) ** 2).mean()
            terms = fe(net, nll, i)
            total += float(terms.loss) * len(xb)
            kl_total += terms.kl_weight * float(terms.complexity)
            nll_total += float(nll) * len(xb)
        assert total == pytest.approx(kl_total + nll_total, rel=1e-5)


def test_uniform_loss_is_error_plus_kl_over_n():
    net = to_bayesian(mlp(2, [3], 1))
    fe = FreeEnergy(num_data=100, num_batches=10)
    err = torch.tensor(0.7)
    terms = fe(net, err, 3)
    assert float(terms.loss) == pytest.approx(0.7 + float(terms.complexity) / 100, rel=1e-6)
    assert terms.complexity_bits == pytest.approx(float(terms.complexity) / math.log(2))


def test_estimate_averages_several_samples():
    net = to_bayesian(mlp(2, [3], 1))
    fe = FreeEnergy(num_data=10, num_batches=1)
    x = torch.randn(10, 2)
    terms = fe.estimate(net, lambda out: out.pow(2).mean(), x, num_samples=3)
    terms.loss.backward()
    assert net[0].weight_posterior.mu.grad is not None
    assert float(terms.complexity) == pytest.approx(float(model_kl(net)), rel=1e-5)


def test_non_finite_loss_stops_loudly():
    with pytest.raises(FloatingPointError, match="step 12"):
        check_finite(torch.tensor(float("nan")), 12)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_data": 0, "num_batches": 1}, "num_data"),
        ({"num_data": 10, "num_batches": 0}, "num_batches"),
        ({"num_data": 10, "num_batches": 1, "schedule": "cosine"}, "schedule"),
        ({"num_data": 10, "num_batches": 1, "kl_scale": -1.0}, "kl_scale"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"{name}="):
        FreeEnergy(**kwargs)


def test_description_length_arithmetic_on_a_hand_made_case():
    """100 targets over 4 labels: a uniform code needs 200 bits. Error 50 bits + complexity
    30 bits = 80 bits → ratio 2.5; 30 bits over 60 weights = 0.5 bits per weight."""
    dl = DescriptionLength(50 * math.log(2), 30 * math.log(2), 60, 100, 4)
    assert dl.error_bits == pytest.approx(50)
    assert dl.complexity_bits == pytest.approx(30)
    assert dl.total_bits == pytest.approx(80)
    assert dl.uniform_bits == pytest.approx(200)
    assert dl.compression_ratio == pytest.approx(2.5)
    assert dl.bits_per_weight == pytest.approx(0.5)
    assert dl.as_dict()["compression_ratio"] == pytest.approx(2.5)


def test_description_length_of_a_model_uses_its_kl_and_weight_count():
    torch.manual_seed(0)
    model = to_bayesian(mlp(3, [4], 2))
    dl = description_length(model, error_nats=10.0, num_data=20, num_classes=2)
    assert dl.num_weights == 3 * 4 + 4 + 4 * 2 + 2
    assert dl.complexity_nats == pytest.approx(float(model_kl(model).detach()))
    with pytest.raises(ValueError, match="error_nats"):
        description_length(model, error_nats=float("nan"), num_data=20, num_classes=2)
    with pytest.raises(ValueError, match="num_classes"):
        description_length(model, error_nats=1.0, num_data=20, num_classes=1)


def test_finite_guard_names_the_parameter_or_skips_and_counts():
    from torch import nn

    from torchbayes.vi import FiniteGuard

    net = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    net(torch.randn(4, 2)).sum().backward()
    loss = torch.tensor(1.0)
    assert FiniteGuard(net)(loss, 3)
    net[1].weight.grad[0, 1] = float("inf")
    with pytest.raises(FloatingPointError, match=r"gradient of '1\.weight' at step 7"):
        FiniteGuard(net)(loss, 7)
    with pytest.raises(FloatingPointError, match="loss nan at step 2"):
        FiniteGuard(net)(torch.tensor(float("nan")), 2)
    guard = FiniteGuard(net, skip=True)
    assert not guard(loss, 8) and guard.skipped == 1
    assert all(p.grad is None for p in net.parameters())  # nothing for the optimizer to apply
