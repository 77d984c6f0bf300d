"""The cells still to build: recipes x grid, minus what is filtered, excluded or already built.

The subtraction happens in one visible order, and every declared cell lands in exactly one bucket:

1. ``filtered``   the command-line filters (packages, --cuda, --torch, --python, --platform)
2. ``recipe``     the recipe's own restrictions (``min_torch``, ``only``)
3. ``no-policy``  a platform whose arch policy has no row for the CUDA line (whatever the recipe
                  overrides: its lists were written for the platforms the farm builds)
4. ``phantom``    (cuda, torch, python, platform) combinations upstream PyTorch never shipped
5. ``built``      the ledger holds the exists-key (cell + effective build_epoch)
6. ``stale``      built at the current epoch, but with another arch list than the config resolves
                  today: reported with the advice to bump the epoch, never silently rebuilt
7. ``to build``   the rest, each with its resolved arch list and planned wheel name

:func:`compute_matrix` is pure (config + ledger index in, :class:`Matrix` out).

What one run takes of these cells is :mod:`farm.schedule.waves`; the GitHub Actions outputs are
:mod:`farm.schedule.actions`; the lint of what is scheduled is :mod:`farm.schedule.matrixlint`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from farm.errors import ArchError, UsageError, did_you_mean, version_key
from farm.model.arch import ArchList, render, validate_for_cuda
from farm.model.archrequest import ArchRequest, arch_request
from farm.model.cells import (
    NO_TORCH,
    Cell,
    declared_keys,
    in_python_range,
    is_phantom_key,
    planned_wheel_name,
    python_tag,
    recipe_excludes_key,
)
from farm.model.config import FarmConfig, Recipe, Restriction
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import ExistsKey

RUNNERS: Mapping[str, str] = {
    "linux_x86_64": "ubuntu-24.04",
    "linux_aarch64": "ubuntu-24.04-arm",
    "win_amd64": "windows-2022",
}


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------
def _split(values: Iterable[str] | None) -> list[str]:
    """``--cuda 12.8 --cuda 12.9`` and ``--cuda 12.8,12.9`` both work."""
    return [v.strip() for value in values or () for v in value.split(",") if v.strip()]


def _unknown(what: str, value: str, known: Iterable[str]) -> UsageError:
    known = sorted(set(known), key=version_key)
    suggestion = did_you_mean(value, known)
    return UsageError(
        f"unknown {what} {value!r}: it matches nothing in the config, so the matrix would be empty",
        hint=(f"{suggestion} " if suggestion else "") + f"known: {', '.join(known)}",
    )


@dataclass(frozen=True)
class Filters:
    """Command-line filters; ``None`` means no restriction. Values are normalised (cuda ``12.8``,
    torch minor ``2.8`` or ``none``, python tag ``cp311``, platform ``linux_x86_64``)."""

    packages: tuple[str, ...] | None = None
    cuda: frozenset[str] | None = None
    torch: frozenset[str] | None = None
    python: frozenset[str] | None = None
    platform: frozenset[str] | None = None

    @classmethod
    def parse(
        cls,
        config: FarmConfig,
        *,
        packages: Sequence[str] = (),
        cuda: Iterable[str] | None = None,
        torch: Iterable[str] | None = None,
        python: Iterable[str] | None = None,
        platform: Iterable[str] | None = None,
    ) -> Filters:
        """Normalise and check every value against the config: an unknown one is a
        :class:`UsageError`, because an empty matrix must never look like success by accident."""
        d = config.defaults
        for name in packages:
            config.recipe(name)  # raises UsageError with a suggestion
        known_cuda = set(d.cuda_lines)
        known_torch = {row.torch_minor for row in d.grid} | {NO_TORCH}
        # only Pythons the grid declares within the range: another one would select nothing
        known_python = {python_tag(p) for row in d.grid for p in row.pythons if in_python_range(d, p)}
        known_platform = set(d.platforms)

        def check(what: str, values: list[str], known: set[str]) -> frozenset[str] | None:
            if not values:
                return None
            for v in values:
                if v not in known:
                    raise _unknown(what, v, known)
            return frozenset(values)

        torch_values = [_torch_minor(v) for v in _split(torch)]
        python_values = [_python_value(v) for v in _split(python)]
        return cls(
            packages=tuple(dict.fromkeys(packages)) or None,
            cuda=check("CUDA line", _split(cuda), known_cuda),
            torch=check("torch version", torch_values, known_torch),
            python=check("Python", python_values, known_python),
            platform=check("platform", _split(platform), known_platform),
        )

    def excludes_key(self, cuda: str, torch: str, python: str, platform: str) -> bool:
        """Whether the filters leave out the cell of these fields (``python`` as the tag, ``cp311``)."""
        return (
            (self.cuda is not None and cuda not in self.cuda)
            or (self.torch is not None and torch not in self.torch)
            or (self.python is not None and python not in self.python)
            or (self.platform is not None and platform not in self.platform)
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "packages": list(self.packages) if self.packages else None,
            **{k: sorted(v) if v is not None else None
               for k, v in (("cuda", self.cuda), ("torch", self.torch),
                            ("python", self.python), ("platform", self.platform))},
        }


def _torch_minor(value: str) -> str:
    """``2.8.0`` / ``2.8`` -> ``2.8``; ``none`` stays."""
    if value.lower() == NO_TORCH:
        return NO_TORCH
    parts = value.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else value


def _python_value(value: str) -> str:
    """``3.11`` / ``cp311`` / ``311`` -> ``cp311``."""
    if value.startswith("cp"):
        return value
    if "." in value:
        try:
            return python_tag(value)
        except ValueError:
            return value
    return f"cp{value}" if value.isdigit() else value


# --------------------------------------------------------------------------------------------
# The pure core
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedCell:
    """A cell to build: its arch request (list, as written, the rule it came from), epoch and
    planned wheel name. ``farm build`` hands ``arch`` to the builder's spec: it is not resolved again."""

    cell: Cell
    arch: ArchRequest
    torch_version: str | None  # the full version to install, e.g. "2.8.0"
    epoch: int
    wheel: str
    compile_jobs: int = 1  # the recipe's `sharding` for this platform: N compile jobs + 1 link job

    @property
    def archs(self) -> ArchList:
        return self.arch.archs

    def as_json(self, arch_list: str | None = None) -> dict[str, Any]:
        """``arch_list``: the canonical string when the caller has it (one per distinct list)."""
        c = self.cell
        out = {
            "id": c.id, "package": c.package, "version": c.version, "cuda": c.cuda,
            "torch": c.torch, "torch_version": self.torch_version, "python": c.python_version,
            "python_tag": c.python, "platform": c.platform, "runner": RUNNERS.get(c.platform),
            "build_epoch": self.epoch, "arch_list": arch_list or self.archs.canonical(),
            "arch_origin": self.arch.origin, "wheel": self.wheel,
        }
        if self.compile_jobs > 1:
            out["compile_jobs"] = self.compile_jobs
        return out

    def github_entry(self) -> dict[str, Any]:
        """What one build job needs, kept short: GitHub caps a job's outputs at 1 MB."""
        c = self.cell
        return {
            "id": c.id, "package": c.package, "cuda": c.cuda, "torch": c.torch,
            "python": c.python_version, "platform": c.platform, "runner": RUNNERS.get(c.platform),
        }


@dataclass(frozen=True)
class StaleCell:
    """Built at the current epoch with an arch list the config no longer resolves to."""

    cell: Cell
    wheel: str  # the ledger's filename
    line: int  # its ledger line
    built: str  # the arch list it was built with (normalised)
    now: str  # what the config resolves today

    def as_json(self) -> dict[str, Any]:
        return {"id": self.cell.id, "wheel": self.wheel, "ledger_line": self.line,
                "built_with": self.built, "config_now": self.now}


@dataclass(frozen=True)
class PackageMatrix:
    """One package's buckets. ``declared`` equals the sum of all the others."""

    package: str
    version: str
    epoch: int
    declared: int
    filtered: int
    recipe: int
    no_policy: int
    phantom: int
    built: int
    stale: tuple[StaleCell, ...]
    to_build: tuple[PlannedCell, ...]
    recipe_display: str

    def counts(self) -> dict[str, int]:
        return {
            "declared": self.declared, "filtered": self.filtered, "recipe": self.recipe,
            "no_policy": self.no_policy, "phantom": self.phantom, "built": self.built,
            "stale": len(self.stale), "to_build": len(self.to_build),
        }

    def lint_requests(self) -> list[tuple[ArchList, tuple[tuple[str, ArchList], ...], str, str]]:
        """Distinct (list, the extensions' own lists, CUDA line, platform) of the cells to build: one
        lint each (the lint uses the CUDA line only for a recipe with kernel families, the platform
        only for one with a platform patch script, and caches by what it uses)."""
        return list(dict.fromkeys((p.archs, p.arch.extensions, p.cell.cuda, p.cell.platform) for p in self.to_build))


@dataclass(frozen=True)
class Matrix:
    packages: tuple[PackageMatrix, ...]
    filters: Filters
    overwrite: bool
    defaults_epoch: int

    @property
    def cells(self) -> list[PlannedCell]:
        return [p for pkg in self.packages for p in pkg.to_build]

    @property
    def stale(self) -> list[StaleCell]:
        return [s for pkg in self.packages for s in pkg.stale]

    def totals(self) -> dict[str, int]:
        counts = [pkg.counts() for pkg in self.packages]
        return {k: sum(c[k] for c in counts)
                for k in ("declared", "filtered", "recipe", "no_policy", "phantom", "built", "stale", "to_build")}


def _same_archs(recorded: str, canonical: str, archs: ArchList, parsed: dict[str, ArchList | None]) -> bool:
    """Whether a ledger's recorded list equals ``archs``; ``parsed`` memoises the (few) distinct
    recorded strings that are not already canonical."""
    if recorded == canonical:
        return True
    if recorded not in parsed:
        try:
            parsed[recorded] = ArchList.parse(recorded)
        except ArchError:
            parsed[recorded] = None  # unparseable: differs from any list the config resolves
    return parsed[recorded] == archs


def compute_matrix(
    config: FarmConfig,
    ledger: LedgerIndex,
    filters: Filters | None = None,
    *,
    overwrite: bool = False,
) -> Matrix:
    """Every package's buckets, in the order of ``filters.packages`` (or by name)."""
    filters = filters or Filters()
    names = filters.packages or tuple(sorted(config.recipes))
    torch_versions = {(row.cuda, row.torch_minor): row.torch for row in config.defaults.grid}
    # Shared by every package: policy rows serve them all.
    specs: dict[tuple[ArchList, str], str] = {}
    parsed: dict[str, ArchList | None] = {}
    packages = tuple(
        _package_matrix(config, config.recipe(name), ledger, filters, overwrite, torch_versions,
                        specs, parsed)
        for name in names
    )
    return Matrix(packages, filters, overwrite, config.defaults.build_epoch)


# A resolved arch request with what the loop compares against, computed once per (cuda, torch, platform).
_Resolved = tuple[ArchRequest, str]


def _resolve(config: FarmConfig, recipe: Recipe, cell: Cell,
             memo: dict[tuple[ArchList, str], str]) -> _Resolved | None:
    """The cell's arch request, validated for its CUDA line, with its canonical string. ``memo``
    (list, cuda) -> canonical string: a policy row serves every recipe, so it is validated and
    rendered once per run."""
    request = arch_request(config, recipe, cell)
    if request is None:
        return None
    key = (request.archs, cell.cuda)
    canonical = memo.get(key)
    if canonical is None:
        try:
            validate_for_cuda(request.archs, cell.cuda, where=request.where)
        except ArchError as exc:
            raise ArchError(f"cell {cell.id}: {exc.message}", where=exc.where, hint=exc.hint) from None
        canonical = memo[key] = request.archs.canonical()
    for name, how in recipe.build.arch_env.items():  # the package's own variable must carry the list
        try:
            render(request.archs, how)
        except ArchError as exc:
            raise ArchError(f"cell {cell.id}: build.arch_env.{name}: {exc.message}",
                            where=f"{recipe.display} / {request.where}", hint=exc.hint) from None
    return request, canonical


_NO_FILTERS = Filters()
_NO_RESTRICTION = Restriction()
_UNRESOLVED: Any = object()


def _package_matrix(
    config: FarmConfig,
    recipe: Recipe,
    ledger: LedgerIndex,
    filters: Filters,
    overwrite: bool,
    torch_versions: Mapping[tuple[str, str], str],
    specs: dict[tuple[ArchList, str], str],
    parsed: dict[str, ArchList | None],
) -> PackageMatrix:
    # The loop runs once per declared cell (~17,000 at the public farm's scale): it works on the
    # cell's fields and builds a Cell only for the cells it keeps (to build or stale).
    defaults = config.defaults
    epoch = config.effective_epoch(recipe)
    name, version = recipe.name, recipe.version
    declared = filtered = restricted = no_policy = phantom = built = 0
    stale: list[StaleCell] = []
    to_build: list[PlannedCell] = []
    # Resolution depends on the recipe and (cuda, torch, platform) only: ~90 per recipe, not ~400.
    resolved: dict[tuple[str, str, str], _Resolved | None] = {}
    lookup = ledger.lookup()
    # Most runs have no filter and most recipes no restriction: skip those calls then.
    filtering = filters != _NO_FILTERS
    restricting = recipe.only != _NO_RESTRICTION
    for cuda, torch, tag, platform, py in declared_keys(defaults, recipe):
        declared += 1
        if filtering and filters.excludes_key(cuda, torch, tag, platform):
            filtered += 1
            continue
        if restricting and recipe_excludes_key(recipe, cuda, torch, py, platform) is not None:
            restricted += 1
            continue
        combo = (cuda, torch, platform)
        found = resolved.get(combo, _UNRESOLVED)
        if found is _UNRESOLVED:
            found = resolved[combo] = _resolve(config, recipe, Cell(name, version, cuda, torch, tag, platform), specs)
        if found is None:
            no_policy += 1
            continue
        if is_phantom_key(defaults, cuda, torch, py, platform):
            phantom += 1
            continue
        request, canonical = found
        if not overwrite:
            record = lookup(ExistsKey(name, version, cuda, torch, tag, platform, epoch))
            if record is not None:
                arch = record.arch
                if arch is None or arch == canonical or _same_archs(arch, canonical, request.archs, parsed):
                    built += 1
                else:
                    stale.append(StaleCell(Cell(name, version, cuda, torch, tag, platform), record.filename,
                                           record.line, arch, canonical))
                continue
        cell = Cell(name, version, cuda, torch, tag, platform)
        torch_version = torch_versions.get((cuda, torch)) if torch != NO_TORCH else None
        to_build.append(PlannedCell(cell, request, torch_version, epoch, planned_wheel_name(recipe, cell, epoch),
                                    recipe.sharding.jobs_for(cell.platform) if recipe.sharding else 1))
    return PackageMatrix(
        name, version, epoch, declared, filtered, restricted, no_policy, phantom,
        built, tuple(stale), tuple(to_build), recipe.display,
    )


def stale_advice(matrix: Matrix) -> list[str]:
    """One line per package with stale wheels: the count and what to do."""
    return [
        f"config moved: {pkg.package} has {len(pkg.stale)} wheel(s) built at epoch {pkg.epoch} "
        f"with another arch list than the config resolves now; bump build_epoch "
        f"({pkg.recipe_display} or _defaults.yml) to rebuild them"
        for pkg in matrix.packages if pkg.stale
    ]


def without_cells(matrix: Matrix, ids: Iterable[str]) -> Matrix:
    """``matrix`` less the named cells (held by a run that still builds or publishes them: neither
    scheduled nor deferred)."""
    drop = set(ids)
    return replace(matrix, packages=tuple(replace(p, to_build=tuple(c for c in p.to_build if c.cell.id not in drop))
                                          for p in matrix.packages))


def without_packages(matrix: Matrix, packages: Iterable[str]) -> Matrix:
    """``matrix`` less the named packages (their cells are neither scheduled nor deferred)."""
    drop = set(packages)
    return replace(matrix, packages=tuple(p for p in matrix.packages if p.package not in drop))
