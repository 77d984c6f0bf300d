"""Cells: one (package, version, cuda, torch, python, platform) build, its arch list and its name.

Pure functions over the config model; the matrix composes them in its visible subtraction order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache

from packaging.version import Version

from farm.model.arch import ArchList
from farm.model.config import (
    PLATFORM_GROUPS,
    ArchSpec,
    Defaults,
    FarmConfig,
    GridRow,
    Phantom,
    Recipe,
)
from farm.model.label import NO_TORCH as NO_TORCH  # re-exported: a cell without torch
from farm.model.label import cu_tag, local_label

_PLACEHOLDER = re.compile(r"\{((?:version|local):[^{}]+)\}")


@dataclass(frozen=True, order=True)
class Cell:
    package: str
    version: str
    cuda: str  # "12.8"
    torch: str  # "2.8" or "none"
    python: str  # "cp311"
    platform: str  # linux_x86_64 | linux_aarch64 | win_amd64

    @property
    def cu(self) -> str:
        return cu_tag(self.cuda)

    @cached_property  # the matrix's plans and waves key their cells by it, tens of thousands of times
    def id(self) -> str:
        torch = f"torch{self.torch}" if self.torch != NO_TORCH else "notorch"
        return f"{self.package}-{self.version}-{self.cu}-{torch}-{self.python}-{self.platform}"

    @property
    def python_version(self) -> str:
        """``cp311`` -> ``3.11``."""
        digits = self.python.removeprefix("cp")
        return f"{digits[0]}.{digits[1:]}"

    def as_dict(self) -> dict[str, str]:
        return {"cuda": self.cuda, "torch": self.torch, "python": self.python, "platform": self.platform}

    def __str__(self) -> str:
        return self.id


def python_tag(version: str) -> str:
    """``3.11`` -> ``cp311``."""
    major, minor = version.split(".")
    return f"cp{major}{minor}"


def local_version(cell: Cell) -> str:
    """The local version label: ``cu128torch2.8``, or ``cu128`` for torch-free packages."""
    return local_label(cell.cuda, cell.torch)


def requires_dist(recipe: Recipe, cell: Cell) -> tuple[str, ...]:
    """The recipe's requires_dist for ``cell``, placeholders filled.

    ``{version:NAME}`` is recipe NAME's version; ``{local:NAME}`` the local label NAME's wheel of the
    same cell carries (``cu128torch2.8``, or ``cu128`` when NAME does not link torch), so
    ``cumm=={version:cumm}+{local:cumm}`` pins exactly the farm wheel built beside this one.
    """
    return tuple(fill_placeholders(recipe, cell, req) for req in recipe.requires_dist)


def fill_placeholders(recipe: Recipe, cell: Cell, requirement: str) -> str:
    """``requirement`` with its ``{version:NAME}`` / ``{local:NAME}`` filled for ``cell`` (a
    requires_dist entry, or an ``extra_deps`` entry naming a farm wheel as a build dependency)."""
    def fill(match: re.Match[str]) -> str:
        kind, name = match[1].split(":", 1)
        pin = recipe.siblings[name]
        if kind == "version":
            return pin.version
        return local_label(cell.cuda, cell.torch if pin.links_torch else NO_TORCH)
    return _PLACEHOLDER.sub(fill, requirement)


def torch_pin(recipe: Recipe, cell: Cell) -> tuple[str, ...]:
    """``("torch==2.14.*",)`` for a torch-linked cell: the wheel works only with the torch minor it
    was built against, whatever upstream's metadata or the recipe's ``requires_dist`` says (the
    recipe loader refuses a torch entry there; :func:`~farm.provenance.stamp.set_metadata_version`
    writes the pins before any other requirement, so none can replace it)."""
    return (f"torch=={cell.torch}.*",) if cell.torch != NO_TORCH and recipe.links_torch else ()


def planned_wheel_name(recipe: Recipe, cell: Cell, epoch: int) -> str:
    """``{dist}-{version}+{local}[-{epoch}]-{py}-{abi}-{plat}.whl``; the build tag only when epoch > 0.

    The platform is the cell's; the repaired wheel's real tag (manylinux_2_28_x86_64) is decided by
    the repair step and recorded by postbuild.
    """
    dist = _wheel_dist(recipe.dist)
    build = f"-{epoch}" if epoch > 0 else ""
    return f"{dist}-{cell.version}+{local_version(cell)}{build}-{cell.python}-{cell.python}-{cell.platform}.whl"


@cache
def parse_version(text: str) -> Version:
    """``Version(text)``, memoised: the grid's few version strings are compared thousands of times."""
    return Version(text)


@cache
def _wheel_dist(dist: str) -> str:
    """The distribution name as a wheel file name spells it (the binary distribution format's
    escape: runs of ``-_.`` one underscore, lower case), once per recipe, not per cell."""
    return re.sub(r"[-_.]+", "_", dist).lower()


def in_python_range(defaults: Defaults, version: str) -> bool:
    """Whether a grid Python (``3.11``) is within ``_defaults.yml``'s ``python: {min, max}``."""
    return _in_range(defaults.python_min, defaults.python_max, version)


@cache
def _in_range(low: str, high: str, version: str) -> bool:
    return parse_version(low) <= parse_version(version) <= parse_version(high)


# (cuda, torch, python tag, platform, python version): a declared cell before it is a Cell.
DeclaredKey = tuple[str, str, str, str, str]


def declared_keys(defaults: Defaults, recipe: Recipe) -> tuple[DeclaredKey, ...]:
    """The fields of :func:`declared_cells`, in the same order, without building the cells (the
    matrix builds a :class:`Cell` only for the cells it keeps). They depend on the grid and on
    whether the recipe links torch only, so they are computed twice a run, not once a recipe."""
    return _declared_keys(defaults.grid, defaults.platforms, defaults.python_min, defaults.python_max,
                          recipe.links_torch)


@lru_cache(maxsize=16)
def _declared_keys(grid: tuple[GridRow, ...], platforms: tuple[str, ...], low: str, high: str,
                   links_torch: bool) -> tuple[DeclaredKey, ...]:
    seen: set[tuple[str, str, str, str]] = set()
    out = []
    for row in grid:
        torch = row.torch_minor if links_torch else NO_TORCH
        for py in row.pythons:
            if not _in_range(low, high, py):
                continue
            tag = python_tag(py)
            for platform in platforms:
                key = (row.cuda, torch, tag, platform)
                if key not in seen:
                    seen.add(key)
                    out.append((row.cuda, torch, tag, platform, py))
    return tuple(out)


def declared_cells(defaults: Defaults, recipe: Recipe) -> Iterator[Cell]:
    """Every cell the grid declares for ``recipe``: grid rows x platforms, Python within range.

    Torch-free packages collapse the torch axis: one cell per (cuda, python, platform).
    """
    for cuda, torch, tag, platform, _ in declared_keys(defaults, recipe):
        yield Cell(recipe.name, recipe.version, cuda, torch, tag, platform)


def is_phantom_key(defaults: Defaults, cuda: str, torch: str, python: str, platform: str) -> bool:
    """A cell upstream PyTorch never shipped, by its fields (``python`` as ``3.11``): the one
    phantom rule (torch-free cells have no torch to be missing)."""
    return torch != NO_TORCH and (cuda, torch, python, platform) in _phantom_keys(defaults.phantoms)


@lru_cache(maxsize=4)
def _phantom_keys(phantoms: frozenset[Phantom]) -> frozenset[tuple[str, str, str, str]]:
    """The phantoms as plain tuples, made once per config (the matrix asks once per declared cell)."""
    return frozenset((p.cuda, p.torch, p.python, p.platform) for p in phantoms)


def recipe_excludes(recipe: Recipe, cell: Cell) -> str | None:
    """The recipe restriction that excludes ``cell``, or None."""
    return recipe_excludes_key(recipe, cell.cuda, cell.torch, cell.python_version, cell.platform)


def recipe_excludes_key(recipe: Recipe, cuda: str, torch: str, python: str, platform: str) -> str | None:
    """:func:`recipe_excludes` on a cell's fields (``python`` as ``3.11``)."""
    only = recipe.only
    if only.min_torch and torch != NO_TORCH and parse_version(torch) < parse_version(only.min_torch):
        return f"min_torch {only.min_torch}"
    if only.platforms is not None and platform not in only.platforms:
        return "only.platforms"
    if only.cuda is not None and cuda not in only.cuda:
        return "only.cuda"
    if only.combinations is not None and not any(
            combo.cuda == cuda and (combo.torch is None or torch in (NO_TORCH, combo.torch))
            and (combo.pythons is None or python in combo.pythons) for combo in only.combinations):
        return "only.combinations"
    return None


@dataclass(frozen=True)
class Resolution:
    """A cell's arch list and the rule it came from."""

    spec: ArchSpec
    origin: str  # e.g. "recipe arch.by_cuda['12.8']" or "policy x86_64 12.8"

    @property
    def archs(self) -> ArchList:
        return self.spec.archs


def resolve_arch(config: FarmConfig, recipe: Recipe, cell: Cell) -> Resolution | None:
    """The cell's arch list: combo override > per-CUDA > package > policy row (docs/recipes.md).

    The platform's own block (``arch.win_amd64``), then its group's (``arch.aarch64``) are consulted
    first with the same rules, then the package-wide block, then the group's policy row (with its
    per-(cuda, torch) exceptions). None
    means the platform has no policy row for the CUDA line: the farm builds no such cells, whatever
    a recipe overrides.
    """
    group = PLATFORM_GROUPS[cell.platform]
    policy = config.defaults.policy
    row = policy.rows.get(group, {}).get(cell.cuda)
    if row is None:
        return None
    blocks = [(f"arch.{key}", recipe.arch_by_platform[key])
              for key in (cell.platform, group)  # arch.win_amd64 before arch.x86_64
              if key in recipe.arch_by_platform]
    blocks.append(("arch", recipe.arch))
    for prefix, rules in blocks:
        spec = rules.by_combo.get((cell.cuda, cell.torch))
        if spec:
            return Resolution(spec, f"recipe {prefix}.by_combo['{cell.cuda}/{cell.torch}']")
        spec = rules.by_cuda.get(cell.cuda)
        if spec:
            return Resolution(spec, f"recipe {prefix}.by_cuda['{cell.cuda}']")
        if rules.default:
            return Resolution(rules.default, f"recipe {prefix}.list")
    exc = policy.exceptions.get(group, {}).get((cell.cuda, cell.torch))
    if exc:
        return Resolution(exc, f"policy exception {group} {cell.cuda}/{cell.torch}")
    return Resolution(row, f"policy {group} {cell.cuda}")


def extension_lists(recipe: Recipe, cuda: str | None = None) -> tuple[tuple[str, ArchList], ...]:
    """Per-extension expected lists (glob -> arch list) for packages that build one module per arch.

    ``cuda`` picks the lists of that CUDA line too (``extensions: {glob: {by_cuda: ...}}``).
    """
    return tuple((e.glob, e.spec.archs) for e in recipe.extensions if e.cuda is None or e.cuda == cuda)
