"""``farm toolkit --cuda X.Y --prefix DIR``: a CUDA_HOME assembled from NVIDIA's PyPI wheels.

Prints the ``CUDA_HOME`` on stdout (``--json``: the whole toolkit), progress on stderr, so
``export CUDA_HOME=$(farm toolkit --cuda 13.0 --prefix .cache/toolkit/13.0)`` works.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from farm.errors import UsageError
from farm.toolkit.assemble import TOOLKITS, ensure_toolkit


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuda", required=True, metavar="X.Y", help=f"CUDA line ({', '.join(TOOLKITS)})")
    parser.add_argument("--prefix", required=True, type=Path, metavar="DIR",
                        help="where to assemble it (cached: a second call returns at once)")
    parser.add_argument("--extra", action="append", default=[], metavar="REQ",
                        help="another pinned NVIDIA wheel to add, e.g. nvidia-cublas==13.0.0.19 (repeatable)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    for req in args.extra:
        if "==" not in req:  # a toolkit never floats: its cache key is its pins
            raise UsageError(f"--extra {req!r} is not a pinned wheel", hint="e.g. --extra nvidia-cublas==13.0.0.19")
    toolkit = ensure_toolkit(
        args.cuda, args.prefix, extra=tuple(args.extra),
        progress=lambda msg: print(f"farm toolkit: {msg}", file=sys.stderr, flush=True),
    )
    if args.json:
        print(json.dumps(toolkit.to_json(), indent=2))
    else:
        print(toolkit.cuda_home)
    return 0
