import gzip
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from torchbayes.data import load_digits, load_images, load_mushroom, load_uci
from torchbayes.data.images import read_idx, resolve_image_dataset
from torchbayes.data.mushroom import ATTRIBUTES
from torchbayes.data.ood import digits_as_mnist, load_ood_images


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


def test_fashion_mnist_has_the_standard_shapes_and_classes():
    data = load_images("fashion-mnist", download=False)
    assert data.train_images.shape == (60000, 1, 28, 28)
    assert data.test_images.shape == (10000, 1, 28, 28)
    assert data.num_classes == 10
    assert torch.bincount(data.test_labels).tolist() == [1000] * 10
    assert float(data.train_images.min()) >= 0.0 and float(data.train_images.max()) == 1.0


def test_auto_picks_mnist_when_present_else_fashion(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    expected = "fashion-mnist" if Path("/usr/share/datasets/fashion-mnist").is_dir() else "mnist"
    assert resolve_image_dataset("auto") == expected
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    assert resolve_image_dataset("auto") == "mnist"
    with pytest.raises(ValueError, match="dataset='cifar'"):
        resolve_image_dataset("cifar")


def test_missing_mnist_names_the_file_folder_and_url(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    pattern = r"train-images-idx3-ubyte\.gz.*" + re.escape(str(tmp_path / "mnist")) + ".*https://"
    with pytest.raises(FileNotFoundError, match=pattern):
        load_images("mnist", download=False)


def test_idx_reader_checks_its_header(tmp_path):
    good = tmp_path / "good.gz"
    with gzip.open(good, "wb") as handle:
        handle.write(bytes([0, 0, 8, 2]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big"))
        handle.write(bytes(range(6)))
    assert read_idx(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wb") as handle:
        handle.write(bytes([0, 0, 8, 1]) + (7).to_bytes(4, "big") + bytes(3))
    with pytest.raises(ValueError, match="header says shape"):
        read_idx(bad)


def test_a_recompressed_file_with_the_right_content_verifies(tmp_path):
    from torchbayes.data._files import sha256_of

    a, b = tmp_path / "a.gz", tmp_path / "b.gz"
    for path, level in ((a, 1), (b, 9)):
        with gzip.open(path, "wb", compresslevel=level) as handle:
            handle.write(b"same content " * 1000)
    assert sha256_of(a) != sha256_of(b)
    assert sha256_of(a, decompressed=True) == sha256_of(b, decompressed=True)


def test_digits_are_framed_like_mnist():
    images = digits_as_mnist()
    assert images.shape == (1797, 1, 28, 28)
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    border = torch.ones(28, 28, dtype=torch.bool)
    border[4:24, 4:24] = False
    assert float(images[:, 0, border].abs().max()) == 0.0
    assert float(images[:, 0, 4:24, 4:24].mean()) > 0.2


def test_ood_set_prefers_notmnist_then_falls_back_to_digits(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    name, images = load_ood_images("fashion-mnist")
    assert name == "sklearn-digits" and images.shape[1:] == (1, 28, 28)
    (tmp_path / "notmnist").mkdir()
    with gzip.open(tmp_path / "notmnist" / "t10k-images-idx3-ubyte.gz", "wb") as handle:
        header = bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in (3, 28, 28))
        handle.write(header + bytes([255]) * (3 * 28 * 28))
    for trained_on in ("fashion-mnist", "mnist"):
        name, images = load_ood_images(trained_on)
        assert name == "notmnist" and images.shape == (3, 1, 28, 28)
        assert float(images.max()) == 1.0


def test_war_and_peace_splits_contiguously_and_decodes_back():
    from torchbayes.data import data_root, load_text

    corpus = load_text("warpeace")
    text = (data_root() / "text/warpeace.txt").read_text(encoding="utf-8")
    assert corpus.vocab == sorted(set(text))
    assert len(corpus.train) + len(corpus.valid) + len(corpus.test) == len(text)
    assert len(corpus.train) == int(0.9 * len(text))
    assert corpus.decode(corpus.test[:200]) == text[len(text) - len(corpus.test) :][:200]
    with pytest.raises(ValueError, match="splits"):
        load_text("warpeace", splits=(0.9, 0.2))
    with pytest.raises(ValueError, match="name"):
        load_text("ulysses")


def test_stream_batches_follow_each_other_and_targets_are_the_next_character():
    from torchbayes.data import stream_batches

    ids = torch.arange(1001)
    windows = list(stream_batches(ids, batch_size=4, seq_len=30))
    inputs = torch.cat([x for x, _ in windows], dim=1)
    targets = torch.cat([y for _, y in windows], dim=1)
    assert inputs.shape == (4, 250) and windows[-1][0].shape == (4, 10)
    assert torch.equal(targets, inputs + 1)
    assert torch.equal(inputs[1], torch.arange(250, 500))  # stream 1 continues where 0 ends
    with pytest.raises(ValueError, match="batch_size"):
        list(stream_batches(ids[:3], batch_size=4, seq_len=2))


def test_random_windows_are_contiguous_slices_with_shifted_targets():
    from torchbayes.data import random_windows

    ids = torch.arange(5000) * 3
    generator = torch.Generator().manual_seed(0)
    windows = list(random_windows(ids, 8, 20, generator))
    assert len(windows) == 4999 // 160
    for x, y in windows:
        assert x.shape == y.shape == (8, 20)
        assert torch.all(x.diff(dim=1) == 3) and torch.equal(y, x + 3)


def test_trec_has_its_split_six_classes_and_a_padding_vocabulary():
    from torchbayes.data.sentence import Vocabulary, load_sentences

    trec = load_sentences("trec")
    assert len(trec.sentences) == 5452 and len(trec.test_sentences) == 500
    assert trec.num_classes == 6
    vocab = Vocabulary(trec.sentences)
    ids, lengths = vocab.encode([["What", "is", "a", "zyzzyva-unseen", "?"], ["Who"]])
    assert ids.shape == (2, 5) and lengths.tolist() == [5, 1]
    assert ids[0, 3] == Vocabulary.UNK and ids[1, 1:].eq(Vocabulary.PAD).all()
    assert vocab.tokens[int(ids[0, 0])] == "What"


def test_cv_sets_read_every_line_even_with_stray_nel_bytes():
    from torchbayes.data.sentence import cv_folds, load_sentences

    mr = load_sentences("mr")  # rt-polarity.all holds byte 0x85 inside sentences
    assert len(mr.sentences) == 10662 and mr.labels.bincount().tolist() == [5331, 5331]
    assert mr.test_sentences is None
    folds = cv_folds(len(mr.sentences), 10, seed=0)
    assert sorted(torch.cat(folds).tolist()) == list(range(10662))
    assert {len(f) for f in folds} <= {1066, 1067}
    with pytest.raises(ValueError, match="folds"):
        cv_folds(5, 6)


def _ptb_like(folder, lines=(("train", 400), ("valid", 20), ("test", 60))):
    """A corpus in PTB's format: space-separated words, one sentence per line."""
    import random

    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "mat", "<unk>", "N"]
    for split, n in lines:
        text = "".join(" " + " ".join(rng.choices(words, k=6)) + " \n" for _ in range(n))
        (folder / f"ptb.{split}.txt").write_text(text)
    return folder


def test_ptb_reader_ends_lines_in_eos_and_orders_the_vocabulary_by_count(tmp_path):
    from torchbayes.data import load_ptb

    corpus = load_ptb(folder=str(_ptb_like(tmp_path)))
    assert len(corpus.train) == 400 * 7 and len(corpus.test) == 60 * 7
    assert corpus.vocab[0] == "<eos>"  # one per line: the most frequent word
    counts = torch.bincount(corpus.train, minlength=corpus.vocab_size)
    assert bool((counts[:-1] >= counts[1:]).all())
    assert corpus.decode(corpus.train[:7]).endswith("<eos>")


def test_ptb_checks_its_md5_and_names_missing_files(tmp_path, monkeypatch):
    from torchbayes.data import load_ptb

    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"ptb/ptb\.train\.txt"):
        load_ptb(download=False)
    (tmp_path / "ptb").mkdir()
    _ptb_like(tmp_path / "ptb")
    with pytest.raises(ValueError, match=r"ptb\.train\.txt fails its checksum: MD5"):
        load_ptb(download=False)
    (tmp_path / "ptb" / "ptb.valid.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"ptb\.valid\.txt"):
        load_ptb(folder=str(tmp_path / "ptb"))


def test_uci_sets_have_the_published_splits_and_protocol_settings():
    data = load_uci("bostonHousing", download=False)
    assert data.x.shape == (506, 13) and data.y.shape == (506, 1)
    assert len(data.splits) == 20 and (data.hidden, data.epochs) == (50, 40)
    assert data.tau_values == (0.1, 0.15, 0.2) and 0.05 in data.dropout_rates
    for train, test in data.splits:
        assert len(train) == 455 and len(test) == 51
        assert set(train.tolist()).isdisjoint(test.tolist())
        assert len(set(train.tolist()) | set(test.tolist())) == 506
    assert float(data.y.min()) == 5.0 and float(data.y.max()) == 50.0  # median value, $1000s
    protein = load_uci("protein-tertiary-structure", download=False)
    assert len(protein.splits) == 5 and protein.hidden == 100


def test_uci_split_files_are_checked_together(tmp_path, monkeypatch):
    source = Path(os.environ["TORCHBAYES_DATA"]) / "uci" / "yacht"
    target = tmp_path / "uci" / "yacht"
    shutil.copytree(source, target)
    (target / "index_test_7.txt").write_text("0\n1\n2\n")
    monkeypatch.setenv("TORCHBAYES_DATA", str(tmp_path))
    with pytest.raises(ValueError, match="joint checksum"):
        load_uci("yacht", download=False)
    with pytest.raises(ValueError, match="name="):
        load_uci("boston", download=False)
    (target / "index_test_7.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"index_test_7\.txt"):
        load_uci("yacht", download=False)
