"""Signal-to-noise pruning: exact fractions, thresholds, masked posteriors, sparse storage."""

import pytest
import torch
from torch import nn

from torchbayes import VariationalPosterior, predict_classes
from torchbayes.kl import kl_divergence, kl_per_weight
from torchbayes.nn import to_bayesian
from torchbayes.priors import Gaussian, Laplace, ScaleMixture
from torchbayes.prune import (
    MaskedPosterior,
    SparseLinear,
    hold_masks,
    masks_by_fraction,
    masks_by_threshold,
    pruning_report,
    signal_to_noise,
    sparsify,
)
from torchbayes.variational import DiagonalGaussian


def _bayes_mlp(prior=None):
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(12, 30), nn.ReLU(), nn.Linear(30, 4))
    model = to_bayesian(plain, prior=prior or Gaussian(0.0, 1.0))
    for _, layer in model.named_modules():
        if hasattr(layer, "weight_posterior"):
            for _, q in layer.posteriors():
                q.rho.data.normal_(-3.0, 1.0)
    return model


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.75, 0.95, 0.98, 1.0])
def test_fraction_masks_keep_exactly_the_requested_share(fraction):
    model = _bayes_mlp()
    snr = signal_to_noise(model)
    total = sum(v.numel() for v in snr.values())
    masks = masks_by_fraction(snr, fraction)
    kept = sum(int(m.sum()) for m in masks.values())
    assert kept == total - round(fraction * total)
    if 0 < kept < total:  # everything kept has SNR ≥ everything removed
        kept_snr = torch.cat([snr[k][masks[k]] for k in snr])
        removed_snr = torch.cat([snr[k][~masks[k]] for k in snr])
        assert float(kept_snr.min()) >= float(removed_snr.max())


def test_fraction_is_exact_even_with_ties():
    snr = {"a": torch.ones(7), "b": torch.ones(3, 2)}
    masks = masks_by_fraction(snr, 0.5)
    assert sum(int(m.sum()) for m in masks.values()) == 13 - round(0.5 * 13)


def test_threshold_masks_and_snr_definition():
    model = _bayes_mlp()
    q = model[0].weight_posterior
    snr = signal_to_noise(model)
    torch.testing.assert_close(snr["0.weight"], q.mu.abs() / q.stddev)
    masks = masks_by_threshold(snr, 0.83)
    assert torch.equal(masks["0.weight"], snr["0.weight"] >= 0.83)
    assert set(signal_to_noise(model, include_biases=False)) == {"0.weight", "2.weight"}
    with pytest.raises(ValueError, match="threshold"):
        masks_by_threshold(snr, -1.0)
    with pytest.raises(ValueError, match="fraction"):
        masks_by_fraction(snr, 1.5)


def test_masked_posterior_zeroes_pruned_weights_in_every_sample():
    model = _bayes_mlp()
    masks = masks_by_fraction(signal_to_noise(model), 0.75)
    posterior = MaskedPosterior(VariationalPosterior(model), masks)
    samples = posterior.sample(5)
    for key, mask in masks.items():
        assert float(samples[key][:, ~mask].abs().max()) == 0.0
        if mask.any():
            assert float(samples[key][:, mask].abs().min()) > 0.0
    pred = predict_classes(posterior, torch.randn(3, 12), 5)
    torch.testing.assert_close(pred.probs.sum(-1), torch.ones(3))
    with pytest.raises(ValueError, match="fits no parameter"):
        MaskedPosterior(VariationalPosterior(model), {"0.weight": torch.ones(2, dtype=torch.bool)})


def test_sparse_network_predicts_like_the_masked_dense_one_and_is_smaller():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(50, 80), nn.ReLU(), nn.Linear(80, 10))
    snr = {k: v.detach().abs() for k, v in net.named_parameters() if k.endswith("weight")}
    masks = masks_by_fraction(snr, 0.95)
    sparse = sparsify(net, masks)
    assert isinstance(sparse[0], SparseLinear) and isinstance(sparse[2], SparseLinear)
    x = torch.randn(6, 50)
    dense = nn.Sequential(nn.Linear(50, 80), nn.ReLU(), nn.Linear(80, 10))
    dense.load_state_dict(net.state_dict())
    with torch.no_grad():
        for key, mask in masks.items():
            dense.get_parameter(key).mul_(mask)
        torch.testing.assert_close(sparse(x), dense(x))
    dense_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    assert sum(m.storage_bytes() for m in (sparse[0], sparse[2])) < 0.15 * dense_bytes
    lone = sparsify(nn.Linear(4, 3), {"weight": torch.rand(3, 4) > 0.5})
    assert isinstance(lone, SparseLinear) and lone(torch.randn(2, 4)).shape == (2, 3)


@pytest.mark.parametrize(
    "prior", [Gaussian(0.1, 0.5), Laplace(0.0, 0.3), ScaleMixture(0.5, 1.0, 0.01)]
)
def test_kl_per_weight_sums_to_the_layer_kl(prior):
    torch.manual_seed(2)
    q = DiagonalGaussian(torch.randn(400) * 0.3, rho_init=-2.0, rho_init_std=0.5)
    per_weight = kl_per_weight(
        q, prior, num_samples=4000, generator=torch.Generator().manual_seed(0)
    )
    assert per_weight.shape == (400,)
    exact = float(kl_divergence(q, prior).detach()) if not isinstance(prior, ScaleMixture) else None
    if exact is not None:
        assert float(per_weight.sum()) == pytest.approx(exact, rel=1e-5)
    else:  # Monte Carlo against Monte Carlo with a different generator
        other = kl_per_weight(q, prior, 4000, torch.Generator().manual_seed(1)).sum()
        assert float(per_weight.sum()) == pytest.approx(float(other), rel=0.02)


def test_pruning_report_counts_what_is_left():
    model = _bayes_mlp()
    masks = masks_by_fraction(signal_to_noise(model), 0.5)
    report = pruning_report(model, masks)
    total = 12 * 30 + 30 + 30 * 4 + 4
    assert report["weights"] == total and report["kept"] == total - round(0.5 * total)
    assert report["kept_fraction"] == pytest.approx(report["kept"] / total)
    everything = pruning_report(model, {})
    assert everything["kept"] == total
    kl = sum(
        float(kl_divergence(q, layer.prior).detach())
        for layer in (model[0], model[2])
        for _, q in layer.posteriors()
    )
    assert everything["kept_complexity_bits"] == pytest.approx(
        kl / torch.log(torch.tensor(2.0)).item(), rel=1e-5
    )
    assert report["kept_complexity_bits"] < everything["kept_complexity_bits"]


def test_held_masks_keep_pruned_weights_at_zero_through_retraining():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 2))
    masks = masks_by_fraction({k: v.detach().abs() for k, v in net.named_parameters()}, 0.6)
    handles = hold_masks(net, masks)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    x, y = torch.randn(32, 6), torch.randint(2, (32,))
    for _ in range(20):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    params = dict(net.named_parameters())
    for key, mask in masks.items():
        assert float(params[key].detach()[~mask].abs().sum()) == 0.0
    assert any(float(params[k].detach()[m].abs().min()) > 0 for k, m in masks.items() if m.any())
    for handle in handles:
        handle.remove()
    with pytest.raises(ValueError, match="fits no parameter"):
        hold_masks(net, {"nope": torch.ones(1, dtype=torch.bool)})


def test_retrain_pruned_fits_the_data_with_the_pruned_weights_still_zero():
    from torchbayes.experiments.mnist_bbb import Config, retrain_pruned

    model = _bayes_mlp()
    network = VariationalPosterior(model).network
    masks = masks_by_fraction(signal_to_noise(model), 0.5)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 12, generator=generator)
    y = (x[:, :4] * 3).argmax(-1)

    def loss(net):
        with torch.no_grad():
            return float(nn.functional.cross_entropy(sparsify(net, masks)(x), y))

    config = Config.quick(retrain_epochs=20, batch_size=32, retrain_lr=1e-2)
    retrained = retrain_pruned(network, masks, (x, y), config, generator)
    assert loss(retrained) < 0.5 * loss(network)
    params = dict(retrained.named_parameters())
    for key, mask in masks.items():
        assert torch.all(params[key][~mask] == 0)
    assert not any(p._backward_hooks for p in retrained.parameters())  # hold released
