"""torch.distributed with two gloo processes on CPU: parallel chains pool their samples,
data-parallel SGLD keeps the replicas bit-identical and matches one process on the combined
batch, data-parallel VI keeps the variational parameters identical, divergence is caught."""

import copy
import gc
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchbayes.collect import Collector
from torchbayes.distributed import (
    assert_replicas_identical,
    average_gradients,
    gather_samples,
    rank_generator,
)
from torchbayes.experiments import mnist_vd
from torchbayes.nn import model_kl, to_bayesian
from torchbayes.posterior import SampleSet
from torchbayes.samplers import SGLD

WORLD = 2


def _problem():
    torch.manual_seed(0)  # the same data and initial network on every rank
    x = torch.randn(64, 5)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]]) + 0.1 * torch.randn(64, 1)
    return x, y, nn.Linear(5, 1)


def _data_parallel_sgld(rank: int):
    x, y, net = _problem()
    single = copy.deepcopy(net)
    replica = DistributedDataParallel(net)
    sampler = SGLD(replica.parameters(), lr=1e-2, num_data=64, generator=rank_generator(7, True))
    same_noise = torch.Generator().manual_seed(7)
    twin = SGLD(single.parameters(), lr=1e-2, num_data=64, generator=same_noise)
    batches = torch.Generator().manual_seed(11)
    for _ in range(100):
        index = torch.randint(0, 64, (16,), generator=batches)
        mine = index.chunk(WORLD)[rank]  # each rank sees half of the combined batch
        sampler.zero_grad()
        nn.functional.mse_loss(replica(x[mine]), y[mine]).backward()
        sampler.step()
        twin.zero_grad()
        nn.functional.mse_loss(single(x[index]), y[index]).backward()
        twin.step()
    assert_replicas_identical(net)  # bit-identical
    for a, b in zip(net.parameters(), single.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _parallel_chains(rank: int):
    x, y, net = _problem()
    generator = rank_generator(3, shared=False)
    sampler = SGLD(net.parameters(), lr=1e-2, num_data=64, generator=generator)
    collector = Collector(net, burn_in=20, thin=5)
    for _ in range(70):
        index = torch.randint(0, 64, (16,), generator=generator)
        sampler.zero_grad()
        nn.functional.mse_loss(net(x[index]), y[index]).backward()
        sampler.step()
        collector.step()
    pooled = gather_samples(collector.samples())
    assert len(collector) == 10 and len(pooled) == WORLD * 10
    assert not torch.equal(pooled[0]["weight"], pooled[10]["weight"])  # two different chains
    assert torch.equal(pooled[10 * rank]["weight"], collector.samples()[0]["weight"])
    assert len(SampleSet(net, pooled)) == 20  # usable by the predictive API as it is


def _data_parallel_vi(rank: int):
    x, y, net = _problem()
    bayes = to_bayesian(net)
    replica = DistributedDataParallel(bayes)
    optimizer = torch.optim.Adam(replica.parameters(), lr=1e-2)
    torch.manual_seed(100 + rank)  # each rank draws its own weight noise
    for _ in range(30):
        mine = torch.arange(64).chunk(WORLD)[rank]
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(replica(x[mine]), y[mine]) + model_kl(bayes) / 64
        loss.backward()
        optimizer.step()
    assert_replicas_identical(bayes)


def _divergence_is_caught(rank: int):
    _, _, net = _problem()
    if rank == 1:
        with torch.no_grad():
            net.bias.add_(1e-3)
    with pytest.raises(RuntimeError, match="'bias' differs from rank 0"):
        assert_replicas_identical(net)
    assert_replicas_identical(net, atol=1e-2)


def _worker(rank: int, port: int, job: str):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    torch.set_num_threads(1)
    try:
        globals()[job](rank)
        gc.collect()  # free DDP reducers (their threads) while the group still exists
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train_vi(method: str, epochs: int = 2) -> nn.Module:
    """mnist_vd's Adam Trainer on a small random problem (96 examples, batches of 32)."""
    torch.manual_seed(0)
    x, y = torch.randn(96, 20), torch.randint(10, (96,))
    config = mnist_vd.Config(batch_size=32, lr=1e-2)
    model = mnist_vd.dropout_mlp(method, 16, config, in_features=20)
    trainer = mnist_vd.Trainer(model, config, len(x))
    trainer.epochs((x, y), epochs, torch.Generator().manual_seed(1))
    return model


def _trainer_worker(rank: int, port: int, reference: dict):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    torch.set_num_threads(1)
    try:
        # Noise-free: half a minibatch per rank, gradients averaged == the whole minibatch.
        model = _train_vi("none")
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6)
        # With weight noise each rank draws its own; the replicas still stay identical.
        assert_replicas_identical(_train_vi("vd-b"))
        grads = [torch.full((3,), float(rank)), torch.full((2, 2), 2.0 * rank)]
        params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        average_gradients(params)
        assert params[0].grad.tolist() == [0.5] * 3 and params[1].grad.eq(1.0).all()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_data_parallel_vi_trainer_matches_one_process_on_the_whole_minibatch():
    reference = _train_vi("none").state_dict()
    mp.spawn(_trainer_worker, args=(_free_port(), reference), nprocs=WORLD, join=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "job", ["_data_parallel_sgld", "_parallel_chains", "_data_parallel_vi", "_divergence_is_caught"]
)
def test_two_gloo_processes(job):
    mp.spawn(_worker, args=(_free_port(), job), nprocs=WORLD, join=True)


def test_without_a_process_group_everything_is_local():
    samples = [{"w": torch.ones(2)}]
    assert gather_samples(samples)[0]["w"].tolist() == [1.0, 1.0]
    assert_replicas_identical(nn.Linear(2, 1))  # nothing to compare against
    assert torch.equal(rank_generator(5, False).get_state(), rank_generator(5, True).get_state())


@pytest.mark.parametrize("mode", ["chains", "data"])
def test_the_documented_torchrun_command_runs(mode):
    script = Path(__file__).resolve().parents[1] / "examples" / "distributed_sgld.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    port = ["--master_port", str(_free_port())]
    out = subprocess.run(
        [*torchrun, *port, str(script), "--mode", mode, "--steps", "80"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).stdout
    samples = 40 if mode == "chains" else 20
    assert f"mode={mode} ranks=2 samples={samples} test accuracy=" in out


def test_torchbayes_run_under_torchrun_chains_and_data_parallel_vi(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    run = ["-m", "torchbayes", "run", "mlp-sgmcmc", "--quick", "--set", "methods=sgld,sgd"]
    single = [sys.executable, *run, "--out", str(tmp_path / "one")]
    subprocess.run(single, env=env, check=True, capture_output=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    torchrun += ["--master_port", str(_free_port())]
    subprocess.run(
        [*torchrun, *run, "--out", str(tmp_path / "two")], env=env, check=True, capture_output=True
    )
    one, two = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("one", "two"))
    assert two["config"]["chains"] == 2
    for method in ("sgld", "sgd"):
        assert two["metrics"][method]["samples"] == 2 * one["metrics"][method]["samples"]
    vd = ["-m", "torchbayes", "run", "mnist-vd", "--quick", "--set", "methods=vd-b"]
    vd += ["--set", "hidden_sizes=32", "--set", "epochs=1", "--set", "train_subset=512"]
    torchrun[-1] = str(_free_port())
    subprocess.run(
        [*torchrun, *vd, "--out", str(tmp_path / "vd")], env=env, check=True, capture_output=True
    )
    written = json.loads((tmp_path / "vd" / "result.json").read_text())
    assert written["versions"]["processes"] == "2"
    assert 0.0 < written["metrics"]["vd-b"]["32"]["mean_error"] < 0.9
    regression = ["-m", "torchbayes", "run", "regression", "--quick", "--out", str(tmp_path)]
    refused = subprocess.run(
        [sys.executable, *regression],
        env={**env, "WORLD_SIZE": "2"},
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "does not run under torchrun" in refused.stderr
