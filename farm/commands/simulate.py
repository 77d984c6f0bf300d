"""``farm simulate --runners N [--epochs K] [--warm] [--json]``: an epoch bump of the repository's
grid drained on a simulated GitHub (farm/simulate/drain.py): days and runner-hours, the work redone,
the cells rebuilt and lost, the REST traffic, the ledger's largest file, and the goals.

Exit 0 when the goals this scenario can answer are met, 1 when one is missed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError
from farm.jsonread import JsonInputError, load_file
from farm.load.recipes import load_config
from farm.provenance.ledger import LedgerIndex
from farm.schedule.cacheplan import DATA as SIZES
from farm.schedule.cacheplan import CacheSizes
from farm.schedule.matrix import Filters, compute_matrix
from farm.schedule.recipetimes import RecipeTimes
from farm.simulate.drain import BACKENDS, Scenario, simulate
from farm.simulate.inputs import DATA as INPUTS
from farm.simulate.inputs import Inputs
from farm.simulate.summary import goals, render, to_json
from farm.simulate.workflow import read_workflows


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runners", type=int, required=True, metavar="N",
                        help="concurrent jobs (GitHub's Free plan 20, Pro 40, Team 60)")
    parser.add_argument("--epochs", type=int, default=1, metavar="K", help="epoch bumps one after another (default 1)")
    parser.add_argument("--warm", action="store_true",
                        help="bumps after a cold one, the compiler cache holding what it compiled")
    parser.add_argument("--compile-cache", choices=BACKENDS, default="s3",
                        help="where CI's compiler cache lives: an S3 store (default) or the Actions cache")
    parser.add_argument("packages", nargs="*", metavar="PKG", help="only these packages (default: the whole grid)")
    parser.add_argument("--horizon-days", type=float, default=60.0, metavar="D",
                        help="a bump not drained after D days leaves its queue as lost cells (default 60)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="replace one input of the table (e.g. queue_s=120); repeatable")
    parser.add_argument("--runner-factor", type=float, metavar="F",
                        help="a hosted runner's seconds for one of the reference host's compile (default: "
                             "farm/schedule/recipe_times.json's)")
    parser.add_argument("--inputs", type=Path, default=INPUTS, help="the inputs table (default: farm's own)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--json", action="store_true", help="one JSON object")


def _values(pairs: list[str]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--set {pair!r}: NAME=NUMBER", hint="e.g. --set queue_s=120") from None
    return out


def run(args: argparse.Namespace) -> int:
    if args.runners < 1 or args.epochs < 1 or args.horizon_days <= 0 or (args.runner_factor is not None
                                                                        and args.runner_factor <= 0):
        raise UsageError("--runners and --epochs must be >= 1, --horizon-days and --runner-factor > 0")
    root = args.root.resolve()
    config = load_config(root, packages=args.packages or None)
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, packages=args.packages))
    inputs = Inputs.load(args.inputs).with_values(**_values(args.set))
    try:
        sizes = CacheSizes.from_json(load_file(SIZES), str(SIZES))
    except (OSError, JsonInputError) as exc:
        raise UsageError(f"{SIZES}: cannot read the size table ({exc})") from None
    scenario = Scenario(args.runners, args.epochs, args.warm, args.compile_cache, args.horizon_days)
    times = RecipeTimes.load()
    if args.runner_factor is not None:
        times = times.with_runner_factor(args.runner_factor)
    drain = simulate(config, matrix, inputs, times, read_workflows(root), sizes, scenario)
    print(json.dumps(to_json(drain)) if args.json else render(drain))
    return EXIT_DEFECT if any(g.met is False for g in goals(drain)) else EXIT_OK
