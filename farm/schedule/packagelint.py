"""The cold path of ``farm lint`` (:mod:`farm.commands.lint`): a package's source linted once per
distinct arch list its cells resolve to (as the matrix lints it, :mod:`farm.schedule.matrixlint`),
or a directory against one list, and the answer remembered by what it was made from
(:mod:`farm.lint.memo`). It lives in this stage, not in ``farm/lint/``, because it lints the
source as built (:func:`farm.builder.prepare.lint_as_built`) and over the package's cells."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import farm
from farm.builder.prepare import lint_as_built
from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError
from farm.lint.api import LintReport, lint_index
from farm.lint.compiled import TreeIndex
from farm.lint.memo import Memo
from farm.model.arch import ArchList
from farm.model.archrequest import arch_request
from farm.model.cells import declared_cells, recipe_excludes
from farm.model.config import FarmConfig, PathSource, Recipe
from farm.progress import reporter
from farm.schedule.matrixlint import LintOutcome, stale_ignores
from farm.source.fetch import fetch

Request = tuple["ArchList", tuple[tuple[str, "ArchList"], ...], "str | None", "str | None"]


def _package_lists(config: FarmConfig, recipe: Recipe) -> list[Request]:
    """Distinct arch lists the package's cells resolve to, with the extensions' own lists of the
    same cells, for a package with kernel families the CUDA line (the families depend on it), and
    the platform of cells that have a ``platform_patch_script`` (their source as built differs),
    in first-seen order."""
    lists: dict[tuple[str, tuple[tuple[str, str], ...], str | None, str | None], Request] = {}
    for cell in declared_cells(config.defaults, recipe):
        if recipe_excludes(recipe, cell):
            continue
        request = arch_request(config, recipe, cell)
        if request is not None:
            cuda = cell.cuda if recipe.kernel_families else None
            platform = cell.platform if cell.platform in recipe.build.platform_patch_script else None
            key = (request.archs.canonical(), tuple((g, a.canonical()) for g, a in request.extensions), cuda,
                   platform)
            lists.setdefault(key, (request.archs, request.extensions, cuda, platform))
    return list(lists.values())


def lint(args: argparse.Namespace, root: str, cache_dir: str, memo: Memo, is_dir: bool,
         load_config: Callable[[Path], FarmConfig]) -> tuple[int, str, str]:
    """The cold path: lint, and remember the answer by what it was made from; the exit code, the
    text and the JSON answer. ``load_config``: the reader of a farm root's configuration (its
    stage is below this one)."""
    memo.depend(os.path.dirname(farm.__file__), only=".py")  # farm's own code, rules version included
    if is_dir:
        reports = _lint_directory(args, Path(args.what), memo)
    else:
        memo.depend(os.path.join(root, "_defaults.yml"))
        memo.depend(os.path.join(root, "packages"))
        reports = _lint_package(args, load_config, Path(root), Path(cache_dir), memo)
    failed = any(not r.passed for _, r in reports)
    code = EXIT_DEFECT if failed else EXIT_OK
    text = "\n\n".join(r.render() for _, r in reports)
    as_json = json.dumps({"passed": not failed, "reports": [r.to_json() | {"target": name} for name, r in reports]},
                         indent=2)
    memo.remember(code, text, as_json)
    return code, text, as_json


def _lint_directory(args: argparse.Namespace, target: Path, memo: Memo) -> list[tuple[str, LintReport]]:
    archs = ArchList.parse(args.arch_list, where="--arch-list")
    index = TreeIndex(target)
    memo.depend_on(index.stamps)  # what the lint lists and reads, stamped as it goes
    return [(str(target), lint_index(index, archs, build_subdir=args.build_subdir, cuda=args.cuda))]


def _lint_package(args: argparse.Namespace, load_config: Callable[[Path], FarmConfig], root: Path, cache_dir: Path,
                  memo: Memo) -> list[tuple[str, LintReport]]:
    if args.build_subdir:
        raise UsageError("--build-subdir is for a PATH: a package's build subdir comes from its recipe",
                         hint=f"set build.subdir in packages/{args.what}.yml")
    config = load_config(root)
    recipe = config.recipe(args.what)
    if args.arch_list:
        lists: list[Request] = [(ArchList.parse(args.arch_list, where="--arch-list"), (), args.cuda, None)]
    else:
        lists = _package_lists(config, recipe)
        if not lists:
            raise UsageError(f"package {recipe.name!r} has no cell with an arch list to lint against",
                             hint="pass --arch-list, or check the recipe's only: restrictions")
    if isinstance(recipe.source, PathSource):
        memo.depend(recipe.source.path)  # a local tree: its files are the answer's input too
    say = reporter("farm lint", json=args.json)
    tree = fetch(recipe.source, cache_dir, package=recipe.name, progress=say, vendor=recipe.vendor)
    outcomes = []
    for archs, extensions, cuda, platform in lists:
        say(f"{recipe.name}: linting {tree.root} against {archs.canonical()}"
            + "".join(f", {glob} against {own.canonical()}" for glob, own in extensions)
            + (f", kernel families for CUDA {cuda}" if cuda else "")
            + (f", as patched for {platform}" if platform else ""))
        # the source as it is built (after the recipe's patch scripts), as the matrix lints it
        outcomes.append(LintOutcome(recipe.name, archs.canonical(),
                                    lint_as_built(config, recipe, tree, archs, cache_dir, extensions=extensions,
                                                  cuda=cuda, platform=platform)))
    # An entry that matches under one list (a CUDA line's flags) is not stale under another.
    stale = tuple(ignore for _, ignore in stale_ignores(outcomes))
    return [(recipe.name, dataclasses.replace(o.report, stale_ignores=stale)) for o in outcomes]
