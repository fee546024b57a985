"""Mushroom-bandit interactions per second: one agent, agents one by one, all batched.

The agents and network of ``torchbayes run mushroom`` (bbb, vd, psgld, greedy, eps1, eps5;
119-100-100-1 ReLU; 64 minibatches of 64 per interaction by default). Three ways to run
A agents × K seeds:

* ``one agent``   — a single Bayes-by-Backprop learner (population of 1);
* ``one by one``  — every (agent, seed) as its own population of 1, run in turn;
* ``batched``     — every agent a population of K seeds, all in one ``run_bandit``: one
  vmapped forward/backward per update over all A × K learners.

An interaction is one step of one learner (choose, observe, ``updates_per_step`` updates);
the speed-up is one-by-one time / batched time for the same A × K learners.

    python benchmarks/bandit_throughput.py [--steps 20] [--updates 64] [--seeds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from _timing import apply_allocator

from torchbayes.bandits import MushroomBandit, run_bandit
from torchbayes.data import load_mushroom
from torchbayes.experiments.mushroom import AGENTS, Config, make_agent
from torchbayes.models import mlp


def _seconds(env: MushroomBandit, names: tuple[str, ...], seeds: int, args) -> float:
    """Wall time of ``args.steps`` interactions of ``names`` × ``seeds`` in one run_bandit."""
    config = Config(seeds=seeds, agents=names, updates_per_step=args.updates)
    torch.manual_seed(0)
    network = mlp(env.contexts.shape[1] + env.num_actions, config.hidden, 1)
    agents = [make_agent(name, network, config) for name in names]
    run_bandit(env, agents, args.warmup, updates_per_step=args.updates, progress=False)
    start = time.perf_counter()
    run_bandit(env, agents, args.steps, updates_per_step=args.updates, progress=False, seed=1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--updates", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--glibc-malloc", action="store_true", help="glibc's default thresholds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    apply_allocator(args.glibc_malloc)
    os.environ.setdefault(
        "TORCHBAYES_DATA", str(Path(__file__).resolve().parents[2] / "shared/data")
    )
    data = load_mushroom()
    env = MushroomBandit(data.contexts, data.edible)

    learners = len(AGENTS) * args.seeds
    single = _seconds(env, ("bbb",), 1, args)
    one_by_one = {name: _seconds(env, (name,), 1, args) * args.seeds for name in AGENTS}
    serial = sum(one_by_one.values())
    batched = _seconds(env, AGENTS, args.seeds, args)
    rows = {
        "one agent (bbb, 1 seed)": args.steps / single,
        f"one by one ({len(AGENTS)} agents x {args.seeds} seeds)": learners * args.steps / serial,
        f"batched ({len(AGENTS)} agents x {args.seeds} seeds)": learners * args.steps / batched,
    }
    print(f"updates per interaction: {args.updates}, threads: {args.threads}")
    print(f"{'run':<40} {'interactions/s':>15}")
    for name, rate in rows.items():
        print(f"{name:<40} {rate:>15.2f}")
    print(f"batched speed-up over one by one: {serial / batched:.2f}x")
    if args.json:
        report = {
            "interactions_per_second": rows,
            "speedup": serial / batched,
            "one_by_one_seconds": one_by_one,
            "args": vars(args),
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
