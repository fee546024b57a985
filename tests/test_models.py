"""Reference networks: the character RNN's shapes, state carrying and argument checks."""

import pytest
import torch

from torchbayes.models import CharRNN, WithNoiseScale, detach_state
from torchbayes.predict import noise_std_from_output


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_char_rnn_carried_state_equals_one_long_pass(cell):
    torch.manual_seed(0)
    model = CharRNN(vocab_size=11, hidden=8, layers=2, cell=cell).eval()
    ids = torch.randint(0, 11, (3, 20))
    whole, _ = model(ids)
    first, state = model(ids[:, :12])
    second, _ = model(ids[:, 12:], detach_state(state))
    assert whole.shape == (3, 20, 11)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole)


def test_char_rnn_trains_every_weight_and_checks_its_arguments():
    model = CharRNN(vocab_size=5, hidden=4, layers=2, cell="lstm")
    logits, _ = model(torch.randint(0, 5, (2, 7)))
    logits.sum().backward()
    names = {n for n, p in model.named_parameters() if p.grad is not None}
    assert {"encoder.weight", "rnn.weight_hh_l1", "decoder.weight"} <= names
    assert names == {n for n, _ in model.named_parameters()}
    with pytest.raises(ValueError, match="cell"):
        CharRNN(5, cell="transformer")
    with pytest.raises(ValueError, match="dropout"):
        CharRNN(5, dropout=1.0)


def test_sentence_classifier_ignores_padding():
    from torchbayes.models import SentenceClassifier

    torch.manual_seed(0)
    model = SentenceClassifier(vocab_size=20, num_classes=3, embed=5, hidden=6).eval()
    ids = torch.tensor([[4, 7, 9, 0, 0], [3, 2, 0, 0, 0]])
    lengths = torch.tensor([3, 2])
    padded = model(ids, lengths)
    alone = torch.cat([model(ids[:1, :3], lengths[:1]), model(ids[1:, :2], lengths[1:])])
    torch.testing.assert_close(padded, alone)
    assert padded.shape == (2, 3)


def test_gal_dropout_models_use_the_time_loop_in_training_only():
    from torchbayes.models import SentenceClassifier
    from torchbayes.nn import GalDropoutRNN

    torch.manual_seed(0)
    model = SentenceClassifier(20, 3, embed=5, hidden=6, dropout=0.5, dropout_kind="gal")
    assert isinstance(model.rnn, GalDropoutRNN)
    ids, lengths = torch.tensor([[4, 7, 9], [3, 2, 0]]), torch.tensor([3, 2])
    model.train()
    assert not torch.equal(model(ids, lengths), model(ids, lengths))
    model.eval()
    torch.testing.assert_close(model(ids, lengths), model(ids, lengths))
    lm = CharRNN(vocab_size=7, hidden=4, layers=2, dropout=0.3, dropout_kind="gal").train()
    logits, (h, c) = lm(torch.randint(0, 7, (2, 5)))
    assert logits.shape == (2, 5, 7) and h.shape == c.shape == (2, 2, 4)
    with pytest.raises(ValueError, match="dropout_kind"):
        CharRNN(5, dropout_kind="zoneout")


def test_noise_scale_rides_along_as_a_second_output_and_a_parameter():
    model = WithNoiseScale(torch.nn.Linear(3, 2), outputs=2, std=0.4)
    x = torch.randn(5, 3)
    out = model(x)
    assert out.shape == (5, 4)
    torch.testing.assert_close(out[:, :2], model.network(x))
    std = noise_std_from_output(out[:, 2:])
    torch.testing.assert_close(std, torch.full((5, 2), 0.4), atol=1e-5, rtol=0)
    assert "raw_std" in dict(model.named_parameters())
    with pytest.raises(ValueError, match="std="):
        WithNoiseScale(torch.nn.Linear(3, 1), std=0.0)
