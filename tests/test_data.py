import re

import pytest
import torch

from torchbayes.data import load_digits, load_mushroom
from torchbayes.data.mushroom import ATTRIBUTES


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


def test_mushroom_one_hot_has_the_22_uci_attributes():
    data = load_mushroom(download=False)
    assert data.contexts.shape == (8124, 117) and len(data.features) == 117
    # Exactly one value of each of the 22 categorical attributes is on in every row.
    assert torch.equal(data.contexts.sum(1), torch.full((8124,), 22.0))
    attributes = {name.split("=")[0] for name in data.features}
    assert attributes == set(ATTRIBUTES) and len(ATTRIBUTES) == 22
    assert int(data.edible.sum()) == 4208


def test_missing_data_file_names_the_file_and_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    with pytest.raises(
        FileNotFoundError, match=r"agaricus-lepiota\.data.*" + re.escape(str(tmp_path))
    ):
        load_mushroom(download=False)


def test_corrupt_data_file_fails_its_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    path = tmp_path / "mushroom" / "agaricus-lepiota.data"
    path.parent.mkdir()
    path.write_text("e,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u\n")
    with pytest.raises(ValueError, match=r"agaricus-lepiota\.data fails its checksum"):
        load_mushroom(download=False)
