"""Where Bayes by Backprop's learned noise σ comes from, on UCI yacht at 100× epochs.

    python examples/uci_bbb_noise.py --splits 5

Fits the UCI benchmark's BBB network (``torchbayes run uci``'s ``bbb``) on the first splits
and, on the *training* inputs, compares the learned σ with the posterior mean's residual and
with √E_q[(y − f_w)²]. The free energy's error term E_q[(y − f_w)²] / 2σ² + log σ is smallest
at σ² = E_q[(y − f_w)²] = residual² + Var_q f, so a σ fitted inside mean-field VI takes up the
posterior's own spread, and the predictive variance σ² + Var_q f counts that spread twice.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from torchbayes.data.uci import load_uci
from torchbayes.experiments import uci
from torchbayes.predict import noise_std_from_output, sample_outputs


def training_fit_terms(dataset: str, split: int, config: uci.Config) -> dict[str, float]:
    """Train BBB on ``split`` and measure σ, the mean's residual and the spread on its data."""
    data = load_uci(dataset)
    train, test = data.splits[split]
    x, y = data.x[train], data.y[train].squeeze(-1)
    scale = uci.Standardized.fit(x, data.y[train])
    seed = config.seed + split
    fit = uci._bbb(scale, data.hidden, config, data.epochs * config.epoch_multiplier, seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        outputs = sample_outputs(fit.posterior, scale.inputs(x), 100, generator=generator)
    mean, raw = outputs.chunk(2, dim=-1)
    f = mean.squeeze(-1) * scale.y_std + scale.y_mean
    sigma = noise_std_from_output(raw).squeeze(-1) * scale.y_std
    tested = uci.evaluate(fit.posterior, scale, data.x[test], data.y[test], config, seed)
    return {
        "sigma": float(sigma.mean()),
        "train_rmse_of_mean": float((f.mean(0) - y).square().mean().sqrt()),
        "train_spread": float(f.var(0, correction=0).mean().sqrt()),
        "train_expected_residual": float((f - y).square().mean().sqrt()),
        "test_rmse": tested["rmse"],
        "test_log_likelihood": tested["log_likelihood"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="yacht")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--epoch-multiplier", type=int, default=100)
    args = parser.parse_args()
    config = uci.Config(datasets=(args.dataset,), epoch_multiplier=args.epoch_multiplier)
    rows = []
    for split in range(args.splits):
        rows.append(training_fit_terms(args.dataset, split, config))
        print(split, {k: round(v, 3) for k, v in rows[-1].items()}, flush=True)
    print("mean", {k: round(statistics.mean(r[k] for r in rows), 3) for k in rows[0]})


if __name__ == "__main__":
    main()
