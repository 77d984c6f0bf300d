"""``farm toolkit --cuda X.Y [--prefix DIR]``: a verified CUDA_HOME for one CUDA line and platform.

The release, the source (NVIDIA's redistributable archives or its PyPI wheels) and the components
are pinned per line in ``_defaults.yml`` (``toolkit:``); the flags override them. Prints the
``CUDA_HOME`` on stdout (``--json``: the whole toolkit), progress on stderr, so
``export CUDA_HOME=$(farm toolkit --cuda 12.8)`` works (the toolkit ``farm build`` uses).
``--dry-run`` prints what would be assembled (manifest URL, release, components) and touches
neither the network nor the disk.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from farm.load.defaults import load_defaults
from farm.load.recipes import load_config
from farm.model.config import DEFAULTS_FILE
from farm.progress import reporter
from farm.toolkit.assemble import ensure_toolkit, toolkit_prefix
from farm.toolkit.request import PLATFORMS, REDIST_URL_ENV, SOURCES, platform_name, request_for


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuda", required=True, metavar="X.Y", help="the CUDA line, e.g. 12.8")
    parser.add_argument("--prefix", type=Path, metavar="DIR",
                        help="where to assemble it (cached: a second call returns at once); default: the cache "
                             "`farm build` uses, ROOT/.cache/toolkit/<line>/<source>-<release>-<platform>-<key>")
    parser.add_argument("--source", choices=SOURCES, help="redist (NVIDIA's archives) or pypi; default: the line's pin")
    parser.add_argument("--release", metavar="X.Y.Z", help="NVIDIA's release (redistrib_X.Y.Z.json); default: the pin")
    parser.add_argument("--redist-url", metavar="URL",
                        help=f"the redist root (default: ${REDIST_URL_ENV}, else _defaults.yml's redist_url)")
    parser.add_argument("--platform", default="linux-x86_64", metavar="P",
                        help=f"one of {', '.join(PLATFORMS)} (default linux-x86_64)")
    parser.add_argument("--component", action="append", default=[], metavar="NAME",
                        help="another component to add, as the manifest names it (e.g. libcublas; repeatable)")
    parser.add_argument("--torch", action="store_true", help="add the components torch's headers need")
    parser.add_argument("--package", metavar="PKG",
                        help="add the components the recipe's build.extra_cuda_components names: the exact "
                             "toolkit `farm build` assembles for the package's cells (and its cache key)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be assembled; no network, no disk")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    platform = platform_name(args.platform)  # an unknown platform is bad input (exit 2) before anything else
    defaults = load_defaults(args.root / DEFAULTS_FILE)
    extra = tuple(args.component)
    if args.package:
        recipe = load_config(args.root, packages=[args.package]).recipe(args.package)
        extra += tuple(c for c in recipe.build.extra_cuda_components if c not in extra)
    request = request_for(
        defaults.toolkit, args.cuda, torch=args.torch, extra=extra, source=args.source,
        release=args.release, platform=platform, redist_url=args.redist_url, env=os.environ,
    )
    if args.dry_run:
        plan = {**request.to_json(), "key": request.key(), "dry_run": True}
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            where = plan["manifest_url"] or ", ".join(request.pypi)
            print(f"CUDA {request.cuda}: {request.source} {request.release} ({request.platform}) from {where}")
            print(f"components: {', '.join(request.components)}")
        return 0
    # Without --prefix: the very toolkit `farm build` assembles and reuses for this request.
    prefix = args.prefix or toolkit_prefix((args.root / ".cache" / "toolkit").absolute(), request)
    toolkit = ensure_toolkit(
        request, prefix,
        progress=reporter("farm toolkit", json=args.json),
    )
    if args.json:
        print(json.dumps(toolkit.to_json(), indent=2))
    else:
        print(toolkit.cuda_home)
    return 0
