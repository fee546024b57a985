"""SGLD on several processes: parallel chains or data-parallel sampling (torchrun).

    torchrun --nproc_per_node 2 examples/distributed_sgld.py --mode chains
    torchrun --nproc_per_node 2 examples/distributed_sgld.py --mode data

A 64-100-10 MLP on scikit-learn's digits (1,347 training, 450 test images). ``chains``: every
rank runs its own chain from its own seed and the kept samples of all ranks are pooled into
one posterior. ``data``: DistributedDataParallel splits each minibatch over the ranks, every
rank draws the same injected noise, and the replicas are checked to be bit-identical. Rank 0
prints the model-averaged test accuracy and negative log-likelihood.
"""

from __future__ import annotations

import argparse
import gc

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from torchbayes.collect import Collector
from torchbayes.data import load_digits
from torchbayes.distributed import assert_replicas_identical, gather_samples, rank_generator
from torchbayes.models import mlp
from torchbayes.posterior import SampleSet
from torchbayes.predict import predict_classes
from torchbayes.samplers import SGLD


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("chains", "data"), default="chains")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=100, help="combined over ranks")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("gloo")  # NCCL on GPUs
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y, x_test, y_test = load_digits()
    torch.manual_seed(args.seed)  # the same initial network on every rank
    net = mlp(64, [100], 10)
    shared = args.mode == "data"
    generator = rank_generator(args.seed, shared=shared)
    model = DistributedDataParallel(net) if shared else net
    sampler = SGLD(
        model.parameters(), lr=0.05, num_data=len(x), weight_decay=1.0, generator=generator
    )
    collector = Collector(net, burn_in=args.steps // 2, thin=max(1, args.steps // 40))
    for _ in range(args.steps):
        batch = torch.randint(0, len(x), (args.batch_size,), generator=generator)
        if shared:
            batch = batch.chunk(world)[rank]  # this rank's share of the combined minibatch
        sampler.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        sampler.step()
        collector.step()
    if shared:
        assert_replicas_identical(net)
        samples = collector.samples()  # the same on every rank
    else:
        samples = gather_samples(collector.samples())
    if rank == 0:
        pred = predict_classes(SampleSet(net, samples), x_test, num_samples=len(samples))
        accuracy = float((pred.probs.argmax(-1) == y_test).float().mean())
        nll = float(F.nll_loss(pred.probs.clamp_min(1e-12).log(), y_test))
        print(
            f"mode={args.mode} ranks={world} samples={len(samples)} "
            f"test accuracy={accuracy:.4f} nll={nll:.4f}"
        )
    del model, sampler  # free the DDP reducer (and its threads) while the group exists
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
