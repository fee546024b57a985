"""Thompson sampling on the mushroom bandit — Blundell et al. (2015) §5.3, Fig. 6.

Agents, each run on ``seeds`` context streams at once (one population member per seed):

* ``bbb``     — Bayes by Backprop, diagonal Gaussian q, N(0, σ_p²) prior (closed-form KL;
  ``--set bbb_prior=laplace`` a Laplace prior of the same std, closed form too; the
  scale-mixture prior with its Monte Carlo KL is ``--set bbb_prior=mixture``), two weight
  samples averaged per update, Thompson sampling; ``kl_weight`` β < 1 tempers its KL;
* ``vd``      — variational dropout q = N(θ, αθ²) (α per weight, ≤ 1) under the
  log-uniform prior, Thompson sampling;
* ``psgld``   — pSGLD under a N(0, 1) prior; the current iterate is the posterior sample;
* ``greedy``, ``eps1``, ``eps5`` — a plain network trained with Adam, acting greedily on its
  point estimate with ε = 0, 1 %, 5 % random actions.

Network: context ⊕ one-hot action → 100 → 100 → expected reward (ReLU); buffer of the last
4,096 interactions; ``updates_per_step`` minibatches of 64 after every interaction (the
paper: 64; the default 16 fits 5,000 steps of six agents × three seeds into ~30 CPU
minutes). Likelihood N(r; f, ``noise_std``²) for every agent, or with
``heteroscedastic=true`` a second output s and σ = ``noise_std`` + softplus(s);
``kl_schedule=blundell`` weighs the KL of an interaction's updates by Blundell's πᵢ. Writes
``mushroom.png`` (cumulative regret, log scale), ``result.json`` and
``report.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import torch
from torch import nn

from .. import _checks
from ..bandits import (
    EAT_EDIBLE,
    EAT_POISONOUS_LUCKY,
    EAT_POISONOUS_UNLUCKY,
    Agent,
    BanditHistory,
    MushroomBandit,
    run_bandit,
)
from ..data import load_mushroom
from ..models import mlp
from ..population import Population
from ..priors import Gaussian, Laplace, LogUniform, Prior, ScaleMixture
from ..samplers import PSGLD
from ..variational import Delta, DiagonalGaussian, VariationalDropout
from ..vi import SCHEDULES
from ._result import Result, Resumable, prepare_output, write_result

AGENTS = ("bbb", "vd", "psgld", "greedy", "eps1", "eps5")
EPSILON = {"greedy": 0.0, "eps1": 0.01, "eps5": 0.05}
POISONOUS_EATEN_REGRET = -0.5 * (EAT_POISONOUS_LUCKY + EAT_POISONOUS_UNLUCKY)  # 15
EDIBLE_PASSED_REGRET = EAT_EDIBLE  # 5
PAPER = (
    "Blundell et al. (2015) Fig. 6 (50,000 steps): Bayes by Backprop lowest; ε-greedy 5% highest"
)


@dataclass
class Config(Resumable):
    """Settings; defaults are the README's run, ``quick()`` the CI preset."""

    seed: int = 0
    seeds: int = 3
    steps: int = 5000
    updates_per_step: int = 16
    batch_size: int = 64
    buffer_size: int = 4096
    hidden: tuple[int, ...] = (100, 100)
    agents: tuple[str, ...] = AGENTS
    noise_std: float = 1.0  # the likelihood σ; with heteroscedastic=true its floor
    heteroscedastic: bool = False
    lr: dict[str, float] = field(
        default_factory=lambda: {"bbb": 1e-3, "vd": 1e-3, "psgld": 1e-3, "plain": 1e-3}
    )
    rho_init: float = -5.0
    kl_weight: float = 1.0  # β on the KL of the Thompson agents (bbb, vd); 1 = free energy
    kl_schedule: str = "uniform"  # π_i over the updates after each interaction (vi.SCHEDULES)
    bbb_prior: str = "gaussian"
    prior_std: float = 1.0
    mixture: tuple[float, float, float] = (0.5, 1.0, math.exp(-6))
    checkpoint_every: int = 500  # interactions between checkpoints

    def __post_init__(self) -> None:
        super().__post_init__()
        _checks.at_least("seeds", self.seeds, 1)
        _checks.at_least("steps", self.steps, 1)
        _checks.at_least("updates_per_step", self.updates_per_step, 0)
        _checks.at_least("batch_size", self.batch_size, 1)
        _checks.at_least("buffer_size", self.buffer_size, 1)
        _checks.positive("noise_std", self.noise_std)
        _checks.positive("prior_std", self.prior_std)
        _checks.non_negative("kl_weight", self.kl_weight)
        _checks.one_of("bbb_prior", self.bbb_prior, tuple(BBB_PRIORS))
        _checks.one_of("kl_schedule", self.kl_schedule, SCHEDULES)
        if not self.agents:
            raise ValueError("agents must name at least one agent")
        for name in self.agents:
            _checks.one_of("agents", name, AGENTS)

    @classmethod
    def quick(cls, **overrides) -> Config:
        return replace(cls(steps=150, updates_per_step=4, seeds=2), **overrides)


BBB_PRIORS: dict[str, Callable[[Config], Prior]] = {
    "gaussian": lambda c: Gaussian(0.0, c.prior_std),
    "laplace": lambda c: Laplace(0.0, c.prior_std / math.sqrt(2.0)),  # std σ_p: b = σ_p/√2
    "mixture": lambda c: ScaleMixture(*c.mixture),
}


def make_agent(name: str, network: nn.Module, config: Config) -> Agent:
    """Agent ``name`` with ``config.seeds`` members (reads the global RNG for initial weights)."""
    lr = config.lr["plain" if name in EPSILON else name]
    if name == "bbb":
        factory = partial(DiagonalGaussian, rho_init=config.rho_init)
        prior = BBB_PRIORS[config.bbb_prior](config)
        population = Population(network, config.seeds, factory, prior, train_samples=2)
        optimizer: torch.optim.Optimizer = torch.optim.Adam(population.parameters(), lr, fused=True)
    elif name == "vd":
        factory = partial(VariationalDropout, alpha_init=0.1, batch_dims=1)
        population = Population(network, config.seeds, factory, LogUniform())
        optimizer = torch.optim.Adam(population.parameters(), lr, fused=True)
    elif name == "psgld":
        population = Population(network, config.seeds, Delta)
        generator = torch.Generator().manual_seed(config.seed + 20_000)
        optimizer = PSGLD(
            population.parameters(), lr, num_data=1, prior=Gaussian(0.0, 1.0), generator=generator
        )
    else:
        population = Population(network, config.seeds, Delta)
        optimizer = torch.optim.Adam(population.parameters(), lr, fused=True)
        return Agent(name, population, optimizer, False, EPSILON[name], config.noise_std)
    return Agent(name, population, optimizer, True, 0.0, config.noise_std, config.kl_weight)


def summarize(history: BanditHistory, tail_fraction: float = 0.1) -> dict[str, dict[str, float]]:
    """Final cumulative regret (mean and std over seeds), realized and expected, and over the
    last ``tail_fraction`` of steps the fraction of correct eat/pass decisions and of the two
    mistakes: eating a poisonous mushroom (expected regret 15) and passing an edible one (5)."""
    final = history.cumulative()[-1]
    final_expected = history.cumulative(expected=True)[-1]
    tail = max(1, int(len(history.correct) * tail_fraction))
    correct = history.correct[-tail:].float().mean(0)
    expected_tail = history.expected_regret[-tail:]
    poisonous_eaten = (expected_tail == POISONOUS_EATEN_REGRET).float().mean(0)
    edible_passed = (expected_tail == EDIBLE_PASSED_REGRET).float().mean(0)
    summary = {}
    for a, name in enumerate(history.names):
        summary[name] = {
            "regret": float(final[a].mean()),
            "regret_std": float(final[a].std()) if final.shape[1] > 1 else 0.0,
            "expected_regret": float(final_expected[a].mean()),
            "tail_accuracy": float(correct[a].mean()),
            "tail_poisonous_eaten": float(poisonous_eaten[a].mean()),
            "tail_edible_passed": float(edible_passed[a].mean()),
            "per_seed_regret": [float(v) for v in final[a]],
        }
    return summary


def plot(history: BanditHistory, path: Path) -> None:
    import matplotlib.pyplot as plt

    cumulative = history.cumulative().mean(-1)
    steps = torch.arange(1, len(cumulative) + 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    for a, name in enumerate(history.names):
        ax.plot(steps, cumulative[:, a].clamp(min=1.0), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"cumulative regret (mean of {history.regret.shape[-1]} seeds)")
    ax.set_title("Mushroom bandit (Blundell et al. 2015 Fig. 6)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(config: Config, summary: dict[str, dict[str, float]], seconds: float) -> str:
    lines = [
        "# Mushroom bandit: cumulative regret",
        "",
        f"{config.steps} steps × {config.seeds} seeds, {config.updates_per_step} updates of "
        f"{config.batch_size} per step; {seconds:.0f} s. Paper: {PAPER}.",
        "",
        "| agent | regret (mean ± std) | expected regret | correct, last 10% "
        "| poisonous eaten, last 10% | edible passed, last 10% |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['regret']:.0f} ± {s['regret_std']:.0f} | "
            f"{s['expected_regret']:.0f} | {s['tail_accuracy']:.3f} | "
            f"{s['tail_poisonous_eaten']:.3f} | {s['tail_edible_passed']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def run(config: Config, out: str | Path) -> Result:
    """Run every agent of ``config`` on the mushroom bandit and write the results."""
    out = prepare_output(out)
    data = load_mushroom()
    env = MushroomBandit(data.contexts, data.edible)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # initial weights; the caller's RNG is left untouched
        outputs = 2 if config.heteroscedastic else 1
        network = mlp(data.contexts.shape[1] + env.num_actions, config.hidden, outputs)
        agents = [make_agent(name, network, config) for name in config.agents]
    start = time.perf_counter()
    history = run_bandit(
        env,
        agents,
        config.steps,
        updates_per_step=config.updates_per_step,
        batch_size=config.batch_size,
        buffer_size=config.buffer_size,
        seed=config.seed,
        checkpoint=out / "checkpoints" / "bandit.pt",
        checkpoint_every=config.checkpoint_every,
        resume=config.resume,
        kl_schedule=config.kl_schedule,
    )
    seconds = time.perf_counter() - start
    summary = summarize(history)
    plot(history, out / "mushroom.png")
    curves = history.cumulative().mean(-1)
    every = max(1, config.steps // 200)
    result = Result(
        name="mushroom",
        config=asdict(config),
        metrics={
            "agents": summary,
            "curve_steps": list(range(every, config.steps + 1, every)),
            "curves": {
                name: [float(v) for v in curves[every - 1 :: every, a]]
                for a, name in enumerate(history.names)
            },
        },
        timings={
            "seconds": seconds,
            "interactions_per_second": config.steps * config.seeds * len(agents) / seconds,
        },
        report=_report(config, summary, seconds),
        files={"plot": str(out / "mushroom.png")},
    )
    write_result(result, out, config.keep_checkpoints)
    return result
