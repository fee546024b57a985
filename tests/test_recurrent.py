"""Bayesian recurrent layers: zero variance is the plain module, shapes, sharing over time, KL."""

import pytest
import torch
from torch import nn

from torchbayes import VariationalPosterior
from torchbayes.kl import kl_divergence
from torchbayes.models import CharRNN
from torchbayes.nn import (
    BayesEmbedding,
    BayesRNN,
    model_kl,
    posterior_mean,
    to_bayesian,
    to_deterministic,
)
from torchbayes.priors import Gaussian
from torchbayes.variational import Delta, DiagonalGaussian

CELLS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


@pytest.mark.parametrize("cell", list(CELLS))
def test_zero_variance_bayesian_rnn_equals_the_plain_module(cell):
    torch.manual_seed(0)
    plain = CELLS[cell](6, 10, num_layers=2, batch_first=True)
    bayes = BayesRNN(plain, posterior=Delta)
    x = torch.randn(4, 9, 6)
    got, got_state = bayes(x)
    want, want_state = plain(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_state, want_state)


def test_mean_mode_and_deterministic_twin_equal_the_plain_module():
    torch.manual_seed(0)
    plain = nn.LSTM(5, 7, num_layers=2, batch_first=True, bidirectional=True)
    bayes = BayesRNN(plain, posterior=lambda w: DiagonalGaussian(w, rho_init=-3.0))
    x = torch.randn(3, 8, 5)
    with posterior_mean(bayes):
        torch.testing.assert_close(bayes(x)[0], plain(x)[0])
    torch.testing.assert_close(bayes.deterministic()(x)[0], plain(x)[0])


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 3])
def test_stacked_and_bidirectional_shapes(layers, bidirectional):
    plain = nn.GRU(4, 6, num_layers=layers, batch_first=True, bidirectional=bidirectional)
    bayes = BayesRNN(plain)
    out, state = bayes(torch.randn(2, 11, 4))
    directions = 2 if bidirectional else 1
    assert out.shape == (2, 11, 6 * directions)
    assert state.shape == (layers * directions, 2, 6)
    assert {name for name, _ in bayes.posteriors()} == {n for n, _ in plain.named_parameters()}


def test_one_weight_sample_is_shared_by_every_time_step():
    # A constant input under a sampled linear recurrence h_t = tanh(W x + U h_{t-1} + b):
    # re-running the first half with the layer's last sample reproduces the full run's prefix.
    torch.manual_seed(1)
    bayes = BayesRNN(nn.RNN(3, 5, batch_first=True), posterior=DiagonalGaussian)
    x = torch.randn(2, 12, 3)
    out, _ = bayes(x)
    sample = {name: draw.sample for name, draw in bayes._last_draw.items()}
    prefix, _ = bayes._apply_weights(x[:, :6], None, **sample)
    torch.testing.assert_close(prefix, out[:, :6])
    assert not torch.allclose(bayes(x)[0], out)  # a new forward draws a new network


def test_kl_sums_every_weight_and_gradients_reach_mu_and_rho():
    plain = nn.LSTM(3, 4, num_layers=2)
    prior = Gaussian(0.0, 0.5)
    bayes = BayesRNN(plain, prior=prior)
    bayes(torch.randn(5, 2, 3))
    expected = sum(kl_divergence(q, prior) for _, q in bayes.posteriors())
    torch.testing.assert_close(bayes.kl(), expected)
    bayes.kl().backward()
    assert all(p.grad is not None for p in bayes.parameters())
    assert len(list(bayes.parameters())) == 2 * len(list(plain.parameters()))  # μ and ρ only


def test_to_bayesian_char_rnn_samples_plug_into_the_deterministic_twin():
    torch.manual_seed(0)
    model = to_bayesian(CharRNN(vocab_size=9, hidden=6, layers=2, cell="lstm"))
    assert isinstance(model.rnn, BayesRNN) and isinstance(model.encoder, BayesEmbedding)
    ids = torch.randint(0, 9, (2, 7))
    logits, _ = model(ids)
    (logits.sum() + model_kl(model)).backward()
    posterior = VariationalPosterior(model)
    samples = posterior.sample(2, torch.Generator().manual_seed(0))
    twin = to_deterministic(model)
    assert set(samples) == {name for name, _ in twin.named_parameters()}
    with pytest.raises(ValueError, match="estimator"):
        to_bayesian(CharRNN(vocab_size=9, hidden=6), estimator="local")


def test_state_dict_round_trip_and_plain_module_is_not_a_parameter():
    bayes = BayesRNN(nn.GRU(3, 4))
    plain_names = {name for name, _ in nn.GRU(3, 4).named_parameters()}
    posterior_keys = {k.split("_posterior")[0] for k in bayes.state_dict() if "_posterior" in k}
    assert posterior_keys == plain_names
    assert not any(k.startswith("_template") for k in bayes.state_dict())
    clone = BayesRNN(nn.GRU(3, 4))
    clone.load_state_dict(bayes.state_dict())
    x = torch.randn(6, 2, 3)
    with posterior_mean(bayes), posterior_mean(clone):
        torch.testing.assert_close(bayes(x)[0], clone(x)[0])


def test_zero_variance_embedding_equals_the_plain_one():
    plain = nn.Embedding(7, 3)
    bayes = BayesEmbedding(plain, posterior=Delta)
    ids = torch.randint(0, 7, (2, 5))
    torch.testing.assert_close(bayes(ids), plain(ids))
    torch.testing.assert_close(bayes.deterministic()(ids), plain(ids))
