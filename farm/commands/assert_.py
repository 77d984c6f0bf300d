"""``farm assert WHEEL... (--arch-list L | --cell | --spec FILE)``: the post-build assertion alone, no stamping.

``--arch-list`` gives the expected list directly (``--ext`` adds per-extension lists); ``--cell``
resolves it from the farm configuration the way postbuild does: the recipe whose dist is the
wheel's, the CUDA line and torch minor the wheel itself records (its ``_build_info.json`` or its
``+cu130`` / ``+cu128torch2.8`` label), else ``--cuda`` or ``CUDA_HOME`` and ``--torch`` or the
installed torch, and the recipe's per-extension map. ``--spec`` takes what the build spec
``farm build`` wrote decided (its kernel families included), as ``farm postbuild --spec`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from farm.binary.archrule import Expected
from farm.binary.assertion import assert_wheel
from farm.builder.spec import read_spec
from farm.errors import EXIT_DEFECT, EXIT_OK, FarmError, UsageError
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.provenance.postbuild import context_from_config


def _ext_rule(text: str) -> tuple[str, ArchList]:
    glob, sep, archs = text.partition("=")
    if not sep or not glob:
        raise argparse.ArgumentTypeError(f"{text!r}: write GLOB=ARCH_LIST, e.g. '*_sm90*.so=9.0a'")
    if archs.strip().lower() in ("", "none"):
        return glob, ArchList(frozenset())  # host-only by design
    return glob, ArchList.parse(archs, where=f"--ext {glob}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--arch-list", metavar="L", help="the expected arch list, e.g. '7.5;8.0;8.6;9.0+PTX'")
    what.add_argument("--cell", action="store_true",
                      help="expect what the farm configuration resolves for each wheel's cell")
    what.add_argument("--spec", type=Path, metavar="FILE",
                      help="expect what the build spec (build-spec.json, written by farm build) decided, "
                           "kernel families included")
    parser.add_argument("--ext", action="append", type=_ext_rule, default=[], metavar="GLOB=L",
                        help="an extension's own list (fnmatch on archive path or basename; 'none' = host-only); "
                             "repeatable, first match wins")
    parser.add_argument("--allow-no-extensions", action="store_true",
                        help="the package is JIT-only or pure: a wheel without extensions passes")
    parser.add_argument("--host-only-ok", action="store_true",
                        help="not a CUDA package: extensions without device code pass")
    cell = parser.add_argument_group("--cell options")
    cell.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    cell.add_argument("--package", help="the recipe (default: the one whose dist is the wheel's)")
    cell.add_argument("--cuda", metavar="X.Y", help="the CUDA line the device code must come from (with --cell, "
                                                    "default: the wheel's label, else CUDA_HOME's nvcc)")
    cell.add_argument("--torch", metavar="M.m", help="the torch minor (default: the installed torch)")
    cell.add_argument("--cuda-home", type=Path, default=None, help="the toolkit the build used (default: CUDA_HOME)")
    parser.add_argument("--cuobjdump", type=Path, metavar="PATH", help="this cuobjdump instead of searching for one")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _expected_from_args(args: argparse.Namespace) -> Expected:
    return Expected(
        default=ArchList.parse(args.arch_list, where="--arch-list"),
        per_extension=tuple(args.ext),
        allow_no_extensions=args.allow_no_extensions,
        cuda_package=not args.host_only_ok,
        default_from="--arch-list",
        cuda=args.cuda,  # given: the toolkit the device code records must be this line
    )


def _expected_from_cell(args: argparse.Namespace, wheel: Path) -> Expected:
    context, _ = context_from_config(load_config(args.root), wheel, package=args.package, cuda=args.cuda,
                                     torch=args.torch, cuda_home=args.cuda_home)
    expected = context.expected
    if args.allow_no_extensions or args.host_only_ok:
        expected = replace(expected, allow_no_extensions=expected.allow_no_extensions or args.allow_no_extensions,
                           cuda_package=expected.cuda_package and not args.host_only_ok)
    return expected


def run(args: argparse.Namespace) -> int:
    for wheel in args.wheels:
        if wheel.suffix != ".whl":
            raise UsageError(f"{wheel} is not a wheel (.whl)", hint="`farm inspect` reads single .so files")
    if args.cell and args.ext:
        raise UsageError("--ext goes with --arch-list; with --cell the recipe's extension map applies",
                         hint="put per-extension lists in the recipe, or use --arch-list")
    if args.spec is not None and args.ext:
        raise UsageError("--ext goes with --arch-list; with --spec the spec's extension lists apply")
    if args.spec is not None:
        fixed: Expected | None = read_spec(args.spec).expected
    else:
        fixed = None if args.cell else _expected_from_args(args)
    reports = []
    errors: list[tuple[Path, FarmError]] = []  # a corrupt wheel does not hide the verdicts of the others
    for wheel in args.wheels:
        try:
            expected = fixed or _expected_from_cell(args, wheel)
            reports.append(assert_wheel(wheel, expected, cuobjdump=args.cuobjdump))
        except FarmError as exc:
            if len(args.wheels) == 1:
                raise
            errors.append((wheel, exc))
    if args.json:
        print(json.dumps({
            "passed": not errors and all(r.passed for r in reports),
            "wheels": [r.to_json() for r in reports],
            "errors": [{"wheel": str(w), "error": str(e), "exit_code": e.exit_code} for w, e in errors],
        }, indent=2))
    else:
        print("\n\n".join(r.render() for r in reports))
    for _, error in errors:
        print(f"farm assert: error: {error}", file=sys.stderr)
    if errors:  # the worst: an environment failure (3) over bad input (2)
        return max(e.exit_code for _, e in errors)
    return EXIT_OK if all(r.passed for r in reports) else EXIT_DEFECT
