"""``farm lint PKG|PATH [--arch-list L]``: the arch-gate lint on a recipe's source or a source tree.

For a package, the source is fetched (cached by identity), the recipe's ``patch_script`` applied
to a copy, and linted once per distinct arch list its cells resolve to (or against
``--arch-list``), with the recipe's ``lint_ignore`` entries, build subdirectory, extension lists
and, for ``kernel_families: cmake``, each CUDA line's kernel families. For a directory,
``--arch-list`` is required. Exit 1 on any lint error.
"""

from __future__ import annotations

import argparse
import os

from farm.errors import UsageError
from farm.lint.memo import Memo


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", metavar="PKG|PATH", help="a package name from packages/, or a source directory")
    parser.add_argument("--arch-list", metavar="L", help="lint against this list (required for a PATH)")
    parser.add_argument("--build-subdir", metavar="DIR", help="for a PATH: the directory the build runs in")
    parser.add_argument("--cuda", metavar="X.Y",
                        help="the CUDA line to derive kernel families for (a CMake build that gives "
                             "kernel families their own targets, as vLLM's does)")
    parser.add_argument("--root", default=None, help="farm repository root (default: the current directory)")
    parser.add_argument("--cache-dir", help="sources and lint cache (default: ROOT/.cache)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _cache_dir(args: argparse.Namespace, root: str) -> str:
    if args.cache_dir:
        return str(args.cache_dir)
    if os.path.isdir(os.path.join(root, "packages")):
        return os.path.join(root, ".cache")
    # a directory linted outside a farm checkout: the user's cache, not a new folder in the cwd
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "farm")


def run(args: argparse.Namespace) -> int:
    root = str(args.root or os.getcwd())
    # A directory wins unless a recipe of that name exists (then write ./NAME for the directory).
    is_recipe = os.path.isfile(os.path.join(root, "packages", f"{args.what}.yml")) and "/" not in args.what
    is_dir = os.path.isdir(args.what) and not is_recipe
    if is_dir and not args.arch_list:
        raise UsageError(f"linting the directory {args.what} needs --arch-list",
                         hint="e.g. farm lint ./src --arch-list '8.0;8.6;9.0+PTX', or name a package")
    if not is_dir and ("/" in args.what or args.what.startswith(".")):
        raise UsageError(f"{args.what} is not a directory", hint="pass an existing source tree, or a package name")
    cache_dir = _cache_dir(args, root)
    memo = Memo(cache_dir, kind="directory" if is_dir else "package",
                what=os.path.abspath(args.what) if is_dir else args.what, typed=args.what, arch_list=args.arch_list,
                build_subdir=args.build_subdir, root=os.path.abspath(root), cuda=args.cuda)
    remembered = memo.answer()
    if remembered is None:
        # SPEED: the cold path (the rules, the recipes, the sources) is imported on a miss only. A
        # remembered answer is a few milliseconds of stat calls; importing it would cost five times
        # the whole warm command (benchmarks/bench_startup.py measures it).
        from farm.load.recipes import load_config  # noqa: PLC0415
        from farm.schedule import packagelint  # noqa: PLC0415

        remembered = packagelint.lint(args, root, cache_dir, memo, is_dir, load_config)
    code, text, as_json = remembered
    print(as_json if args.json else text)
    return code
