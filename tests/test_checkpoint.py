"""Checkpoints: a resumed chain continues exactly, files are never half-written, and an
experiment killed with SIGKILL and resumed ends with the same samples and numbers."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from torchbayes.checkpoint import Checkpoint
from torchbayes.cli import main
from torchbayes.collect import Collector
from torchbayes.experiments import EXPERIMENTS
from torchbayes.experiments._result import Resumable
from torchbayes.samplers import PSGLD


def _chain(tmp_path, steps: int, stop_after: int | None = None, resume: bool = False):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.3), nn.Linear(4, 1))
    noise = torch.Generator().manual_seed(1)
    sampler = PSGLD(net.parameters(), lr=1e-2, num_data=64, generator=noise)
    collector = Collector(net, burn_in=2, thin=2)
    batches = torch.Generator().manual_seed(2)
    saver = Checkpoint(
        tmp_path / "chain.pt",
        {"net": net, "sampler": sampler, "collector": collector, "batches": batches},
    )
    x, y = torch.randn(64, 3), torch.randn(64, 1)  # the data, before the RNG is restored
    start, _ = saver.restore() if resume else (0, {})
    for step in range(start, steps):
        index = torch.randint(0, 64, (8,), generator=batches)
        sampler.zero_grad()
        nn.functional.mse_loss(net(x[index]), y[index]).backward()
        sampler.step()
        collector.step()
        saver.step(step + 1)
        if stop_after is not None and step + 1 == stop_after:
            return None
    return collector.samples()


def test_a_resumed_chain_continues_exactly(tmp_path):
    whole = _chain(tmp_path / "a", steps=12)
    assert _chain(tmp_path / "b", steps=12, stop_after=5) is None
    torch.manual_seed(123)  # whatever the process did in between
    resumed = _chain(tmp_path / "b", steps=12, resume=True)
    assert len(resumed) == len(whole) == 5
    for a, b in zip(whole, resumed, strict=True):
        for name in a:
            assert torch.equal(a[name], b[name]), name
    assert not list((tmp_path / "b").glob(".*.tmp"))  # written by rename, no leftovers


def test_checkpoint_names_what_it_cannot_hold_or_find(tmp_path):
    with pytest.raises(TypeError, match="objects\\['count'\\]"):
        Checkpoint(tmp_path / "c.pt", {"count": 3})
    Checkpoint(tmp_path / "c.pt", {"net": nn.Linear(1, 1)}).save(1)
    with pytest.raises(ValueError, match="no state for \\['sampler'\\]"):
        objects = {"net": nn.Linear(1, 1), "sampler": nn.Linear(1, 1)}
        Checkpoint(tmp_path / "c.pt", objects).restore()
    with pytest.raises(ValueError, match="every"):
        Checkpoint(tmp_path / "c.pt", {}, every=-1)
    assert Checkpoint(tmp_path / "none.pt", {}).restore() == (0, {})


@pytest.mark.parametrize(
    ("experiment", "settings", "stop_at"),
    [
        ("char-lm", ["cells=gru", "methods=psgld", "scheme=random", "epochs=4"], 2),
        ("mnist-bbb", ["methods=bbb-mixture", "epochs=3", "train_subset=1500"], 1),
        ("mnist-graves", ["rows=adaptive/adaptive-gaussian", "epochs=3", "train_subset=1500"], 2),
        ("mnist-vd", ["methods=vd-b", "epochs=3", "train_subset=1500"], 2),
        ("mushroom", ["steps=40", "checkpoint_every=10"], 20),
        ("mlp-sgmcmc", ["methods=psgld,sgd", "epochs=4", "burn_in_epochs=1"], 2),
        ("ood", ["methods=gradient-uncertainty,sgld", "epochs=3", "train_subset=1000"], 1),
        ("regression", ["steps=300", "checkpoint_every=100", "predict_samples=50"], 200),
        ("gradient-variance", ["checkpoints=1,3", "train_subset=600"], 2),
    ],
)
def test_an_interrupted_run_resumes_to_the_same_numbers(
    tmp_path, monkeypatch, experiment, settings, stop_at
):
    args = ["run", experiment, "--quick"] + [a for s in settings for a in ("--set", s)]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    real_save = Checkpoint.save

    def save_then_stop(self, position, **extra):
        real_save(self, position, **extra)
        if position == stop_at:
            raise KeyboardInterrupt  # as a user's Ctrl-C right after this checkpoint

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--out", str(tmp_path / "cut")])
    monkeypatch.undo()
    assert main([*args, "--out", str(tmp_path / "cut"), "--resume"]) == 0
    whole, cut = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("whole", "cut"))
    assert cut["metrics"] == whole["metrics"]
    assert not (tmp_path / "cut" / "checkpoints").exists()  # removed once the run is done


def _cli(out, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = ["run", "sentence", "--quick", "--out", str(out), "--set", "methods=psgld-dropout"]
    args += ["--set", "train_subset=1500", "--set", "epochs=4", "--set", "burn_in_epochs=1"]
    return [sys.executable, "-m", "torchbayes", *args, *extra], env


def test_sentence_killed_with_sigkill_and_resumed_matches_an_uninterrupted_run(tmp_path):
    command, env = _cli(tmp_path / "whole")
    subprocess.run(command, env=env, check=True, capture_output=True)
    command, env = _cli(tmp_path / "cut")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen(command, env=env, **quiet)
    checkpoint = tmp_path / "cut" / "checkpoints" / "psgld-dropout-run0.pt"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (tmp_path / "cut" / "result.json").exists()  # killed before the end
    saved = torch.load(checkpoint, weights_only=False)  # whole, never half-written
    assert 1 <= saved["position"] < 4
    command, env = _cli(tmp_path / "cut", "--resume")
    subprocess.run(command, env=env, check=True, capture_output=True)
    whole, cut = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("whole", "cut"))
    assert cut["metrics"] == whole["metrics"]


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_experiment_checkpoints_and_resumes(experiment):
    assert issubclass(EXPERIMENTS[experiment].Config, Resumable)


def test_resume_with_nothing_saved_starts_afresh(tmp_path):
    args = ["run", "regression", "--quick", "--set", "steps=50", "--set", "predict_samples=20"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--resume"]) == 0
    a, b = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("a", "b"))
    assert a["metrics"] == b["metrics"]
