"""The ``torchbayes`` command: ``torchbayes run NAME [--out DIR] [--seed N] [--quick]
[--resume] [--set KEY=VALUE]`` and ``torchbayes list``; under torchrun, experiments marked
``DISTRIBUTED`` run one chain per rank."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist

from . import __version__
from .distributed import init_from_environment
from .experiments import EXPERIMENTS
from .runtime import keep_freed_memory


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
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its checkpoints in --out (every experiment; "
        "starts afresh when nothing was saved)",
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set likelihood=homoscedastic --set hidden=100,100",
    )

    commands.add_parser("list", help="list the experiments")
    return parser


def _convert(value: str, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin is tuple:
        (item_type, *_) = typing.get_args(annotation) or (str,)
        return tuple(_convert(v, item_type, key) for v in value.split(",") if v)
    if origin is dict:  # NAME:VALUE,NAME:VALUE — merged into the default by config_overrides
        _, item_type = typing.get_args(annotation)
        entries = {}
        for item in filter(None, value.split(",")):
            name, sep, number = item.partition(":")
            if not sep:
                raise ValueError(f"--set {key} takes NAME:VALUE,…, got {key}={value!r}")
            entries[name] = _convert(number, item_type, key)
        return entries
    if annotation is bool:
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"--set {key} takes true or false, got {key}={value!r}")
        return value.lower() in ("true", "1")
    if annotation not in (int, float, str):
        raise ValueError(f"--set cannot set {key} (type {annotation}) from the command line")
    try:
        return annotation(value)
    except ValueError:
        raise ValueError(
            f"--set {key} takes a {annotation.__name__}, got {key}={value!r}"
        ) from None


def config_overrides(config_type: type, pairs: Sequence[str]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` strings into typed values for the fields of ``config_type``."""
    hints = typing.get_type_hints(config_type)
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        if key not in fields:
            raise ValueError(
                f"--set: unknown config field {key!r}; fields: {', '.join(sorted(fields))}"
            )
        converted = _convert(value, hints[key], key)
        if isinstance(converted, dict):
            default = overrides.get(key) or fields[key].default_factory()
            unknown = set(converted) - set(default)
            if unknown:
                raise ValueError(
                    f"--set {key}: unknown name(s) {sorted(unknown)}; names: {sorted(default)}"
                )
            converted = {**default, **converted}
        overrides[key] = converted
    return overrides


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        for name, module in sorted(EXPERIMENTS.items()):
            print(f"{name:<16} {(module.__doc__ or '').strip().splitlines()[0]}")
        return 0
    module = EXPERIMENTS[args.experiment]
    try:
        overrides = {"seed": args.seed, **config_overrides(module.Config, args.overrides)}
        if args.resume:
            overrides["resume"] = True
        config = module.Config.quick(**overrides) if args.quick else module.Config(**overrides)
    except ValueError as err:
        print(f"torchbayes run {args.experiment}: {err}", file=sys.stderr)
        return 2
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not getattr(module, "DISTRIBUTED", False):
        able = [name for name, m in sorted(EXPERIMENTS.items()) if getattr(m, "DISTRIBUTED", False)]
        print(
            f"torchbayes run {args.experiment}: does not run under torchrun "
            f"(WORLD_SIZE={os.environ['WORLD_SIZE']}); experiments that do: {', '.join(able)}",
            file=sys.stderr,
        )
        return 2
    out = args.out if args.out is not None else Path("runs") / args.experiment
    keep_freed_memory()
    distributed = init_from_environment()
    rank = dist.get_rank() if distributed else 0
    try:
        result = module.run(config, out)
    finally:
        if distributed:
            dist.destroy_process_group()
    if rank != 0:
        return 0  # rank 0 reports
    print(result.report)
    for label, path in sorted(result.files.items()):
        print(f"{label:>8}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
