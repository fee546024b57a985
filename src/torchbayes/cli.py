"""The ``torchbayes`` command: ``torchbayes run NAME [--out DIR] [--seed N] [--quick]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .experiments import EXPERIMENTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchbayes",
        description="Bayesian deep learning on PyTorch: run the reproduced experiments.",
    )
    parser.add_argument("--version", action="version", version=f"torchbayes {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run an experiment; writes result.json, report.md and plots into --out",
        description="Run one experiment and write result.json, report.md and its plots.",
    )
    run.add_argument("experiment", choices=sorted(EXPERIMENTS), help="which experiment")
    run.add_argument("--out", type=Path, default=None, help="output folder (default: runs/NAME)")
    run.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    run.add_argument("--quick", action="store_true", help="the small preset used by CI")

    commands.add_parser("list", help="list the experiments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        for name, module in sorted(EXPERIMENTS.items()):
            print(f"{name:<16} {(module.__doc__ or '').strip().splitlines()[0]}")
        return 0
    module = EXPERIMENTS[args.experiment]
    config = module.Config.quick(seed=args.seed) if args.quick else module.Config(seed=args.seed)
    out = args.out if args.out is not None else Path("runs") / args.experiment
    result = module.run(config, out)
    print(result.report)
    for label, path in sorted(result.files.items()):
        print(f"{label:>8}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
