"""``farm postbuild WHEEL... --out DIR``: assert, relabel + stamp, write ledger fragments.

Every wheel is asserted first; only when all pass are they stamped into DIR, each with its
fragment beside it. One failed assertion writes nothing at all (exit 1): a build job either
produces a complete, asserted set or nothing to upload.

``--spec build-spec.json`` (what ``farm build`` writes in a cell's build folder) asserts and stamps
by that spec alone: its cell, arch list, vendored rules, ``jit``, epoch and pins, whatever the
recipe says today. Without it, the wheel's cell is resolved from the config as the build would
have resolved it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from farm.builder.spec import read_spec
from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError
from farm.load.recipes import load_config
from farm.provenance.postbuild import (
    BuildContext,
    build_environment,
    check_wheel,
    context_from_config,
    stamp_asserted,
    wheel_cell,
)

if TYPE_CHECKING:
    from farm.builder.spec import BuildSpec


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL", help="wheels the build produced")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where stamped wheels go")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the farm repository (default: .)")
    parser.add_argument("--package", help="the recipe (default: the one whose dist is the wheel's)")
    parser.add_argument("--cuda", metavar="X.Y", help="the CUDA line (default: CUDA_HOME's nvcc)")
    parser.add_argument("--torch", metavar="M.m", help="the torch minor (default: the installed torch)")
    parser.add_argument("--cuda-home", type=Path, default=None,
                        help="the toolkit the build used (default: $CUDA_HOME)")
    parser.add_argument("--builder", default=None, help="the builder that made the wheels (cibuildwheel, native)")
    parser.add_argument("--fragments", type=Path, default=None, metavar="DIR",
                        help="where ledger fragments go (default: beside the stamped wheels)")
    parser.add_argument("--cuobjdump", type=Path, default=None, help="the cuobjdump to use (default: found)")
    parser.add_argument("--spec", type=Path, default=None, metavar="FILE",
                        help="the build-spec.json farm build wrote for these wheels: assert the arch list that "
                             "build was given (default: the config's for the wheel's cell)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _spec(args: argparse.Namespace) -> BuildSpec | None:
    """``--spec``, read and checked against the cell options given with it."""
    if args.spec is None:
        return None
    spec = read_spec(args.spec)
    for flag, given, own in (("--package", args.package, spec.cell.package), ("--cuda", args.cuda, spec.cell.cuda),
                             ("--torch", args.torch, spec.cell.torch)):
        if given is not None and given != own:
            raise UsageError(f"{flag} {given} contradicts the build spec's cell {spec.cell.id}", where=str(args.spec),
                             hint=f"drop {flag}: the spec names the cell")
    return spec


def _context(args: argparse.Namespace, spec: BuildSpec, wheel: Path) -> BuildContext:
    """The wheel's context from its build spec: no configuration is read."""
    cell = wheel_cell(wheel, spec.cell)
    if cell != spec.cell:
        raise UsageError(f"{wheel.name} is a wheel of cell {cell.id}, the build spec is for {spec.cell.id}",
                         where=str(args.spec), hint="pass the build-spec.json of the build that made the wheel")
    return spec.context(**build_environment(spec.cell, cuda_home=args.cuda_home, builder=args.builder))


def run(args: argparse.Namespace) -> int:
    spec = _spec(args)
    config = load_config(args.root) if spec is None else None
    checked = []
    for wheel in args.wheels:
        if spec is not None:
            context, dist = _context(args, spec, wheel), spec.dist
        else:
            assert config is not None
            context, recipe = context_from_config(config, wheel, package=args.package, cuda=args.cuda,
                                                  torch=args.torch, cuda_home=args.cuda_home, builder=args.builder)
            dist = recipe.dist
        report = check_wheel(wheel, context, dist=dist, cuobjdump=args.cuobjdump)
        checked.append((wheel, context, report))

    failed = [r for _, _, r in checked if not r.passed]
    results = [] if failed else [stamp_asserted(wheel, args.out, context, report, fragments_dir=args.fragments)
                                 for wheel, context, report in checked]

    if args.json:
        out = {
            "passed": not failed,
            "out": str(args.out),
            "wheels": [r.to_json() for r in results] if results else [
                {"wheel": str(w), "passed": r.passed, "assertion": r.to_json(), "stamped": None,
                 "sha256": None, "fragment": None} for w, _, r in checked],
        }
        print(json.dumps(out, indent=2))
    else:
        for _, _, report in checked:
            if not report.passed:
                print(report.render())
                print()
        for res in results:
            print(f"{res.wheel.name}: asserted, stamped {res.stamped.path if res.stamped else '-'}")
            print(f"  sha256 {res.stamped.sha256 if res.stamped else '-'}, fragment {res.fragment}")
        if failed:
            print(f"{len(failed)} of {len(checked)} wheel(s) failed the assertion; nothing was written to {args.out}",
                  file=sys.stderr)
    return EXIT_DEFECT if failed else EXIT_OK

