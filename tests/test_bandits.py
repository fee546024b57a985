import pytest
import torch
from torch.func import functional_call

from torchbayes.bandits import (
    Agent,
    MushroomBandit,
    ReplayBuffer,
    action_inputs,
    run_bandit,
)
from torchbayes.models import mlp
from torchbayes.population import Population, population_outputs
from torchbayes.priors import Gaussian, ScaleMixture
from torchbayes.variational import DiagonalGaussian


def test_rewards_and_regret_on_hand_made_mushrooms():
    edible = torch.tensor([True, True, False, False, False, False])
    eat = torch.tensor([1, 0, 1, 1, 0, 0])
    lucky = torch.tensor([False, True, True, False, True, False])
    reward = MushroomBandit.rewards(edible, eat, lucky)
    assert reward.tolist() == [5.0, 0.0, 5.0, -35.0, 0.0, 0.0]
    oracle = MushroomBandit.oracle_rewards(edible)
    assert oracle.tolist() == [5.0, 5.0, 0.0, 0.0, 0.0, 0.0]
    # Regret: a lucky poisonous meal beats the oracle by 5; an unlucky one costs 35.
    assert (oracle - reward).tolist() == [0.0, 5.0, -5.0, 35.0, 0.0, 0.0]
    expected = MushroomBandit.expected_rewards(edible, eat)
    assert expected.tolist() == [5.0, 0.0, -15.0, -15.0, 0.0, 0.0]


def test_action_inputs_append_a_one_hot_action():
    contexts = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    options = action_inputs(contexts, 2)
    assert options.shape == (2, 2, 5)
    assert options[1, 0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert options[1, 1].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]


def test_replay_buffer_keeps_the_last_interactions():
    buffer = ReplayBuffer(members=2, dim=1, capacity=3)
    for t in range(5):
        buffer.add(torch.tensor([[t], [10.0 + t]]), torch.tensor([t, 10.0 + t]))
    assert len(buffer) == 3
    inputs, rewards = buffer.sample(50, torch.Generator().manual_seed(0))
    assert set(rewards[0].tolist()) == {2.0, 3.0, 4.0}
    assert set(rewards[1].tolist()) == {12.0, 13.0, 14.0}
    torch.testing.assert_close(inputs.squeeze(-1), rewards)


def test_population_outputs_match_a_loop_over_members():
    network = mlp(4, (8,), 1)
    population = Population(network, 3)
    params = population.mean()
    inputs = torch.randn(3, 5, 4)
    batched = population_outputs(network, params, inputs)
    for k in range(3):
        one = {name: p[k] for name, p in params.items()}
        torch.testing.assert_close(batched[k], functional_call(network, one, (inputs[k],)))


def test_members_are_independent_learners():
    """The gradient of the summed loss, for member k, is member k's own gradient."""
    network = mlp(3, (6,), 1)
    population = Population(network, 2, DiagonalGaussian, Gaussian(0.0, 1.0))
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(2, 7, 3), torch.randn(2, 7)
    params = population.sample(1, generator)
    outputs = population_outputs(network, params, inputs).squeeze(-1)
    ((outputs - targets) ** 2).mean(-1)[0].backward()
    for q in population.posteriors:
        assert q.mu.grad[1].abs().max() == 0 and q.mu.grad[0].abs().max() > 0


def test_monte_carlo_kl_of_a_population_is_the_sum_over_members():
    population = Population(mlp(3, (4,), 1), 2, DiagonalGaussian, ScaleMixture())
    population.sample(2, torch.Generator().manual_seed(1))
    total = population.kl()
    per_member = 0.0
    for q, draw in zip(population.posteriors, population._last.values(), strict=True):
        for k in range(2):
            w = draw.sample[:, k]
            log_q = torch.distributions.Normal(q.mu[k], q.stddev[k]).log_prob(w).sum()
            per_member += (log_q - population.prior.log_prob(w).sum()) / 2
    torch.testing.assert_close(total, per_member)


def test_member_posterior_samples_one_member():
    population = Population(mlp(3, (4,), 1), 4, DiagonalGaussian)
    member = population.member(2)
    samples = member.sample(5, torch.Generator().manual_seed(0))
    for name, q in zip(population.names, population.posteriors, strict=True):
        assert samples[name].shape == (5, *q.mu.shape[1:])
        assert (samples[name] - q.mu[2]).abs().max() < 0.1
    with pytest.raises(ValueError, match="k=4"):
        population.member(4)


def _agents(seeds: int):
    network = mlp(117 + 2, (16,), 1)
    bbb = Population(network, seeds, DiagonalGaussian, Gaussian(0.0, 1.0), train_samples=2)
    plain = Population(network, seeds)
    return [
        Agent("bbb", bbb, torch.optim.Adam(bbb.parameters(), 1e-2)),
        Agent("eps", plain, torch.optim.Adam(plain.parameters(), 1e-2), False, 0.5),
    ]


def test_run_bandit_records_every_agent_and_seed():
    contexts = torch.eye(117)[torch.randint(117, (40,))]
    env = MushroomBandit(contexts, torch.rand(40) < 0.5)
    history = run_bandit(env, _agents(2), 30, updates_per_step=2, progress=False)
    assert history.regret.shape == (30, 2, 2) and history.names == ["bbb", "eps"]
    # Realized regret is −5, 0, 5 or 35 per step; expected regret 0, 5 or 15.
    assert set(history.regret.unique().tolist()) <= {-5.0, 0.0, 5.0, 35.0}
    assert set(history.expected_regret.unique().tolist()) <= {0.0, 5.0, 15.0}
    assert torch.equal(history.correct, history.expected_regret == 0)


def test_agents_must_have_one_member_per_seed():
    agents = _agents(2)
    agents[1].population = Population(mlp(119, (4,), 1), 3)
    env = MushroomBandit(torch.eye(117)[:4], torch.tensor([True, False, True, False]))
    with pytest.raises(ValueError, match="one member per seed"):
        run_bandit(env, agents, 2, progress=False)


def test_bad_epsilon_is_named():
    population = Population(mlp(2, (2,), 1), 1)
    with pytest.raises(ValueError, match=r"epsilon=1\.5"):
        Agent("x", population, torch.optim.SGD(population.parameters(), 0.1), False, 1.5)


def test_replay_buffer_state_round_trips_and_checks_its_shape():
    from torchbayes.bandits import ReplayBuffer

    buffer = ReplayBuffer(2, 3, capacity=4)
    for r in range(6):
        buffer.add(torch.full((2, 3), float(r)), torch.full((2,), float(r)))
    copy = ReplayBuffer(2, 3, capacity=4)
    copy.load_state_dict(buffer.state_dict())
    assert len(copy) == 4 and copy.count == 6 and torch.equal(copy.inputs, buffer.inputs)
    with pytest.raises(ValueError, match="buffer shape"):
        ReplayBuffer(2, 5, capacity=4).load_state_dict(buffer.state_dict())


def test_kl_weight_scales_only_the_complexity_term():
    from torchbayes.bandits import _loss

    population = Population(mlp(3, (4,), 1), 2, DiagonalGaussian, Gaussian(0.0, 1.0))
    optimizer = torch.optim.SGD(population.parameters(), 0.1)
    predictions, rewards = torch.randn(2, 5), torch.randn(2, 5)
    loss = {
        beta: _loss(
            Agent("bbb", population, optimizer, kl_weight=beta),
            predictions.unsqueeze(-1),
            rewards,
            10,
        )
        for beta in (0.0, 0.5, 1.0)
    }
    nll = 0.5 * (predictions - rewards).square().mean(-1).sum()
    assert torch.allclose(loss[0.0], nll)
    assert torch.allclose(loss[1.0] - nll, population.kl() / 10)
    assert torch.allclose(loss[0.5] - nll, 0.5 * (loss[1.0] - nll))
    scaled = _loss(Agent("bbb", population, optimizer), predictions.unsqueeze(-1), rewards, 10, 8.0)
    assert torch.allclose(scaled - nll, 8 * (loss[1.0] - nll))
    with pytest.raises(ValueError, match=r"kl_weight=-1"):
        Agent("bbb", population, optimizer, kl_weight=-1.0)


def test_summary_splits_the_tail_mistakes_by_kind():
    from torchbayes.bandits import BanditHistory
    from torchbayes.experiments.mushroom import summarize

    # One agent, one seed, 10 steps; the last 5 hold 2 poisonous meals and 1 edible pass.
    expected = torch.tensor([15.0, 5, 5, 5, 5, 0, 15, 5, 15, 0]).view(10, 1, 1)
    history = BanditHistory(["a"], expected.clone(), expected, expected == 0)
    s = summarize(history, tail_fraction=0.5)["a"]
    assert s["tail_poisonous_eaten"] == pytest.approx(0.4)
    assert s["tail_edible_passed"] == pytest.approx(0.2)
    assert s["tail_accuracy"] == pytest.approx(0.4)


def test_two_outputs_make_the_reward_likelihood_heteroscedastic():
    from torchbayes.bandits import _loss, reward_mean_and_std

    population = Population(mlp(3, (4,), 2), 2, DiagonalGaussian, Gaussian(0.0, 1.0))
    optimizer = torch.optim.SGD(population.parameters(), 0.1)
    outputs, rewards = torch.randn(2, 5, 2), 10 * torch.randn(2, 5)
    floor = 0.5
    agent = Agent("bbb", population, optimizer, noise_std=floor, kl_weight=0.0)
    std = floor + torch.nn.functional.softplus(outputs[..., 1])
    normal = torch.distributions.Normal(outputs[..., 0], std)
    constant = 0.5 * torch.log(torch.tensor(2 * torch.pi))
    expected = -(normal.log_prob(rewards) + constant).mean(-1).sum()
    torch.testing.assert_close(_loss(agent, outputs, rewards, 10), expected, rtol=1e-5, atol=0)
    mean, std = reward_mean_and_std(outputs, floor)
    assert torch.equal(mean, outputs[..., 0]) and bool((std > floor).all())
    with pytest.raises(ValueError, match="1 or 2 outputs, got 3"):
        reward_mean_and_std(torch.zeros(4, 3), floor)


def test_a_heteroscedastic_bandit_acts_on_the_mean_output():
    torch.manual_seed(0)
    env = MushroomBandit(torch.eye(4).repeat(5, 1), torch.arange(20) % 2 == 0)
    network = mlp(4 + 2, (8,), 2)
    population = Population(network, 2, DiagonalGaussian, Gaussian(0.0, 1.0))
    agent = Agent("bbb", population, torch.optim.Adam(population.parameters(), 1e-2))
    history = run_bandit(env, [agent], 30, updates_per_step=2, batch_size=8, progress=False)
    assert history.regret.shape == (30, 1, 2)
    assert torch.isfinite(history.cumulative()).all()


def test_blundell_kl_schedule_runs_and_bad_schedules_are_named():
    torch.manual_seed(0)
    env = MushroomBandit(torch.eye(4).repeat(5, 1), torch.arange(20) % 2 == 0)
    population = Population(mlp(6, (8,), 1), 2, DiagonalGaussian, Gaussian(0.0, 1.0))
    agent = Agent("bbb", population, torch.optim.Adam(population.parameters(), 1e-2))
    history = run_bandit(
        env, [agent], 10, updates_per_step=4, batch_size=8, progress=False, kl_schedule="blundell"
    )
    assert torch.isfinite(history.cumulative()).all()
    with pytest.raises(ValueError, match="kl_schedule='first'"):
        run_bandit(env, [agent], 1, progress=False, kl_schedule="first")
