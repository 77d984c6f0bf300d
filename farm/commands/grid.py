"""``farm grid [--cuda V] [--index URL] [--json]``: the grid against PyTorch's published wheels.

Reads the ``torch/`` page of each CUDA line's PyTorch index (``torch_index`` in ``_defaults.yml``,
or ``--index URL`` with ``{cu}`` for the line, e.g. a mirror in PyTorch's layout) and prints the
grid rows and phantoms ``_defaults.yml`` lacks, ready to paste. Exit 0 when the grid has everything
upstream ships, 1 when it lags (so a scheduled CI job can open a pull request), 3 when an index
cannot be read or holds no torch wheel of the line (reading nothing is never "complete"). An index
in PyPI's shape (unlabelled wheels) is read too: each build's CUDA line comes from the CUDA runtime
its metadata requires.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError, did_you_mean
from farm.load.defaults import load_defaults
from farm.model.config import DEFAULTS_FILE, url_problem
from farm.schedule.grid import indexes_for, propose, read_index


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuda", action="append", metavar="V", help="only this CUDA line (repeatable)")
    parser.add_argument("--index", metavar="URL",
                        help="read this index instead of the lines' torch_index ({cu} becomes cu130)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.index is not None and url_problem(args.index.replace("{cu}", "cu130")):
        raise UsageError(f"--index {url_problem(args.index.replace('{cu}', 'cu130'))}",
                         hint="e.g. --index https://download.pytorch.org/whl/{cu} or https://pypi.org/simple/")
    defaults = load_defaults(args.root / DEFAULTS_FILE)
    lines = list(args.cuda or defaults.cuda_lines)
    for line in lines:
        if line not in defaults.cuda_lines:
            raise UsageError(f"unknown CUDA line {line!r}",
                             hint=did_you_mean(line, defaults.cuda_lines) or f"lines: {', '.join(defaults.cuda_lines)}")
    shipped = []
    notes = []
    read = []
    for cuda, index in indexes_for(defaults, lines, args.index).items():
        if index is None:
            notes.append(f"# CUDA {cuda}: torch_index is 'pip' (no per-line page to read); pass --index URL")
            continue
        print(f"farm grid: reading CUDA {cuda}'s torch wheels from {index}", file=sys.stderr)
        shipped += read_index(index, cuda)
        read.append(cuda)
    if not read:  # nothing read is not "complete"
        raise UsageError(f"no index to read for CUDA {', '.join(lines)}: their torch_index is 'pip'",
                         hint="pass --index URL (PyTorch's per-line index with {cu}, or a PEP 658 index like PyPI's)")
    found = replace(propose(defaults, shipped, read), notes=tuple(notes))
    if args.json:
        print(json.dumps({**found.to_json(), "cuda_lines": read, "wheels": len(shipped)}, indent=2))
    else:
        print(found.render())
    return EXIT_DEFECT if found else EXIT_OK
