"""The lint in the matrix's loop: every package with cells to build is linted, once per distinct arch
list, on the source as built (I/O: fetches sources, reads and writes the lint cache).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import DISTRIBUTION
from farm.errors import SourceError, ToolError
from farm.model.arch import ArchList
from farm.model.config import FarmConfig, Recipe
from farm.provenance.ledger import LedgerIndex
from farm.schedule.matrix import Filters, Matrix, compute_matrix


@dataclass(frozen=True)
class LintOutcome:
    """One lint of one package's source against one of its resolved arch lists."""

    package: str
    arch_list: str
    report: Any  # farm.lint.api.LintReport: .passed, .errors, .stale_ignores, .render(), .to_json()

    @property
    def passed(self) -> bool:
        return bool(self.report.passed)


def lint_packages(config: FarmConfig, matrix: Matrix, cache_dir: Path) -> list[LintOutcome]:
    """Lint every package that has cells to build, once per distinct arch list (cached by the
    lint), on the source as it is built (after the recipe's patch scripts). A source that cannot
    be fetched is a :class:`SourceError` naming the package."""
    lint_as_built, fetch = _lint_path()
    outcomes = []
    for pkg in matrix.packages:
        if not pkg.to_build:
            continue
        recipe = config.recipe(pkg.package)
        try:
            tree = fetch(recipe.source, cache_dir, package=recipe.name, vendor=recipe.vendor)
        except SourceError as exc:
            msg = exc.message if recipe.name in exc.message else f"package {recipe.name!r}: {exc.message}"
            raise SourceError(msg, where=exc.where or recipe.display,
                              hint=(f"{exc.hint}; " if exc.hint else "")
                              + "the matrix lints the source of every package it schedules: restore network "
                                "access or fill the source cache, or run `farm matrix --no-lint` for the "
                                "matrix without the lint (it says so; CI always lints)") from None
        for archs, extensions, cuda, platform in _distinct_lints(recipe, pkg.lint_requests()):
            report = lint_as_built(config, recipe, tree, archs, cache_dir, extensions=extensions, cuda=cuda,
                                   platform=platform)
            outcomes.append(LintOutcome(recipe.name, archs.canonical(), report))
    return outcomes


def _distinct_lints(recipe: Recipe, requests: Iterable[tuple[ArchList, tuple[tuple[str, ArchList], ...], str, str]]
                    ) -> list[tuple[ArchList, tuple[tuple[str, ArchList], ...], str | None, str | None]]:
    """One lint per distinct request; the CUDA line counts only for a recipe with kernel families,
    the platform only for one that patches that platform's source of its own."""
    return list(dict.fromkeys(
        (archs, ext, cuda if recipe.kernel_families else None,
         platform if platform in recipe.build.platform_patch_script else None)
        for archs, ext, cuda, platform in requests))


def _lint_path() -> tuple[Any, Any]:
    """The lint as built and the source fetcher; a broken lint is an environment error.

    SPEED: imported only when the matrix lints. They bring the lint's rules and the source
    fetcher, which cost `farm matrix --no-lint` more than its own time
    (benchmarks/bench_startup.py measures it)."""
    try:
        from farm.builder.prepare import lint_as_built  # noqa: PLC0415
        from farm.source.fetch import fetch  # noqa: PLC0415
    except ImportError as exc:
        raise ToolError(f"the arch-gate lint cannot be loaded: {exc}",
                        hint=f"reinstall {DISTRIBUTION}; --no-lint skips the lint (and says so)") from None
    return lint_as_built, fetch


def lint_failures(outcomes: Iterable[LintOutcome]) -> Iterator[LintOutcome]:
    return (o for o in outcomes if not o.passed)


def confirm_stale_ignores(config: FarmConfig, outcomes: Sequence[LintOutcome], cache_dir: Path) -> list[LintOutcome]:
    """``outcomes`` with each report's ``stale_ignores`` narrowed to the entries that are stale
    under **every** arch list the package's cells need, not only the lists this run linted.

    A run filtered by --cuda (or one whose other cells are already built) lints a few of the
    package's lists; an ignore that matches nothing under them may still be needed under the
    others. Those lists are linted too (cached), only for packages with a candidate."""
    by_package: dict[str, list[LintOutcome]] = {}
    for o in outcomes:
        by_package.setdefault(o.package, []).append(o)
    confirmed: dict[str, tuple[Any, ...]] = {}
    for package, own in by_package.items():
        candidates = set.intersection(*(set(o.report.stale_ignores) for o in own))
        if candidates:
            recipe = config.recipe(package)
            linted = {o.arch_list for o in own}
            everything = compute_matrix(config, LedgerIndex.empty(), Filters(packages=(package,)), overwrite=True)
            missing = [r for r in _distinct_lints(recipe, everything.packages[0].lint_requests())
                       if r[0].canonical() not in linted]
            if missing:
                lint_as_built, fetch = _lint_path()
                tree = fetch(recipe.source, cache_dir, package=recipe.name, vendor=recipe.vendor)
                for archs, extensions, cuda, platform in missing:
                    report = lint_as_built(config, recipe, tree, archs, cache_dir, extensions=extensions, cuda=cuda,
                                           platform=platform)
                    candidates &= set(report.stale_ignores)
        confirmed[package] = tuple(sorted(candidates, key=lambda i: i.where))
    return [dataclasses.replace(o, report=dataclasses.replace(o.report, stale_ignores=confirmed[o.package]))
            for o in outcomes]


def stale_ignores(outcomes: Iterable[LintOutcome]) -> list[tuple[str, Any]]:
    """(package, ignore) for each lint_ignore that is stale under every arch list its package was
    linted with: one that matches under some list (a CUDA line's flags) is not stale."""
    per_package: dict[str, list[set[Any]]] = {}
    for o in outcomes:
        per_package.setdefault(o.package, []).append(set(o.report.stale_ignores))
    return [(package, ignore) for package, sets in per_package.items()
            for ignore in sorted(set.intersection(*sets), key=lambda i: i.where)]
