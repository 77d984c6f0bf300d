"""``farm matrix [PKG...] [filters] [--overwrite] [--github-output]``: the cells still to build."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from farm.errors import UsageError
from farm.model.config import load_config
from farm.provenance.ledger import LedgerIndex
from farm.schedule.matrix import (
    SUMMARY_COLUMNS,
    Filters,
    LintOutcome,
    Matrix,
    compute_matrix,
    github_outputs,
    lint_failures,
    lint_packages,
    shards,
    stale_advice,
    stale_ignores,
    step_summary,
    write_github_output,
)
from farm.table import format_table

NO_LINT_NOTE = (
    "LINT SKIPPED (--no-lint): arch gates, FP8 code and build-file arch overrides of the "
    "scheduled packages were NOT checked"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("packages", nargs="*", metavar="PKG", help="only these packages (default: all)")
    parser.add_argument("--cuda", action="append", metavar="V", help="only this CUDA line, e.g. 12.8 (repeatable)")
    parser.add_argument("--torch", action="append", metavar="V", help="only this torch minor, e.g. 2.8 (repeatable)")
    parser.add_argument("--python", action="append", metavar="V", help="only this Python, e.g. 3.11 (repeatable)")
    parser.add_argument("--platform", action="append", metavar="P",
                        help="only this platform: linux_x86_64, linux_aarch64, win_amd64 (repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="ignore the ledger: schedule built cells again")
    parser.add_argument("--no-lint", action="store_true", help="skip the arch-gate lint (said loudly in the output)")
    parser.add_argument("--github-output", action="store_true",
                        help="write shards of <= 256 cells to $GITHUB_OUTPUT and a table to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--max-shards", type=int, metavar="N",
                        help="the number of shard jobs the workflow has; more shards is an error")
    parser.add_argument("--root", type=Path, default=Path("."), help="the farm repository (default: .)")
    parser.add_argument("--ledger", type=Path, help="the ledger (default: ROOT/ledger.jsonl)")
    parser.add_argument("--cache-dir", type=Path, help="sources and lint cache (default: ROOT/.cache)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def matrix_json(matrix: Matrix, lint: dict[str, Any]) -> dict[str, Any]:
    cells = matrix.cells
    return {
        "filters": matrix.filters.as_json(),
        "overwrite": matrix.overwrite,
        "build_epoch": matrix.defaults_epoch,
        "lint": lint,
        "totals": matrix.totals(),
        "shard_count": len(shards(cells)),
        "packages": [
            {"package": p.package, "version": p.version, "build_epoch": p.epoch, **p.counts(),
             "stale_cells": [s.as_json() for s in p.stale]}
            for p in matrix.packages
        ],
        "cells": [c.as_json() for c in cells],
    }


def render(matrix: Matrix) -> str:
    headers = ("package", "version", "epoch", *(c.replace("_", " ") for c in SUMMARY_COLUMNS))
    rows: list[tuple[object, ...]] = []
    for p in matrix.packages:
        counts = p.counts()
        rows.append((p.package, p.version, p.epoch, *(counts[c] for c in SUMMARY_COLUMNS)))
    totals = matrix.totals()
    rows.append(("total", "", "", *(totals[c] for c in SUMMARY_COLUMNS)))
    return format_table(headers, rows)


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    config = load_config(root, packages=args.packages or None)
    filters = Filters.parse(config, packages=args.packages, cuda=args.cuda, torch=args.torch,
                            python=args.python, platform=args.platform)
    if args.max_shards is not None and args.max_shards < 1:
        raise UsageError(f"--max-shards must be >= 1, got {args.max_shards}",
                         hint="the number of shard jobs in the workflow (build-0 ... build-N)")
    if args.github_output and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output needs $GITHUB_OUTPUT (GitHub Actions sets it)",
                         hint="run it in a workflow step, or set GITHUB_OUTPUT to a file")
    ledger = LedgerIndex.empty() if args.overwrite else LedgerIndex.load(args.ledger or config.ledger_path)
    matrix = compute_matrix(config, ledger, filters, overwrite=args.overwrite)
    if args.github_output:
        github_outputs(matrix, max_shards=args.max_shards)  # refuse an oversized matrix before anything

    outcomes: list[LintOutcome] = []
    failed: list[LintOutcome] = []
    if args.no_lint:
        lint_note = NO_LINT_NOTE
        lint: dict[str, Any] = {"ran": False, "note": NO_LINT_NOTE, "results": []}
    else:
        outcomes = lint_packages(config, matrix, args.cache_dir or config.root / ".cache")
        failed = list(lint_failures(outcomes))
        linted = {o.package for o in outcomes}
        lint_note = (f"lint: FAILED for {', '.join(sorted({o.package for o in failed}))}" if failed
                     else f"lint: passed ({len(linted)} package(s), {len(outcomes)} arch list(s))")
        lint = {"ran": True, "note": lint_note, "passed": not failed,
                "results": [{"package": o.package, "arch_list": o.arch_list, **o.report.to_json()}
                            for o in outcomes]}

    if args.json:
        print(json.dumps(matrix_json(matrix, lint), separators=(",", ":")))
        if args.no_lint:
            print(f"farm matrix: {NO_LINT_NOTE}", file=sys.stderr)
    else:
        if args.no_lint:
            print(f"!! {NO_LINT_NOTE} !!")
        if args.overwrite:
            print("!! --overwrite: the ledger was ignored; built wheels are scheduled again !!")
        print(render(matrix))
        for line in stale_advice(matrix):
            print(line)
        cells = matrix.cells
        print(f"{len(cells)} cell(s) to build in {len(shards(cells))} shard(s) of <= 256")
        if not args.no_lint:
            print(lint_note)
        for o in failed:
            print(f"\n{o.package} with arch list {o.arch_list}:")
            print(o.report.render())
        for package, ignore in stale_ignores(outcomes):
            print(f"{ignore.where}: lint_ignore {ignore.rule} {ignore.path!r} of {package} matches nothing "
                  "under any of its arch lists: remove it")

    summary = os.environ.get("GITHUB_STEP_SUMMARY") if args.github_output else None
    if failed:
        print(f"farm matrix: {lint_note}; fix the findings (declare the arch, or a reviewed lint_ignore)",
              file=sys.stderr)
        if summary:  # the run page says why no build ran; no matrix is output
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(step_summary(matrix, f"**{lint_note}**: no cells were scheduled"))
        return 1
    if args.github_output:
        write_github_output(matrix, Path(os.environ["GITHUB_OUTPUT"]), Path(summary) if summary else None,
                            f"**{lint_note}**" if args.no_lint else lint_note, max_shards=args.max_shards)
    return 0
