import pytest
import torch

from torchbayes.data import load_digits


def test_digits_split_is_stratified_and_scaled():
    x_train, y_train, x_test, y_test = load_digits(test_fraction=0.25, seed=0)
    assert x_train.shape[1] == 64 and len(x_train) + len(x_test) == 1797
    assert float(x_train.max()) <= 1.0 and float(x_train.min()) >= 0.0
    train_share = torch.bincount(y_train, minlength=10) / len(y_train)
    test_share = torch.bincount(y_test, minlength=10) / len(y_test)
    torch.testing.assert_close(train_share, test_share, atol=0.01, rtol=0)


def test_same_seed_same_split():
    a, b = load_digits(seed=3), load_digits(seed=3)
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v)


def test_bad_fraction():
    with pytest.raises(ValueError, match="test_fraction="):
        load_digits(test_fraction=1.0)
