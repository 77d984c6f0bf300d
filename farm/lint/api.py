"""The arch-gate lint's entry points: sources checked against the declared arch list at matrix time.

- :func:`lint_tree`: lint a directory against an arch list.
- :func:`lint_source`: fetch a recipe source (:mod:`farm.source.fetch`) and lint it.
- :func:`lint_cached`: the same for a fetched :class:`~farm.source.fetch.SourceTree`, cached by
  (source identity, lint version, arch list, ignores), as the matrix calls it.

What counts as compiled is decided in :mod:`farm.lint.compiled`; the rules are in
:mod:`farm.lint.rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from farm.errors import SourceError
from farm.lint import cache
from farm.lint.compiled import BuildScope, TreeIndex, build_scope
from farm.lint.families import Configured
from farm.lint.report import (
    LibrarySummary,
    LintFinding,
    LintReport,
    LintRule,
    LintSeverity,
    apply_ignores,
)
from farm.lint.rules import check, declared_families, kernel_families
from farm.lint.version import LINT_VERSION
from farm.model.arch import ArchList
from farm.model.config import GitSource, KernelFamily, LintIgnore, PathSource, SdistSource, VendorSource
from farm.model.devices import products
from farm.model.driver import claimed_devices, pick_image
from farm.source.fetch import SourceTree, fetch

__all__ = [
    "LINT_VERSION",
    "BuildScope",
    "LibrarySummary",
    "LintFinding",
    "LintReport",
    "LintRule",
    "LintSeverity",
    "lint_cached",
    "lint_index",
    "lint_source",
    "lint_tree",
]


def lint_tree(root: Path, archs: ArchList, ignores: Sequence[LintIgnore] = (), *,
              build_subdir: str | None = None, extensions: Sequence[tuple[str, ArchList]] = (),
              cuda: str | None = None, families: Sequence[KernelFamily] = ()) -> LintReport:
    """Lint the source tree at ``root`` against ``archs`` (and each extension matching a glob of
    ``extensions`` against its own list). ``cuda``: the cell's CUDA line, given for a package whose
    CMake project compiles kernel families for their own targets (``kernel_families: cmake``):
    they are derived for that line and each judged against its targets; ``families``: the
    recipe's declared families instead (resolved for ``archs`` and ``cuda``)."""
    root = Path(root)
    if not root.is_dir():
        raise SourceError(f"{root} is not a directory", hint="pass a source tree or a package name")
    return lint_index(TreeIndex(root), archs, ignores, build_subdir=build_subdir, extensions=extensions, cuda=cuda,
                      families=families)


def lint_index(index: TreeIndex, archs: ArchList, ignores: Sequence[LintIgnore] = (), *,
               build_subdir: str | None = None, extensions: Sequence[tuple[str, ArchList]] = (),
               cuda: str | None = None, families: Sequence[KernelFamily] = ()) -> LintReport:
    """:func:`lint_tree` on an index the caller made: ``index.stamps`` then says what the
    answer was made from (``farm lint`` remembers it by them)."""
    root = index.root
    if not index.files:
        raise SourceError(f"{root} holds no files: nothing was read, so nothing can pass",
                          hint="check that the source was fetched completely")
    if build_subdir and build_subdir.strip("/") not in index.dirs:
        raise SourceError(f"build_subdir {build_subdir!r} does not exist in {root}",
                          hint="fix the recipe's build.subdir (or --build-subdir)")
    scope = build_scope(index, build_subdir)
    if cuda and families:
        configured = declared_families(index, scope, archs, cuda, families)
    else:
        configured = kernel_families(index, scope, archs, cuda) if cuda else Configured()
    derived = configured.families
    findings, libraries = check(index, scope, archs, extensions, configured)
    kept, ignored, stale = apply_ignores(findings, ignores)
    summary = {
        "build_root": scope.build_root or ".",
        "build_files": list(scope.build_files),
        "translation_units": len(scope.seeds),
        "compiled": len(scope.compiled),
        "files_total": scope.files_total,
        "vendored": list(scope.vendored),
        "extensions": [[glob, own.canonical()] for glob, own in extensions],
        "cuda": cuda or "",
        # the family table a reviewer checks: name, where, what it intersects, its targets, sources
        "families": [[f.name, f.where, f.supported, f.targets.canonical(), len(f.sources)] for f in derived],
        # each family's sources, in the table's order: the build spec carries them to the assertion
        "family_sources": [list(f.sources) for f in derived],
        # and each family's globs (file(GLOB) in its SRCS), for the files the build generates
        "family_patterns": [list(f.patterns) for f in derived],
        "not_built": sorted(configured.not_built),
        "how": scope.how,
        # Devices the list claims (at or above its lowest arch) that get no image at all: not a
        # lint finding (no stub can run), but worth seeing next to the verdict.
        "no_image": [f"{d} ({products(d)})" for d in claimed_devices(archs)
                     if pick_image(archs, d).target is None],
    }
    return LintReport(str(root), archs.canonical(), tuple(kept), tuple(ignored), tuple(stale), summary,
                      tuple(libraries), LINT_VERSION)


def lint_cached(tree: SourceTree, archs: ArchList, ignores: Sequence[LintIgnore], cache_dir: Path, *,
                build_subdir: str | None = None, prepare: Callable[[], Path] | None = None,
                variant: str = "", extensions: Sequence[tuple[str, ArchList]] = (),
                cuda: str | None = None, families: Sequence[KernelFamily] = ()) -> LintReport:
    """:func:`lint_tree` on a fetched source, cached by its identity.

    ``prepare`` makes the tree that is really built (the source after the recipe's patch script)
    and is called only on a cache miss; ``variant`` (the patch script's digest) keys it apart from
    the unpatched source."""
    # the extensions' own lists key the answer like the package's list does
    own = "".join(f"+ext:{glob}={lst.canonical()}" for glob, lst in extensions) + (f"+cuda:{cuda}" if cuda else "")
    own += "".join(f"+family:{f.name}={','.join(f.sources)}:{f.archs}:{f.min_cuda or ''}" for f in families)
    key = cache.cache_key(tree.identity + (f"+{variant}" if variant else "") + own, LINT_VERSION, archs, ignores,
                          build_subdir)
    report = cache.load(cache_dir, key)
    if report is None:
        root = prepare() if prepare is not None else tree.root
        report = lint_tree(root, archs, ignores, build_subdir=build_subdir, extensions=extensions, cuda=cuda,
                           families=families)
        cache.store(cache_dir, key, report)
    return report


def lint_source(source: GitSource | SdistSource | PathSource, archs: ArchList, ignores: Sequence[LintIgnore],
                cache_dir: Path, *, package: str | None = None, build_subdir: str | None = None,
                vendor: tuple[VendorSource, ...] = ()) -> LintReport:
    """Fetch ``source`` with the recipe's ``vendor`` trees placed (cached) and lint it (cached)."""
    tree = fetch(source, cache_dir, package=package, vendor=vendor)
    return lint_cached(tree, archs, ignores, cache_dir, build_subdir=build_subdir)
