"""Contextual bandits with Thompson sampling over any posterior (Blundell et al. 2015 §4, §5.3).

An agent keeps a posterior over the weights of a network f(context, one-hot action) → expected
reward. Thompson sampling: draw one weight sample w ~ q(w), take argmax_a f(x, a; w), add the
outcome to a buffer, and update the posterior on minibatches from the buffer. ε-greedy agents
act with the posterior mean (their point estimate) and a random action with probability ε.

The mushroom task: context = a UCI mushroom's one-hot attributes; actions "pass" (0) and
"eat" (1). Eating an edible mushroom pays +5, a poisonous one +5 or −35 with probability ½
each, passing pays 0; the oracle eats exactly the edible ones, and regret is the oracle's
reward minus the agent's.

All agents and seeds run together: every agent is a :class:`~torchbayes.population.Population`
with one member per seed, and each interaction does one batched forward for acting and one
batched forward/backward per update over every member of every agent.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from . import _checks
from .checkpoint import Checkpoint
from .population import Population, population_outputs
from .posterior import Posterior
from .predict import noise_std_from_output, sample_outputs
from .vi import SCHEDULES, kl_weights

__all__ = [
    "Agent",
    "BanditHistory",
    "MushroomBandit",
    "ReplayBuffer",
    "action_inputs",
    "reward_mean_and_std",
    "run_bandit",
    "thompson_actions",
]

EAT_EDIBLE, EAT_POISONOUS_LUCKY, EAT_POISONOUS_UNLUCKY = 5.0, 5.0, -35.0


class MushroomBandit:
    """The mushroom environment: contexts (N, D) and labels ``edible`` (N,)."""

    num_actions = 2

    def __init__(self, contexts: Tensor, edible: Tensor) -> None:
        if contexts.ndim != 2 or edible.shape != contexts.shape[:1]:
            raise ValueError(
                f"contexts must be (N, D) and edible (N,), got contexts={tuple(contexts.shape)} "
                f"and edible={tuple(edible.shape)}"
            )
        self.contexts, self.edible = contexts.float(), edible.bool()

    @staticmethod
    def rewards(edible: Tensor, eat: Tensor, lucky: Tensor) -> Tensor:
        """+5 for eating an edible mushroom; +5 (lucky) or −35 for a poisonous one; 0 to pass."""
        poisonous = torch.where(lucky, EAT_POISONOUS_LUCKY, EAT_POISONOUS_UNLUCKY)
        return torch.where(eat.bool(), torch.where(edible, EAT_EDIBLE, poisonous), 0.0)

    @staticmethod
    def expected_rewards(edible: Tensor, eat: Tensor) -> Tensor:
        """E[reward]: +5 edible eaten, −15 poisonous eaten, 0 passed."""
        mean_poisonous = 0.5 * (EAT_POISONOUS_LUCKY + EAT_POISONOUS_UNLUCKY)
        return torch.where(eat.bool(), torch.where(edible, EAT_EDIBLE, mean_poisonous), 0.0)

    @staticmethod
    def oracle_rewards(edible: Tensor) -> Tensor:
        """The oracle eats exactly the edible mushrooms: 5 or 0."""
        return torch.where(edible, EAT_EDIBLE, 0.0)


def action_inputs(contexts: Tensor, num_actions: int) -> Tensor:
    """(…, D) contexts → (…, A, D + A): each context beside each one-hot action."""
    eye = torch.eye(num_actions, dtype=contexts.dtype, device=contexts.device)
    ctx = contexts.unsqueeze(-2).expand(*contexts.shape[:-1], num_actions, contexts.shape[-1])
    actions = eye.expand(*contexts.shape[:-1], num_actions, num_actions)
    return torch.cat([ctx, actions], dim=-1)


def thompson_actions(
    posterior: Posterior,
    contexts: Tensor,
    num_actions: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Thompson sampling with any posterior: one weight sample w ~ q, then argmax_a f(x, a; w).

    ``contexts`` (B, D) share the one sample; returns (B,) actions. The network takes a
    context beside a one-hot action (:func:`action_inputs`) and returns the expected reward.
    """
    values = sample_outputs(posterior, action_inputs(contexts, num_actions), 1, generator=generator)
    return values[0, ..., 0].argmax(-1)


class ReplayBuffer:
    """The last ``capacity`` interactions of M learners, stored as one (M, capacity, D) ring."""

    def __init__(self, members: int, dim: int, capacity: int = 4096) -> None:
        _checks.at_least("members", members, 1)
        _checks.at_least("capacity", capacity, 1)
        self.inputs = torch.zeros(members, capacity, dim)
        self.rewards = torch.zeros(members, capacity)
        self.capacity, self.count = capacity, 0

    def __len__(self) -> int:
        return min(self.count, self.capacity)

    def state_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "rewards": self.rewards, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["inputs"].shape != self.inputs.shape:
            raise ValueError(
                f"buffer shape {tuple(state['inputs'].shape)} does not match "
                f"{tuple(self.inputs.shape)}"
            )
        self.inputs, self.rewards = state["inputs"].clone(), state["rewards"].clone()
        self.count = int(state["count"])

    def add(self, inputs: Tensor, rewards: Tensor) -> None:
        """One interaction per learner: ``inputs`` (M, D), ``rewards`` (M,)."""
        slot = self.count % self.capacity
        self.inputs[:, slot] = inputs
        self.rewards[:, slot] = rewards
        self.count += 1

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """A minibatch per learner, uniform with replacement: (M, B, D) inputs, (M, B) rewards."""
        if self.count == 0:
            raise ValueError("cannot sample from an empty buffer")
        members = self.inputs.shape[0]
        index = torch.randint(len(self), (members, batch_size), generator=generator)
        rows = torch.arange(members).unsqueeze(1)
        return self.inputs[rows, index], self.rewards[rows, index]


OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


@dataclass
class Agent:
    """One agent type, run for every seed as the members of ``population``.

    ``thompson`` — act on one posterior sample (else on the posterior mean);
    ``epsilon`` — probability of a uniformly random action instead;
    ``noise_std`` — σ of the Gaussian reward likelihood −log p(r|w) = (r − f)² / 2σ² + log σ
    + const; a network with two outputs (f, s) is heteroscedastic, σ(x, a) = ``noise_std`` +
    softplus(s) (Kendall & Gal 2017), so ``noise_std`` is its floor — the mushroom rewards are
    exact except for eating a poisonous one (±20 around −15);
    ``kl_weight`` — β in mean NLL + β·KL/N; β < 1 tempers the posterior (narrower q, less
    exploration; Wenzel et al. 2020 call it a cold posterior), β = 1 is the free energy.
    An optimizer with a ``num_data`` attribute (the SG-MCMC samplers) gets the buffer size.
    """

    name: str
    population: Population
    optimizer: torch.optim.Optimizer
    thompson: bool = True
    epsilon: float = 0.0
    noise_std: float = 1.0
    kl_weight: float = 1.0

    def __post_init__(self) -> None:
        _checks.probability("epsilon", self.epsilon)
        _checks.positive("noise_std", self.noise_std)
        _checks.non_negative("kl_weight", self.kl_weight)


@dataclass
class BanditHistory:
    """Per-step outcomes, each (steps, agents, seeds)."""

    names: list[str]
    regret: Tensor
    expected_regret: Tensor
    correct: Tensor

    def cumulative(self, expected: bool = False) -> Tensor:
        return (self.expected_regret if expected else self.regret).cumsum(0)


def reward_mean_and_std(outputs: Tensor, noise_std: float) -> tuple[Tensor, Tensor | float]:
    """Network outputs (…, 1) or (…, 2) → the expected reward f and the likelihood σ.

    One output: σ = ``noise_std``. Two: σ = ``noise_std`` + softplus(s), heteroscedastic.
    """
    if outputs.shape[-1] == 1:
        return outputs[..., 0], noise_std
    if outputs.shape[-1] == 2:
        return outputs[..., 0], noise_std + noise_std_from_output(outputs[..., 1])
    raise ValueError(f"a reward network has 1 or 2 outputs, got {outputs.shape[-1]}")


def _loss(
    agent: Agent, outputs: Tensor, rewards: Tensor, num_data: int, kl_scale: float = 1.0
) -> Tensor:
    """Σ over members of the per-example free energy: mean NLL + β·πᵢM·KL / N.

    ``kl_scale`` = πᵢM, the minibatch's KL weight relative to the uniform schedule.
    """
    samples = agent.population.train_samples
    mean, std = reward_mean_and_std(outputs, agent.noise_std)
    nll = 0.5 * ((mean - rewards) / std).square()
    if isinstance(std, Tensor):
        nll = nll + std.log()
    nll = nll.mean(-1)
    weight = agent.kl_weight * kl_scale
    kl = agent.population.kl() * (weight / num_data) if weight else 0.0
    return nll.view(samples, -1).mean(0).sum() + kl


def run_bandit(
    env: MushroomBandit,
    agents: Sequence[Agent],
    steps: int,
    *,
    updates_per_step: int = 64,
    batch_size: int = 64,
    buffer_size: int = 4096,
    seed: int = 0,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    resume: bool = False,
    kl_schedule: str = "uniform",
) -> BanditHistory:
    """Run every agent for ``steps`` interactions on each of its members' own seeds.

    Member k of every agent sees the same context stream and the same coin flips (seed
    ``seed + k``), so agents are compared on common random numbers. With ``checkpoint`` (a
    file) every ``checkpoint_every`` interactions and the last are saved — every population
    and optimizer, the replay buffer, the noise generator, the outcomes so far — and
    ``resume`` continues from there. ``kl_schedule`` weighs the KL of the
    ``updates_per_step`` minibatches after each interaction as one epoch of M minibatches
    (:func:`~torchbayes.vi.kl_weights`): ``"uniform"`` πᵢ = 1/M, ``"blundell"``
    πᵢ = 2^(M−i)/(2^M − 1), so the first updates after an interaction are pulled to the prior
    and the last fit the data.
    """
    _checks.at_least("steps", steps, 1)
    _checks.at_least("updates_per_step", updates_per_step, 0)
    _checks.at_least("batch_size", batch_size, 1)
    if not agents:
        raise ValueError("agents must not be empty")
    seeds = agents[0].population.size
    for agent in agents:
        if agent.population.size != seeds:
            raise ValueError(
                f"every agent needs one member per seed: {agent.name!r} has "
                f"{agent.population.size}, {agents[0].name!r} has {seeds}"
            )
    _checks.one_of("kl_schedule", kl_schedule, SCHEDULES)
    kl_scales = (
        (kl_weights(updates_per_step, kl_schedule) * updates_per_step).tolist()
        if updates_per_step
        else []
    )
    num_agents, num_actions = len(agents), env.num_actions
    network = agents[0].population.network
    streams = [torch.Generator().manual_seed(seed + k) for k in range(seeds)]
    index = torch.stack([torch.randint(len(env.edible), (steps,), generator=g) for g in streams])
    lucky = torch.stack([torch.rand(steps, generator=g) < 0.5 for g in streams])
    noise = torch.Generator().manual_seed(seed + 10_000)
    members = num_agents * seeds
    buffer = ReplayBuffer(members, env.contexts.shape[1] + num_actions, buffer_size)
    epsilon = torch.tensor([a.epsilon for a in agents]).repeat_interleave(seeds)
    regret = torch.zeros(steps, num_agents, seeds)
    expected_regret = torch.zeros_like(regret)
    correct = torch.zeros(steps, num_agents, seeds, dtype=torch.bool)

    saver, start = None, 0
    if checkpoint is not None:
        objects: dict[str, Any] = {"buffer": buffer, "noise": noise}
        for agent in agents:
            objects[f"{agent.name}/population"] = agent.population
            objects[f"{agent.name}/optimizer"] = agent.optimizer
        saver = Checkpoint(checkpoint, objects, checkpoint_every)
        if resume:
            start, done = saver.restore()
            if start:
                regret[:start], expected_regret[:start] = done["regret"], done["expected_regret"]
                correct[:start] = done["correct"]
    for t in tqdm(range(start, steps), desc="bandit", disable=not progress, initial=start):
        contexts = env.contexts[index[:, t]]
        edible = env.edible[index[:, t]]
        options = action_inputs(contexts, num_actions).repeat(num_agents, 1, 1)  # (M, A, D + A)
        with torch.no_grad():
            params = _cat(
                [
                    a.population.sample(1, noise) if a.thompson else a.population.mean()
                    for a in agents
                ]
            )
            values = population_outputs(network, params, options)
        action = values[..., 0].argmax(-1)
        explore = torch.rand(members, generator=noise) < epsilon
        action = torch.where(
            explore, torch.randint(num_actions, (members,), generator=noise), action
        )
        eat = action.view(num_agents, seeds)
        reward = env.rewards(edible, eat, lucky[:, t])
        regret[t] = env.oracle_rewards(edible) - reward
        expected_regret[t] = env.oracle_rewards(edible) - env.expected_rewards(edible, eat)
        correct[t] = eat.bool() == edible
        chosen = options[torch.arange(members), action]
        buffer.add(chosen, reward.reshape(-1))
        for kl_scale in kl_scales:
            _update(agents, network, buffer, batch_size, noise, kl_scale)
        if saver is not None:
            saver.step(
                t + 1,
                final=t + 1 == steps,
                regret=regret[: t + 1],
                expected_regret=expected_regret[: t + 1],
                correct=correct[: t + 1],
            )
    return BanditHistory([a.name for a in agents], regret, expected_regret, correct)


def _cat(param_sets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    return {name: torch.cat([p[name] for p in param_sets]) for name in param_sets[0]}


def _update(
    agents: Sequence[Agent],
    network: torch.nn.Module,
    buffer: ReplayBuffer,
    batch_size: int,
    generator: torch.Generator,
    kl_scale: float = 1.0,
) -> None:
    """One minibatch step for every member of every agent: one forward, one backward."""
    inputs, rewards = buffer.sample(batch_size, generator)
    seeds, num_data = agents[0].population.size, len(buffer)
    param_sets, input_sets, reward_sets = [], [], []
    for a, agent in enumerate(agents):
        block = slice(a * seeds, (a + 1) * seeds)
        samples = agent.population.train_samples
        param_sets.append(agent.population.sample(samples, generator))
        input_sets.append(inputs[block].repeat(samples, 1, 1))
        reward_sets.append(rewards[block].repeat(samples, 1))
        optimizer = agent.optimizer
        if hasattr(optimizer, "num_data"):
            optimizer.num_data = num_data
        optimizer.zero_grad(set_to_none=True)
    outputs = population_outputs(network, _cat(param_sets), torch.cat(input_sets))
    sizes = [agent.population.train_samples * seeds for agent in agents]
    loss = sum(
        _loss(agent, o, r, num_data, kl_scale)
        for agent, o, r in zip(agents, outputs.split(sizes), reward_sets, strict=True)
    )
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite bandit loss {value!r} at buffer size {num_data}")
    loss.backward()
    for agent in agents:
        agent.optimizer.step()
