"""Sampling and variational training on several processes with ``torch.distributed``.

Two ways to spend more processes on a posterior (launch with ``torchrun``; gloo on CPU,
NCCL on GPU):

* **Parallel chains.** Every rank runs its own SG-MCMC chain from its own seed
  (:func:`rank_generator` with ``shared=False``); :func:`gather_samples` pools the kept
  samples of all ranks, in rank order, into one list that
  :class:`~torchbayes.posterior.SampleSet` and the predictive API use as if it were local.
* **Data-parallel sampling or VI.** ``DistributedDataParallel`` averages the minibatch
  gradients of the ranks, so each rank's mean-loss gradient is that of the combined batch.
  For SG-MCMC every rank must also draw the *same* injected noise — give the sampler
  ``rank_generator(seed, shared=True)`` — and the replicas then take identical steps.
  :func:`assert_replicas_identical` checks that rather than assuming it. For VI each rank may
  draw its own weight noise (more Monte Carlo samples per step); the averaged gradient keeps
  the variational parameters identical.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "assert_replicas_identical",
    "average_gradients",
    "gather_samples",
    "init_from_environment",
    "is_leader",
    "rank",
    "rank_generator",
    "rank_seed",
    "shard",
    "world_size",
]

_RANK_STRIDE = 1_000_003  # a prime, so rank seeds never collide with nearby user seeds


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def rank() -> int:
    """This process's rank in the group (0 without one)."""
    return _rank()


def world_size() -> int:
    """Processes in the group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_leader() -> bool:
    """Whether this process writes results: rank 0, or the only process."""
    return _rank() == 0


def shard(batch: Tensor) -> Tensor:
    """This rank's share of a minibatch's indices (every ``world_size``-th, from ``rank``):
    the ranks together cover the batch once, in near-equal parts."""
    return batch[_rank() :: world_size()]


@torch.no_grad()
def average_gradients(params: Iterable[Tensor], group: dist.ProcessGroup | None = None) -> None:
    """Replace every ``.grad`` by its mean over the ranks, in one all-reduce of one flat buffer
    (what ``DistributedDataParallel`` does, without wrapping the model — so terms computed
    outside ``forward``, such as a KL, are averaged too). No-op without a process group.

    With each rank's loss a mean over its shard, the average is the gradient of the combined
    minibatch (exactly so when the shards are equal in size)."""
    world = world_size()
    if world == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat.div_(world)
    parts = flat.split([g.numel() for g in grads])
    torch._foreach_copy_(grads, [part.view_as(g) for part, g in zip(parts, grads, strict=True)])


def rank_seed(seed: int) -> int:
    """``seed + 1_000_003·rank``: this rank's own seed (``seed`` without a process group)."""
    return seed + _RANK_STRIDE * _rank()


def rank_generator(seed: int, shared: bool) -> torch.Generator:
    """A generator for a sampler's noise or a rank's minibatches: the same on every rank when
    ``shared`` (data-parallel sampling), else seeded :func:`rank_seed` (parallel chains)."""
    return torch.Generator().manual_seed(seed if shared else rank_seed(seed))


def init_from_environment() -> bool:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1 in the environment):
    NCCL when CUDA is available, else gloo. Returns whether a group is (now) initialized."""
    if dist.is_initialized():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return True


def gather_samples(
    samples: Iterable[Mapping[str, Tensor]], group: dist.ProcessGroup | None = None
) -> list[dict[str, Tensor]]:
    """Every rank's kept samples, pooled in rank order and returned on every rank (CPU
    tensors). Without an initialized process group: this process's samples."""
    local = [{k: v.detach().cpu() for k, v in s.items()} for s in samples]
    if not (dist.is_available() and dist.is_initialized()):
        return local
    pooled: list[list[dict[str, Tensor]] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(pooled, local, group=group)
    return [sample for rank_samples in pooled for sample in rank_samples or []]


@torch.no_grad()
def assert_replicas_identical(
    module: nn.Module, atol: float = 0.0, group: dist.ProcessGroup | None = None
) -> None:
    """Raise ``RuntimeError`` naming the first parameter whose value differs from rank 0's by
    more than ``atol`` on any rank (bit-identical by default)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    for name, param in module.named_parameters():
        reference = param.detach().clone()
        dist.broadcast(reference, src=0, group=group)
        gap = (param.detach() - reference).abs().max().reshape(1)
        dist.all_reduce(gap, op=dist.ReduceOp.MAX, group=group)
        if float(gap) > atol:
            raise RuntimeError(
                f"replicas diverged: parameter {name!r} differs from rank 0 by {float(gap):.3g}"
                f" (atol={atol}); give every rank the same sampler generator"
            )
