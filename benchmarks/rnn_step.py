"""Per-step time of recurrent training: pSGLD vs RMSprop, and a VI Bayesian LSTM vs nn.LSTM.

The War-and-Peace character model of Gan et al. (2017) Table 2: embedding, 2 × 128 LSTM,
decoder over a 149-character vocabulary, minibatch 100 sequences × 100 characters, gradient
clipping at 5, random ids, CPU. One step = forward, backward, clip, update.

* pSGLD vs RMSprop — the same network, the sampler against its optimizer twin;
* VI vs plain — ``to_bayesian(CharRNN)`` (one weight sample per minibatch shared over the 100
  time steps, fused LSTM kernel on the sample, Gaussian KL added to the loss) against the plain
  ``CharRNN``, both with Adam.

Variants are timed in interleaved rounds; the table gives median ms/step and ratios.

    python benchmarks/rnn_step.py [--steps 60] [--rounds 5] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import benchmark_args, interleaved_medians

from torchbayes.models import CharRNN
from torchbayes.nn import model_kl, to_bayesian
from torchbayes.priors import Gaussian
from torchbayes.samplers import PSGLD
from torchbayes.vi import FreeEnergy

VOCAB, HIDDEN, BATCH, SEQ = 149, 128, 100, 100
NUM_DATA = 2_882_945  # training characters of War and Peace (90 % split)


def step_fn(model: torch.nn.Module, optimizer, bayesian: bool, ids, targets) -> Callable[[], None]:
    free_energy = FreeEnergy(NUM_DATA, NUM_DATA // (BATCH * SEQ)) if bayesian else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        if free_energy is not None:
            loss = free_energy(model, loss, 0).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    return step


def variants(ids: torch.Tensor, targets: torch.Tensor) -> dict[str, Callable[[], None]]:
    def plain() -> CharRNN:
        torch.manual_seed(0)
        return CharRNN(VOCAB, HIDDEN, 2, "lstm")

    rmsprop_net, psgld_net, adam_net = plain(), plain(), plain()
    vi_net = to_bayesian(plain(), prior=Gaussian(0.0, 1.0))
    assert model_kl(vi_net).requires_grad
    return {
        "RMSprop": step_fn(
            rmsprop_net,
            torch.optim.RMSprop(rmsprop_net.parameters(), lr=2e-3, alpha=0.99, foreach=True),
            False,
            ids,
            targets,
        ),
        "pSGLD": step_fn(
            psgld_net,
            PSGLD(psgld_net.parameters(), lr=2e-3, num_data=NUM_DATA, weight_decay=1.0),
            False,
            ids,
            targets,
        ),
        "plain LSTM + Adam": step_fn(
            adam_net, torch.optim.Adam(adam_net.parameters(), lr=2e-3), False, ids, targets
        ),
        "VI Bayesian LSTM + Adam": step_fn(
            vi_net, torch.optim.Adam(vi_net.parameters(), lr=2e-3), True, ids, targets
        ),
    }


def main() -> None:
    args = benchmark_args(__doc__.splitlines()[0], default_steps=60)
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {BATCH} × {SEQ}")
    medians = interleaved_medians(variants(ids, targets), args.steps, args.rounds, warmup=5)
    pairs = {"pSGLD / RMSprop": ("pSGLD", "RMSprop"),
             "VI LSTM / nn.LSTM": ("VI Bayesian LSTM + Adam", "plain LSTM + Adam")}  # fmt: skip
    print(f"| {'variant':<26} | {'ms/step':>8} |")
    print(f"|{'-' * 28}|{'-' * 10}|")
    for name, ms in medians.items():
        print(f"| {name:<26} | {ms:8.1f} |")
    ratios = {name: medians[a] / medians[b] for name, (a, b) in pairs.items()}
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.3f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ms_per_step": medians, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
