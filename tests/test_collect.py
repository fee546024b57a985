import pytest
import torch
from torch import nn

from torchbayes import predict_classes
from torchbayes.collect import Collector
from torchbayes.samplers import SGLD


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _mark(net, value):
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(float(value))


def test_burn_in_and_thinning_count_steps():
    net = _net()
    collector = Collector(net, burn_in=5, thin=3)
    kept = []
    for t in range(1, 21):
        _mark(net, t)
        if collector.step():
            kept.append(t)
    assert kept == [8, 11, 14, 17, 20]
    assert [float(s["0.weight"][0, 0]) for s in collector.samples()] == kept


def test_thinning_in_epochs():
    assert Collector.epochs(0.5, 469) == 234
    assert Collector.epochs(0.001, 10) == 1


@pytest.mark.parametrize(
    ("how", "expected"),
    [("forward", [1, 2, 3]), ("backward", [8, 9, 10]), ("thinned", [1, 5, 10])],
)
def test_forward_backward_thinned_selection(how, expected):
    net = _net()
    collector = Collector(net)
    for t in range(1, 11):
        _mark(net, t)
        collector.step()
    got = [float(s["2.bias"][0]) for s in collector.select(3, how)]
    assert got == expected
    assert [i + 1.0 for i in collector.selection(3, how)] == expected  # sample i marked i + 1


def test_max_samples_stops_collecting():
    net = _net()
    collector = Collector(net, max_samples=2)
    for _ in range(5):
        collector.step()
    assert len(collector) == 2


def test_disk_storage_round_trips_and_resumes(tmp_path):
    net = _net()
    collector = Collector(net, thin=2, directory=tmp_path)
    for t in range(1, 7):
        _mark(net, t)
        collector.step()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sample-000000002.pt",
        "sample-000000004.pt",
        "sample-000000006.pt",
    ]
    resumed = Collector(net, thin=2, directory=tmp_path)
    resumed.load_state_dict(collector.state_dict())
    _mark(net, 8)
    resumed.step()
    resumed.step()
    assert [float(s["0.bias"][0]) for s in resumed.samples()] == [2, 4, 6, 8]


def test_collected_samples_feed_the_predictive_api():
    net = _net()
    x, y = torch.randn(64, 3), torch.randint(0, 2, (64,))
    sampler = SGLD(
        net.parameters(),
        lr=0.05,
        num_data=64,
        weight_decay=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    collector = Collector(net, burn_in=20, thin=5)
    for _ in range(70):
        sampler.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        sampler.step()
        collector.step()
    posterior = collector.posterior()
    assert len(posterior) == 10
    pred = predict_classes(posterior, x, num_samples=10)
    torch.testing.assert_close(pred.probs.sum(-1), torch.ones(64))
    assert float(pred.epistemic.mean()) > 0


def test_bad_arguments():
    net = _net()
    with pytest.raises(ValueError, match="thin="):
        Collector(net, thin=0)
    with pytest.raises(ValueError, match="burn_in="):
        Collector(net, burn_in=-1)
    collector = Collector(net)
    collector.step()
    with pytest.raises(ValueError, match="only 1 samples"):
        collector.select(2)
    with pytest.raises(ValueError, match="how="):
        collector.select(1, "sideways")


def test_resume_from_a_checkpoint_gives_the_same_samples(tmp_path):
    """Model + sampler + collector saved mid-run and restored end with identical samples."""
    x, y = torch.randn(64, 3), torch.randint(0, 2, (64,))

    def fresh():
        net = _net()
        sampler = SGLD(
            net.parameters(),
            lr=0.05,
            num_data=64,
            weight_decay=1.0,
            generator=torch.Generator().manual_seed(7),
        )
        return net, sampler, Collector(net, burn_in=4, thin=3)

    def advance(net, sampler, collector, steps):
        for _ in range(steps):
            t = collector.steps
            batch = slice((t % 4) * 16, (t % 4 + 1) * 16)
            sampler.zero_grad()
            nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            sampler.step()
            collector.step()

    net, sampler, collector = fresh()
    advance(net, sampler, collector, 17)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(
        {
            "model": net.state_dict(),
            "sampler": sampler.state_dict(),
            "collector": collector.state_dict(),
        },
        checkpoint,
    )
    advance(net, sampler, collector, 23)
    uninterrupted = collector.samples()

    net2, sampler2, collector2 = fresh()
    saved = torch.load(checkpoint, weights_only=False)
    net2.load_state_dict(saved["model"])
    sampler2.load_state_dict(saved["sampler"])
    collector2.load_state_dict(saved["collector"])
    advance(net2, sampler2, collector2, 23)
    resumed = collector2.samples()
    assert len(resumed) == len(uninterrupted) == 12
    for a, b in zip(uninterrupted, resumed, strict=True):
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
