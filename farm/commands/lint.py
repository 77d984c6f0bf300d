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

from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError

# The rules, the recipes, the sources, json and pathlib are imported past the remembered answer
# (farm.lint.memo): a warm run reads one small file and stats what the answer was made from.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from farm.lint import LintReport
    from farm.lint.memo import Memo
    from farm.model.arch import ArchList
    from farm.model.config import FarmConfig, Recipe


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


Request = tuple["ArchList", tuple[tuple[str, "ArchList"], ...], "str | None"]


def _package_lists(config: FarmConfig, recipe: Recipe) -> list[Request]:
    """Distinct arch lists the package's cells resolve to, with the extensions' own lists of the
    same cells and, for a package with kernel families, the CUDA line (the families depend on
    it), in first-seen order."""
    from farm.model.cells import declared_cells, recipe_excludes
    from farm.model.spec import arch_request

    lists: dict[tuple[str, tuple[tuple[str, str], ...], str | None], Request] = {}
    for cell in declared_cells(config.defaults, recipe):
        if recipe_excludes(recipe, cell):
            continue
        request = arch_request(config, recipe, cell)
        if request is not None:
            cuda = cell.cuda if recipe.kernel_families else None
            key = (request.archs.canonical(), tuple((g, a.canonical()) for g, a in request.extensions), cuda)
            lists.setdefault(key, (request.archs, request.extensions, cuda))
    return list(lists.values())


def _cache_dir(args: argparse.Namespace, root: str) -> str:
    if args.cache_dir:
        return str(args.cache_dir)
    if os.path.isdir(os.path.join(root, "packages")):
        return os.path.join(root, ".cache")
    # a directory linted outside a farm checkout: the user's cache, not a new folder in the cwd
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "farm")


def run(args: argparse.Namespace) -> int:
    from farm.lint.memo import Memo

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
    if remembered is not None:
        code, text, as_json = remembered
        print(as_json if args.json else text)
        return code
    return _lint(args, root, cache_dir, memo, is_dir)


def _lint(args: argparse.Namespace, root: str, cache_dir: str, memo: Memo, is_dir: bool) -> int:
    """The cold path: lint, and remember the answer by what it was made from."""
    import json
    from pathlib import Path

    import farm

    memo.depend(os.path.dirname(farm.__file__), only=".py")  # farm's own code, rules version included
    if is_dir:
        reports = _lint_directory(args, Path(args.what), memo)
    else:
        memo.depend(os.path.join(root, "_defaults.yml"))
        memo.depend(os.path.join(root, "packages"))
        reports = _lint_package(args, Path(root), Path(cache_dir), memo)
    failed = any(not r.passed for _, r in reports)
    code = EXIT_DEFECT if failed else EXIT_OK
    text = "\n\n".join(r.render() for _, r in reports)
    as_json = json.dumps({"passed": not failed, "reports": [r.to_json() | {"target": name} for name, r in reports]},
                         indent=2)
    memo.remember(code, text, as_json)
    print(as_json if args.json else text)
    return code


def _lint_directory(args: argparse.Namespace, target: Path, memo: Memo) -> list[tuple[str, LintReport]]:
    from farm.lint import lint_index
    from farm.lint.compiled import TreeIndex
    from farm.model.arch import ArchList

    archs = ArchList.parse(args.arch_list, where="--arch-list")
    index = TreeIndex(target)
    memo.depend_on(index.stamps)  # what the lint lists and reads, stamped as it goes
    return [(str(target), lint_index(index, archs, build_subdir=args.build_subdir, cuda=args.cuda))]


def _lint_package(args: argparse.Namespace, root: Path, cache_dir: Path, memo: Memo) -> list[tuple[str, LintReport]]:
    import dataclasses

    from farm.build.builders import lint_as_built
    from farm.model.arch import ArchList
    from farm.model.config import PathSource, load_config
    from farm.progress import reporter
    from farm.schedule.matrixlint import LintOutcome, stale_ignores
    from farm.source.fetch import fetch

    if args.build_subdir:
        raise UsageError("--build-subdir is for a PATH: a package's build subdir comes from its recipe",
                         hint=f"set build.subdir in packages/{args.what}.yml")
    config = load_config(root)
    recipe = config.recipe(args.what)
    if args.arch_list:
        lists: list[Request] = [(ArchList.parse(args.arch_list, where="--arch-list"), (), args.cuda)]
    else:
        lists = _package_lists(config, recipe)
        if not lists:
            raise UsageError(f"package {recipe.name!r} has no cell with an arch list to lint against",
                             hint="pass --arch-list, or check the recipe's only: restrictions")
    if isinstance(recipe.source, PathSource):
        memo.depend(recipe.source.path)  # a local tree: its files are the answer's input too
    say = reporter("farm lint", json=args.json)
    tree = fetch(recipe.source, cache_dir, package=recipe.name, progress=say)
    outcomes = []
    for archs, extensions, cuda in lists:
        say(f"{recipe.name}: linting {tree.root} against {archs.canonical()}"
            + "".join(f", {glob} against {own.canonical()}" for glob, own in extensions)
            + (f", kernel families for CUDA {cuda}" if cuda else ""))
        # the source as it is built (after the recipe's patch_script), as the matrix lints it
        outcomes.append(LintOutcome(recipe.name, archs.canonical(),
                                    lint_as_built(config, recipe, tree, archs, cache_dir, extensions=extensions,
                                                  cuda=cuda)))
    # An entry that matches under one list (a CUDA line's flags) is not stale under another.
    stale = tuple(ignore for _, ignore in stale_ignores(outcomes))
    return [(recipe.name, dataclasses.replace(o.report, stale_ignores=stale)) for o in outcomes]
