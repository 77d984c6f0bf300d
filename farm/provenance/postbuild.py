"""Postbuild: assert, then stamp, then write the ledger fragment.

The core (:func:`postbuild_wheel`) takes explicit values: the cell, what each extension must
hold, the effective epoch, the hashes, the source, the run and the toolchain (a
:class:`BuildContext`). :func:`context_from_config` is the one place that reads the farm's
configuration and the environment to make that context.

A wheel that fails the assertion produces nothing in the output folder: no stamped wheel, no
fragment. The fragment is written beside the stamped wheel (``<wheel>.ledger.json``), where the
upload gate looks for it, unless another folder is given.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from farm.binary.archrule import Expected, vendored_rules
from farm.binary.assertion import AssertionReport, assert_wheel
from farm.binary.cuobjdump import PINNED, pinned_cuobjdump
from farm.errors import FarmError, UsageError, WheelError, clip, did_you_mean
from farm.fsutil import atomic_write, read_chunks, sha256_file
from farm.model.archrequest import ArchRequest, require_arch_request
from farm.model.cells import NO_TORCH, Cell, local_version, requires_dist, torch_pin
from farm.model.config import FarmConfig, GitSource, PathSource, Recipe, SdistSource
from farm.model.label import parse_local_label
from farm.provenance import buildinfo, probe
from farm.provenance.ledgerwrite import write_fragment
from farm.provenance.stamp import (
    Relabel,
    StampResult,
    WheelName,
    stamp_wheel,
)
from farm.source.fetch import tree_sha256, vendor_description


@dataclass(frozen=True)
class BuildContext:
    """Everything about a wheel's build that is not in the wheel itself."""

    cell: Cell
    expected: Expected
    requested: str  # the arch list as written in the config
    build_epoch: int  # effective: _defaults.yml + recipe
    defaults_sha256: str | None
    recipe_sha256: str | None
    source: buildinfo.SourceRecord | None
    run: buildinfo.Run
    toolchain: buildinfo.Toolchain
    requires_dist: tuple[str, ...] = ()  # the recipe's: added to the wheel's METADATA
    pins: tuple[str, ...] = ()  # replace the wheel's own requirement on their project (torch==2.14.*)
    duration_s: float | None = None  # the cell's build time (the matrix plans jobs with it); None: unknown
    cuobjdump: str = PINNED  # the cuobjdump version the assertion runs (the build spec's)

    @property
    def build_tag(self) -> str | None:
        return str(self.build_epoch) if self.build_epoch > 0 else None


@dataclass(frozen=True)
class PostbuildResult:
    wheel: Path
    report: AssertionReport
    stamped: StampResult | None = None
    fragment: Path | None = None

    @property
    def passed(self) -> bool:
        return self.report.passed

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": str(self.wheel),
            "passed": self.passed,
            "assertion": self.report.to_json(),
            "stamped": str(self.stamped.path) if self.stamped else None,
            "sha256": self.stamped.sha256 if self.stamped else None,
            "fragment": str(self.fragment) if self.fragment else None,
        }


# -- wheel tags -> cell fields (pure) -----------------------------------------------------------
def cell_python(name: WheelName) -> str:
    """``cp311`` for a version-specific wheel, ``abi3`` for a stable-ABI one."""
    if name.abi == "abi3":
        return "abi3"
    if "." in name.python or not name.python.startswith("cp"):
        raise WheelError(f"python tag {name.python!r} is not one CPython version", where=name.filename,
                         hint="farm builds one wheel per CPython version (or abi3)")
    return name.python


def cell_platform(name: WheelName) -> str:
    """The farm platform of a wheel's platform tag(s): ``manylinux_2_28_x86_64`` -> ``linux_x86_64``."""
    found = set()
    for tag in name.platform.split("."):
        if tag == "win_amd64":
            found.add("win_amd64")
        elif tag.startswith(("linux_", "manylinux", "musllinux")) and tag.endswith(("_x86_64", "_aarch64")):
            found.add("linux_x86_64" if tag.endswith("_x86_64") else "linux_aarch64")
        else:
            raise WheelError(f"platform tag {tag!r} is not one farm builds for", where=name.filename)
    if len(found) != 1:
        raise WheelError(f"platform tags {name.platform!r} name {len(found)} platforms", where=name.filename)
    return found.pop()


def check_wheel_matches_cell(name: WheelName, cell: Cell, dist: str) -> None:
    """The builder's wheel must be the cell's: same project, version, python and platform."""
    problems = []
    if canonicalize_name(name.dist) != canonicalize_name(dist):
        problems.append(f"project {name.dist!r} is not the recipe's {dist!r}")
    if Version(name.version).public != Version(cell.version).public:
        problems.append(f"version {name.version} is not the recipe's {cell.version}")
    if cell_python(name) != cell.python:
        problems.append(f"python {cell_python(name)} is not the cell's {cell.python}")
    if cell_platform(name) != cell.platform:
        problems.append(f"platform {cell_platform(name)} is not the cell's {cell.platform}")
    if problems:
        raise UsageError(f"this wheel is not cell {cell.id}: " + "; ".join(problems), where=name.filename,
                         hint="pass the wheel the cell's build produced, or the right --package/--cuda/--torch")


# -- the core -------------------------------------------------------------------------------------
def check_wheel(wheel: Path, context: BuildContext, *, dist: str, cuobjdump: Path | None = None) -> AssertionReport:
    """The assertion alone: is ``wheel`` the cell's, and does it hold exactly what was asked for?
    Its cuobjdump is the context's version (``cuobjdump``, when given, must be that version)."""
    wheel = Path(wheel)
    check_wheel_matches_cell(WheelName.parse(wheel.name), context.cell, dist)
    return assert_wheel(wheel, context.expected, cuobjdump=pinned_cuobjdump(context.cuobjdump, cuobjdump))


def postbuild_wheel(
    wheel: Path,
    out_dir: Path,
    context: BuildContext,
    *,
    dist: str,
    fragments_dir: Path | None = None,
    cuobjdump: Path | None = None,
) -> PostbuildResult:
    """Assert ``wheel`` against ``context.expected``; if it passes, stamp it into ``out_dir`` and
    write its ledger fragment. The input wheel is never modified."""
    report = check_wheel(wheel, context, dist=dist, cuobjdump=cuobjdump)
    if not report.passed:
        return PostbuildResult(Path(wheel), report)
    return stamp_asserted(wheel, out_dir, context, report, fragments_dir=fragments_dir)


def stamp_asserted(
    wheel: Path,
    out_dir: Path,
    context: BuildContext,
    report: AssertionReport,
    *,
    fragments_dir: Path | None = None,
) -> PostbuildResult:
    """Stamp a wheel whose assertion passed, and write its fragment.

    A wheel farm already stamped (``farm build`` postbuilds what it builds) is not stamped twice:
    it is carried into ``out_dir`` as it is, with its fragment, when its own provenance says
    this cell and this list (the assertion just re-checked the binary)."""
    if not report.passed:
        raise ValueError("stamp_asserted takes a passed assertion report")
    wheel = Path(wheel)
    name = WheelName.parse(wheel.name)
    embedded = buildinfo.read_wheel(wheel)
    if embedded is not None:
        return _carry_stamped(wheel, embedded, out_dir, context, report, fragments_dir=fragments_dir)
    tools = report.tools.to_json()
    cell = context.cell

    def make_info(relabel: Relabel, hashes: Mapping[str, str]) -> buildinfo.BuildInfo:
        # Paths as they are in the stamped wheel (a .data/ folder is renamed with the version).
        per_so = {relabel.member(e.path): e for e in report.extensions}
        info = buildinfo.make_build_info(
            package=cell.package,
            dist=name.dist,
            version=name.public_version,
            cell=cell.as_dict(),
            build_epoch=context.build_epoch,
            requested=context.requested,
            normalised=context.expected.default.canonical(),
            expected={p: so.expected.canonical() for p, so in per_so.items()},
            found={p: so.found.canonical() for p, so in per_so.items()},
            tools=tools,
            defaults_sha256=context.defaults_sha256,
            recipe_sha256=context.recipe_sha256,
            run=context.run,
            source=context.source,
            toolchain=context.toolchain,
            extensions={p: hashes[p] for p in per_so},
            vendored={relabel.member(v.path): v.record() for v in report.vendored_results},
            duration_s=context.duration_s if context.duration_s is not None else buildinfo.ABSENT,
            made_by={p: so.inspection.made_by.to_json() for p, so in per_so.items() if so.inspection.made_by},
            families=report.families_record(relabel.member),
        )
        buildinfo.validate(info.to_dict(), where=str(wheel))  # what is written follows the schema
        return info

    stamped = stamp_wheel(wheel, out_dir, local=local_version(cell), build_tag=context.build_tag,
                          build_info=make_info, requires=context.requires_dist,
                          pins=context.pins)
    assert stamped.build_info is not None
    entry = stamped.build_info.ledger_entry(filename=stamped.filename, sha256=stamped.sha256, size=stamped.size)
    try:
        fragment = write_fragment(entry, Path(fragments_dir) if fragments_dir else Path(out_dir))
    except BaseException:
        # A stamped wheel without its fragment would be refused at upload: leave neither
        # (but never remove a file an earlier run made).
        if stamped.created:
            stamped.path.unlink(missing_ok=True)
        raise
    return PostbuildResult(wheel, report, stamped, fragment)


def _carry_stamped(wheel: Path, embedded: buildinfo.BuildInfo, out_dir: Path, context: BuildContext,
                   report: AssertionReport, *, fragments_dir: Path | None) -> PostbuildResult:
    cell = context.cell
    differ = []
    if embedded.cell.to_dict() != cell.as_dict():
        differ.append(f"cell {embedded.cell.to_dict()} (this is {cell.as_dict()})")
    if embedded.build_epoch != context.build_epoch:
        differ.append(f"build_epoch {embedded.build_epoch} (today {context.build_epoch})")
    recorded = embedded.arch_list.normalised
    if recorded != context.expected.default.canonical():
        differ.append(f"arch list {recorded} (today {context.expected.default.canonical()})")
    found = {e.path: e.found.canonical() for e in report.extensions}
    if dict(embedded.found or {}) != found:
        differ.append("found targets that are not what the binary holds")
    bundled = {v.path: v.record() for v in report.vendored_results}
    if {p: b.to_dict() for p, b in embedded.bundled.items()} != bundled:
        differ.append("bundled libraries that are not what the wheel holds")
    families = embedded.families if isinstance(embedded.families, Mapping) else {}
    if {n: f.to_dict() for n, f in families.items()} != report.families_record():
        differ.append("kernel families that are not the ones asserted now")
    if not embedded.asserted:
        differ.append("a provenance that is not asserted and passed")
    if differ:
        raise UsageError(f"already stamped by farm, for {'; '.join(differ)}", where=str(wheel),
                         hint="postbuild the builder's unstamped wheel, or rebuild the cell with `farm build`")
    out_dir = Path(out_dir)
    dest = out_dir / wheel.name
    created = not dest.exists()
    if created:
        atomic_write(dest, read_chunks(wheel), mode=0o644)
    elif dest.resolve() != wheel.resolve() and sha256_file(dest) != sha256_file(wheel):
        raise UsageError(f"{dest} already exists with other content",
                         hint="remove it to postbuild again, or choose another --out folder")
    sha, size = sha256_file(dest), dest.stat().st_size
    entry = embedded.ledger_entry(filename=dest.name, sha256=sha, size=size)
    fragment = write_fragment(entry, Path(fragments_dir) if fragments_dir else out_dir)
    return PostbuildResult(wheel, report, StampResult(dest, sha, size, embedded, created), fragment)


def own_cell(wheel: Path) -> tuple[str, str] | None:
    """(cuda, torch) a wheel says it was built for: its ``_build_info.json``, else its local label
    (``+cu130``, ``+cu128torch2.8``); None for a builder's unlabelled wheel."""
    try:
        embedded = buildinfo.read_wheel(wheel)
    except FarmError:
        embedded = None
    if embedded is not None and embedded.cell.cuda is not None and embedded.cell.torch is not None:
        return embedded.cell.cuda, embedded.cell.torch
    label = parse_local_label(Version(WheelName.parse(Path(wheel).name).version).local)
    return None if label is None else (label.cuda, label.torch)


def build_environment(cell: Cell, *, cuda_home: Path | None, builder: str | None,
                      env: Mapping[str, str] | None = None,
                      toolkit: buildinfo.ToolkitRecord | Mapping[str, Any] | None = None, python: str | None = None,
                      torch_built: Mapping[str, Any] | None = None,
                      farm_deps: Sequence[Mapping[str, str]] = (),
                      compile_cache: Mapping[str, Any] | None = None,
                      image: str | None = None) -> dict[str, Any]:
    """What only the build's environment knows, as :class:`BuildContext` fields: the CI run and
    the toolchain (nvcc under ``cuda_home``, else ``$CUDA_HOME``; the torch the build used; the
    compiler cache's counts for the build, left out when it did not count them; a cibuildwheel
    build's image, None for cibuildwheel's own)."""
    env = os.environ if env is None else env
    if cuda_home is None and env.get("CUDA_HOME"):
        cuda_home = Path(env["CUDA_HOME"])
    return {"run": probe.run_from_env(env),
            "toolchain": probe.toolchain(cuda_home=cuda_home, builder=builder, torch_minor=cell.torch,
                                         toolkit=toolkit, python=python, torch_built=torch_built,
                                         farm_deps=farm_deps, image=image,
                                         compile_cache=buildinfo.ABSENT if compile_cache is None else compile_cache)}


def wheel_cell(wheel: Path, cell: Cell) -> Cell:
    """``cell`` with the Python and platform ``wheel``'s tags say, and the CUDA line and torch its
    provenance or label say: equal to ``cell`` exactly when the wheel is of that cell."""
    name = WheelName.parse(Path(wheel).name)
    own = own_cell(Path(wheel))
    cuda, torch = own if own is not None else (cell.cuda, cell.torch)
    return Cell(cell.package, cell.version, cuda, torch, cell_python(name), cell_platform(name))


# -- the config glue ------------------------------------------------------------------------------
def source_of(recipe: Recipe) -> buildinfo.SourceRecord:
    """The recipe's pinned source as provenance records it (a path source with its tree hash),
    with the trees its ``source.vendor`` places into it."""
    src = recipe.source
    record: buildinfo.SourceRecord
    if isinstance(src, GitSource):
        # A recipe pins a tag or a full commit; a 40-hex ref is the commit itself.
        commit = src.ref if len(src.ref) == 40 and all(c in "0123456789abcdef" for c in src.ref) else None
        record = buildinfo.GitSourceRecord(src.repo, src.ref, commit)
    elif isinstance(src, SdistSource):
        record = buildinfo.SdistSourceRecord(src.name, src.version, src.sha256)
    elif isinstance(src, PathSource):
        record = buildinfo.PathSourceRecord(src.display, tree_sha256(src.path) if src.path.is_dir() else None)
    else:
        raise TypeError(f"unknown source {src!r}")
    if not recipe.vendor:
        return record
    vendor = [vendor_description(entry) for entry in recipe.vendor]
    with_vendor = buildinfo.source_from({**record.to_dict(), "vendor": vendor})
    assert with_vendor is not None
    return with_vendor


def recipe_for_wheel(config: FarmConfig, name: WheelName, package: str | None) -> Recipe:
    if package is not None:
        return config.recipe(package)
    want = canonicalize_name(name.dist)
    matches = [r for r in config.recipes.values() if canonicalize_name(r.dist) == want]
    if len(matches) != 1:
        raise UsageError(
            f"{len(matches) or 'no'} recipes build project {name.dist!r}", where=name.filename,
            hint="pass --package NAME",
        )
    return matches[0]


def cuda_line(cuda_home: Path) -> str:
    """``13.0`` from the toolkit's nvcc."""
    major, minor, *_ = probe.nvcc_version(cuda_home).split(".")
    return f"{major}.{minor}"


def context_from_config(
    config: FarmConfig,
    wheel: Path,
    *,
    package: str | None = None,
    cuda: str | None = None,
    torch: str | None = None,
    cuda_home: Path | None = None,
    builder: str | None = None,
    source: buildinfo.SourceRecord | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    toolkit: buildinfo.ToolkitRecord | Mapping[str, Any] | None = None,
    python: str | None = None,
    arch: ArchRequest | None = None,
    torch_built: Mapping[str, Any] | None = None,
) -> tuple[BuildContext, Recipe]:
    """The build context of ``wheel`` from the farm config, the toolkit and the CI environment.

    ``cuda`` defaults to the line of ``cuda_home``'s nvcc; ``torch`` to the installed torch's minor
    (``none`` for recipes that do not link torch). ``source`` defaults to the recipe's pinned
    source (with the tree hash of a path source); a builder that fetched a git or sdist source
    passes the fetched tree's description, which holds the resolved commit. ``arch``: an arch
    request the caller decided; without one the config's request for the wheel's cell is resolved.

    This is the context of a wheel built outside farm (or asserted with ``farm assert``): a wheel
    ``farm build`` made is postbuilt by its build spec instead (``BuildSpec.context``), which
    carries every decision here, so nothing of today's recipe reaches it.
    """
    env = os.environ if env is None else env
    if isinstance(source, Mapping):  # a fetched tree's description (the source stage's plain dict)
        source = buildinfo.source_from(source)
    name = WheelName.parse(Path(wheel).name)
    recipe = recipe_for_wheel(config, name, package)
    own = own_cell(Path(wheel)) if cuda is None or torch is None else None
    if own is not None:  # a stamped or labelled wheel says its cell itself
        cuda = cuda or own[0]
        torch = torch or (own[1] if recipe.links_torch else None)
    if cuda is None:  # the toolkit build_environment records (below): cuda_home, else $CUDA_HOME
        home = cuda_home or env.get("CUDA_HOME")
        if not home:
            raise UsageError("which CUDA line was this wheel built for?", where=name.filename,
                             hint="pass --cuda X.Y or set CUDA_HOME to the toolkit the build used")
        cuda = cuda_line(Path(home))
    if not recipe.links_torch:
        if torch not in (None, NO_TORCH):
            raise UsageError(f"{recipe.name} does not link torch, but --torch {torch} was given",
                             where=recipe.display, hint="drop --torch, or set links_torch: true in the recipe")
        torch = NO_TORCH
    elif torch is None:
        installed = probe.installed_torch()
        if installed is None:
            raise UsageError(f"{recipe.name} links torch: which torch was it built against?",
                             where=name.filename, hint="pass --torch M.m")
        v = Version(installed)
        torch = f"{v.major}.{v.minor}"
    # --cuda / --torch name the cell (its id, its label): the config's lines and minors, as written there
    if cuda not in config.defaults.cuda_lines:
        raise UsageError(f"unknown CUDA line {clip(cuda)!r}", where=name.filename,
                         hint=did_you_mean(cuda, config.defaults.cuda_lines)
                         or f"lines: {', '.join(config.defaults.cuda_lines)}")
    if torch != NO_TORCH and not re.fullmatch(r"\d+\.\d+", torch):
        raise UsageError(f"--torch {clip(torch)!r} is not a torch minor like '2.8'", where=name.filename)
    cell = Cell(recipe.name, recipe.version, cuda, torch, cell_python(name), cell_platform(name))
    if arch is None:  # no spec came with the wheel: the one resolver, as the build would have
        arch = require_arch_request(config, recipe, cell)
    # the request the build was planned with: the assertion checks exactly what was built
    expected = Expected(arch.archs, per_extension=arch.extensions,
                        allow_no_extensions=recipe.jit, cuda_package=True, vendored=vendored_rules(recipe),
                        cuda=cell.cuda)
    context = BuildContext(
        cell=cell,
        expected=expected,
        requested=arch.requested,
        build_epoch=config.effective_epoch(recipe),
        defaults_sha256=config.defaults.sha256,
        recipe_sha256=recipe.sha256,
        source=source_of(recipe) if source is None else source,
        **build_environment(cell, cuda_home=cuda_home, builder=builder, env=env, toolkit=toolkit, python=python,
                            torch_built=torch_built),
        requires_dist=requires_dist(recipe, cell),
        pins=torch_pin(recipe, cell),
    )
    return context, recipe
