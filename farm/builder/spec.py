"""A cell's build spec: everything a build of one cell is decided by, resolved once and frozen.

:func:`resolve_spec` turns (config, recipe, cell, the build's overrides) into a
:class:`BuildSpec`: the arch request (list, as written, origin, per-extension lists), the
toolkit request (line, release, source, components, pins), the build environment (Python,
torch and where it comes from, the build tools) and the recipe's knobs over ``_defaults.yml``'s
(env, nvcc flags, patch script, extra deps, sharding) and what postbuild decides by (the project
name, the effective ``build_epoch``, ``jit``, the vendored-library rules, ``requires_dist`` and the
torch pin, the recipe's source and the config's hashes). The planner renders it, the builder runs
it and postbuild asserts and stamps by it (:meth:`BuildSpec.context`): nothing downstream reads
the recipe again, so a recipe edited after the build does not change what its wheel is held to.

Like cibuildwheel's ``BuildOptions``: resolved once from config and overrides, passed down. It is
written as ``build-spec.json`` beside the build (:meth:`BuildSpec.to_json`) and read back by
:func:`read_spec` (validated; ``farm postbuild --spec``), so a later process asserts the same spec.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.binary.archrule import Expected, FamilyTargets, VendoredRule, vendored_rules
from farm.binary.cuobjdump import PINNED
from farm.builder.compilecache import CompileCache
from farm.errors import FarmError, UsageError
from farm.fsutil import atomic_write
from farm.lint.families import is_pattern
from farm.model.arch import ArchList, Rendering
from farm.model.archrequest import ArchRequest, canonical_arch_list, require_arch_request
from farm.model.cells import NO_TORCH, Cell, fill_placeholders, requires_dist, torch_pin
from farm.model.config import (
    BuildKnobs,
    FarmConfig,
    Recipe,
    VerifyKnobs,
    release_problem,
    requirement_refs,
    url_problem,
)
from farm.provenance import buildinfo, shape
from farm.provenance.postbuild import BuildContext, source_of
from farm.provenance.shape import ShapeError
from farm.toolkit.request import ToolkitRequest, request_for, runtime_wheels

SPEC_FILE = "build-spec.json"
# 2: postbuild's decisions (dist, epoch, jit, vendored rules, requires_dist, pins, source, hashes)
# and the components an installed toolkit is checked for joined the spec. 3: the import check's
# knobs (verify) and the farm wheels the build needs (farm_deps). 4: kernel families (each
# family's sources and exact targets).
# 5: the compiler cache (on/off, backend, folder) joined it. 6: the per-platform patch script and the MSVC toolset.
# 7: the import check's runtime libraries (verify.runtime_libs and the wheels they resolve to).
# 8: a kernel family's globs of the sources the build generates (postbuild.families[].patterns).
# 9: the assertion's cuobjdump version (postbuild.cuobjdump).
SPEC_VERSION = 9
MAX_SPEC_BYTES = 1 << 20  # a spec is a few KB
BUILD_REQUIREMENTS: tuple[str, ...] = ("setuptools>=64", "wheel", "ninja")


@dataclass(frozen=True)
class SpecOverrides:
    """What the command line and the environment decide over the config (``--torch-index``,
    ``--toolkit-source``, ``--redist-url``; ``env`` is where ``$FARM_CUDA_REDIST_URL`` and a
    smaller ``$MAX_JOBS`` are read)."""

    torch_index: str | None = None
    toolkit_source: str | None = None
    redist_url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    compile_cache: CompileCache = field(default_factory=CompileCache.off)  # --no-compile-cache, the backend


@dataclass(frozen=True)
class BuildSpec:
    cell: Cell
    arch: ArchRequest
    toolkit: ToolkitRequest
    torch_version: str | None  # the full version to install ("2.8.0"); None for torch-free cells
    torch_index: str | None  # where it comes from: a URL or "pip"; None for torch-free cells
    knobs: BuildKnobs  # the recipe's over _defaults.yml's
    dist: str  # the project name the wheel must carry
    build_epoch: int  # effective: _defaults.yml's + the recipe's
    jit: bool  # kernels compiled at run time: a wheel without an extension is no defect
    source: buildinfo.SourceRecord  # the recipe's pinned source (a build records the fetched tree's instead)
    defaults_sha256: str | None  # the configuration the spec was resolved from
    recipe_sha256: str | None
    vendored: tuple[VendoredRule, ...] = ()  # the recipe's rules for bundled libraries, first match wins
    requires_dist: tuple[str, ...] = ()  # added to the wheel's METADATA, placeholders filled
    pins: tuple[str, ...] = ()  # replace the wheel's own requirement on their project (torch==2.8.*)
    required_components: tuple[str, ...] = ()  # what an installed CUDA_HOME must hold (torch's, the recipe's)
    compile_jobs: int = 1  # the recipe's `sharding` for the cell's platform
    tools: tuple[str, ...] = BUILD_REQUIREMENTS  # installed before the build, beside torch
    verify: VerifyKnobs = field(default_factory=VerifyKnobs)  # the import check of the built wheel
    # extra_deps that are farm wheels of this cell (cumm==0.7.11+cu128): from farm's wheelhouse
    farm_deps: tuple[str, ...] = ()
    families: tuple[FamilyTargets, ...] = ()  # kernel families and the exact targets of their TUs
    compile_cache: CompileCache = field(default_factory=CompileCache.off)  # whether and where compiles are cached
    # NVIDIA's wheels of verify.runtime_libs for the cell's CUDA line, pinned: the import check installs them
    runtime_wheels: tuple[str, ...] = ()
    cuobjdump: str = PINNED  # the version the assertion runs (its provenance records the same)

    @property
    def python(self) -> str:
        """The Python version the build runs (``3.11``)."""
        return self.cell.python_version

    @property
    def vendored_globs(self) -> tuple[str, ...]:
        """The declared bundled libraries (what the repair step may bundle)."""
        return tuple(rule.glob for rule in self.vendored)

    @property
    def expected(self) -> Expected:
        """What the wheel's extensions and bundled libraries must hold: the arch request the build
        was given, the recipe's per-extension lists and vendored rules as resolved here, and device
        code made by the cell's CUDA line."""
        return Expected(self.arch.archs, per_extension=self.arch.extensions, allow_no_extensions=self.jit,
                        cuda_package=True, vendored=self.vendored, cuda=self.cell.cuda, families=self.families)

    def context(self, *, run: buildinfo.Run, toolchain: buildinfo.Toolchain,
                source: buildinfo.SourceRecord | None = None, duration_s: float | None = None) -> BuildContext:
        """Postbuild's context: this spec's decisions, plus what only the build's environment knows
        (the CI run, the toolchain, the fetched tree's ``source`` when the build fetched one, and
        how long the build took)."""
        return BuildContext(
            cell=self.cell, expected=self.expected, requested=self.arch.requested, build_epoch=self.build_epoch,
            defaults_sha256=self.defaults_sha256, recipe_sha256=self.recipe_sha256,
            source=self.source if source is None else source, run=run, toolchain=toolchain,
            requires_dist=self.requires_dist, pins=self.pins, duration_s=duration_s, cuobjdump=self.cuobjdump)

    def to_json(self) -> dict[str, Any]:
        k = self.knobs
        t = self.toolkit
        return {
            "spec_version": SPEC_VERSION,
            "cell": {"package": self.cell.package, "version": self.cell.version, **self.cell.as_dict()},
            "arch": self.arch.to_json(),
            "toolkit": {"cuda": t.cuda, "source": t.source, "release": t.release, "platform": t.platform,
                        "components": list(t.components), "redist_url": t.redist_url,
                        "manifest_sha256": t.manifest_sha256, "pypi": list(t.pypi)},
            "environment": {"python": self.python, "torch": self.torch_version, "torch_index": self.torch_index,
                            "tools": list(self.tools)},
            "knobs": {"subdir": k.subdir, "patch_script": list(k.patch_script),
                      "platform_patch_script": dict(k.platform_patch_script), "extra_deps": list(k.extra_deps),
                      "extra_cuda_components": list(k.extra_cuda_components), "nvcc_flags": list(k.nvcc_flags),
                      "max_jobs": k.max_jobs, "nvcc_threads": k.nvcc_threads, "env": dict(k.env),
                      "arch_env": {name: how.value for name, how in k.arch_env.items()},
                      "system_packages": list(k.system_packages), "msvc_toolset": k.msvc_toolset,
                      "compile_jobs": self.compile_jobs,
                      "farm_deps": list(self.farm_deps),
                      "required_components": list(self.required_components)},
            "postbuild": {"dist": self.dist, "build_epoch": self.build_epoch, "jit": self.jit,
                          "vendored": [rule.to_json() for rule in self.vendored],
                          "requires_dist": list(self.requires_dist), "pins": list(self.pins),
                          "source": self.source.to_dict(), "defaults_sha256": self.defaults_sha256,
                          "recipe_sha256": self.recipe_sha256,
                          "families": [family.to_json() for family in self.families],
                          "cuobjdump": self.cuobjdump},
            "verify": {**shape.encode(self.verify), "runtime_wheels": list(self.runtime_wheels)},
            "compile_cache": self.compile_cache.to_json(),
        }

    @property
    def digest(self) -> str:
        """sha256 of the spec's canonical JSON: jobs that must build the same thing (the compile
        shards and the link job of a cell) compare it."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_json(cls, data: object, *, where: str) -> BuildSpec:
        """The spec :meth:`to_json` wrote; a missing or mistyped field is a :class:`UsageError`."""
        r = _Reader(where)
        top = r.obj(data, "spec")
        version = top.get("spec_version")
        if type(version) is not int or version != SPEC_VERSION:  # `true` equals 1 in Python, not in JSON
            if type(version) is int:
                newer = "a newer" if version > SPEC_VERSION else "an older"
                raise UsageError(f"spec_version {version}: the spec was written by {newer} farm, this farm reads "
                                 f"version {SPEC_VERSION}", where=where,
                                 hint="postbuild with the farm that built the wheel, or rebuild the cell with this "
                                      "farm (`farm build` writes the spec)")
            raise r.bad("spec_version", f"{SPEC_VERSION} (this farm's)")
        c = r.obj(top.get("cell"), "cell")
        cell = Cell(*(r.text(c, f"cell.{key}") for key in ("package", "version", "cuda", "torch", "python",
                                                           "platform")))
        t = r.obj(top.get("toolkit"), "toolkit")
        toolkit = ToolkitRequest(
            r.text(t, "toolkit.cuda"), r.text(t, "toolkit.source"), r.text(t, "toolkit.release"),
            r.text(t, "toolkit.platform"), r.texts(t, "toolkit.components"), r.text(t, "toolkit.redist_url"),
            r.opt_text(t, "toolkit.manifest_sha256"), r.texts(t, "toolkit.pypi"))
        # the release and the root name a cache folder and a download: the rules of their config twins
        for key, problem in (("toolkit.release", release_problem(toolkit.release, toolkit.cuda)),
                             ("toolkit.redist_url", url_problem(toolkit.redist_url))):
            if problem:
                raise UsageError(f"{key} {problem}", where=where, hint=f"pass the {SPEC_FILE} farm build wrote")
        e = r.obj(top.get("environment"), "environment")
        k = r.obj(top.get("knobs"), "knobs")
        knobs = BuildKnobs(
            subdir=r.opt_text(k, "knobs.subdir"), patch_script=r.texts(k, "knobs.patch_script"),
            platform_patch_script=r.text_map(k, "knobs.platform_patch_script"),
            extra_deps=r.texts(k, "knobs.extra_deps"), extra_cuda_components=r.texts(k, "knobs.extra_cuda_components"),
            nvcc_flags=r.texts(k, "knobs.nvcc_flags"), max_jobs=r.opt_count(k, "knobs.max_jobs"),
            nvcc_threads=r.opt_count(k, "knobs.nvcc_threads"), env=r.text_map(k, "knobs.env"),
            arch_env=r.renderings(k, "knobs.arch_env"),
            system_packages=r.texts(k, "knobs.system_packages"), msvc_toolset=r.opt_text(k, "knobs.msvc_toolset"))
        p = r.obj(top.get("postbuild"), "postbuild")
        v = r.obj(top.get("verify"), "verify")
        spec = cls(
            cell, ArchRequest.from_json(top.get("arch"), where=where), toolkit,
            r.opt_text(e, "environment.torch"), r.opt_text(e, "environment.torch_index"), knobs,
            dist=r.text(p, "postbuild.dist"), build_epoch=r.count(p, "postbuild.build_epoch", least=0),
            jit=r.flag(p, "postbuild.jit"), source=r.source(p, "postbuild.source"),
            defaults_sha256=r.opt_text(p, "postbuild.defaults_sha256"),
            recipe_sha256=r.opt_text(p, "postbuild.recipe_sha256"),
            vendored=r.vendored(p, "postbuild.vendored"), requires_dist=r.texts(p, "postbuild.requires_dist"),
            pins=r.texts(p, "postbuild.pins"), required_components=r.texts(k, "knobs.required_components"),
            compile_jobs=r.count(k, "knobs.compile_jobs"), tools=r.texts(e, "environment.tools"),
            verify=r.verify(v, "verify"), runtime_wheels=r.texts(v, "verify.runtime_wheels"),
            farm_deps=r.texts(k, "knobs.farm_deps"),
            families=r.families(p, "postbuild.families"),
            compile_cache=CompileCache.from_json(top.get("compile_cache"), where=where),
            cuobjdump=r.text(p, "postbuild.cuobjdump"))
        if not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,4}", spec.cuobjdump):
            raise r.bad("postbuild.cuobjdump", "a cuobjdump version (13.5.37)")
        if not set(spec.farm_deps) <= set(spec.knobs.extra_deps):
            raise r.bad("knobs.farm_deps", "a list of the spec's extra_deps")
        if r.text(e, "environment.python") != spec.python:
            raise r.bad("environment.python", f"the cell's Python ({spec.python})")
        if spec.cell.torch != NO_TORCH and f"torch=={spec.cell.torch}.*" not in spec.pins:
            # the wheel runs only with the torch minor it was built against: no spec loosens that
            raise r.bad("postbuild.pins", f"a list holding the cell's torch pin (torch=={spec.cell.torch}.*)")
        return spec


class _Reader:
    """Typed field access on a parsed spec, each failure naming the file and the key."""

    def __init__(self, where: str) -> None:
        self.where = where

    def bad(self, key: str, what: str) -> UsageError:
        return UsageError(f"{key} must be {what}", where=self.where,
                          hint="write the spec with farm build (it is the build's record), do not edit it")

    def obj(self, value: object, key: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.bad(key, "an object")
        return value

    def text(self, data: Mapping[str, Any], key: str) -> str:
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def opt_text(self, data: Mapping[str, Any], key: str) -> str | None:
        value = data.get(key.rsplit(".", 1)[-1])
        if value is not None and not isinstance(value, str):
            raise self.bad(key, "a string or null")
        return value

    def count(self, data: Mapping[str, Any], key: str, *, least: int = 1) -> int:
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise self.bad(key, "a positive integer" if least == 1 else f"an integer >= {least}")
        return value

    def verify(self, data: Mapping[str, Any], key: str) -> VerifyKnobs:
        """The recipe's ``verify:`` knobs, read by their one definition (:class:`VerifyKnobs`)."""
        try:
            knobs: VerifyKnobs = shape.decode(VerifyKnobs, data, (key,), skip=("runtime_wheels",))
        except ShapeError as exc:
            raise self.bad(exc.where.replace("/", "."), f"as the recipe's verify: knobs are ({exc.message})") from None
        return knobs

    def flag(self, data: Mapping[str, Any], key: str) -> bool:
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, bool):
            raise self.bad(key, "true or false")
        return value

    def source(self, data: Mapping[str, Any], key: str) -> buildinfo.SourceRecord:
        value = self.obj(data.get(key.rsplit(".", 1)[-1]), key)
        try:
            source = buildinfo.source_from(value)
        except (FarmError, ShapeError, KeyError, TypeError, ValueError):
            source = None
        if source is None or source.to_dict() != dict(value):
            raise self.bad(key, "a source as provenance records it (git, sdist or path)")
        return source

    def records(self, data: Mapping[str, Any], key: str, fields: set[str],
                what: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """The list at ``key``: each item, with its key, an object of exactly ``fields`` (``what``: the list)."""
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, list):
            raise self.bad(key, what)
        for i, item in enumerate(value):
            at = f"{key}[{i}]"
            if set(self.obj(item, at)) != fields:
                raise self.bad(at, what)
            yield at, item

    def vendored(self, data: Mapping[str, Any], key: str) -> tuple[VendoredRule, ...]:
        rules = []
        for at, rule in self.records(data, key, {"glob", "archs", "exempt"}, "a list of {glob, archs, exempt} rules"):
            glob, exempt = self.text(rule, f"{at}.glob"), self.opt_text(rule, f"{at}.exempt")
            text = self.opt_text(rule, f"{at}.archs")
            if (text is None) == (exempt is None):
                raise self.bad(at, "a rule with an arch list or an exemption, not both")
            archs = None if text is None else ArchList(frozenset()) if text == "" else canonical_arch_list(
                text, self.where, f"{at}.archs")
            rules.append(VendoredRule(glob, archs, exempt))
        return tuple(rules)

    def families(self, data: Mapping[str, Any], key: str) -> tuple[FamilyTargets, ...]:
        families = []
        for at, family in self.records(data, key, {"name", "sources", "patterns", "targets"},
                                       "a list of {name, sources, patterns, targets} kernel families"):
            sources = self.texts(family, f"{at}.sources")
            patterns = self.texts(family, f"{at}.patterns")
            if not all(s.endswith(".cu") for s in sources):
                raise self.bad(f"{at}.sources", "a list of .cu paths")
            if not all(p.endswith(".cu") and is_pattern(p) for p in patterns):
                raise self.bad(f"{at}.patterns", "a list of globs of .cu paths")
            if not sources and not patterns:
                raise self.bad(at, "a family with sources or patterns")
            text = self.text(family, f"{at}.targets")
            targets = ArchList(frozenset()) if text == "" else canonical_arch_list(text, self.where, f"{at}.targets")
            families.append(FamilyTargets(self.text(family, f"{at}.name"), sources, targets, patterns))
        if len({f.name for f in families}) != len(families):
            raise self.bad(key, "families with distinct names")
        return tuple(families)

    def opt_count(self, data: Mapping[str, Any], key: str) -> int | None:
        value = data.get(key.rsplit(".", 1)[-1])
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise self.bad(key, "an integer or null")
        return value

    def texts(self, data: Mapping[str, Any], key: str) -> tuple[str, ...]:
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.bad(key, "a list of strings")
        return tuple(value)

    def renderings(self, data: Mapping[str, Any], key: str) -> dict[str, Rendering]:
        try:
            return {name: Rendering(how) for name, how in self.text_map(data, key).items()}
        except ValueError:
            raise self.bad(key, f"an object of renderings ({', '.join(r.value for r in Rendering)})") from None

    def text_map(self, data: Mapping[str, Any], key: str) -> dict[str, str]:
        value = data.get(key.rsplit(".", 1)[-1])
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise self.bad(key, "an object of strings")
        return dict(value)


# ------------------------------------------------------------------------------------------------
def knobs(config: FarmConfig, recipe: Recipe) -> BuildKnobs:
    """The recipe's build knobs over ``_defaults.yml``'s: a knob the recipe leaves unset is inherited."""
    base, own = config.defaults.build, recipe.build
    return BuildKnobs(
        subdir=own.subdir,
        patch_script=own.patch_script,
        platform_patch_script=own.platform_patch_script,
        extra_deps=own.extra_deps or base.extra_deps,
        extra_cuda_components=own.extra_cuda_components or base.extra_cuda_components,
        nvcc_flags=own.nvcc_flags or base.nvcc_flags,
        max_jobs=own.max_jobs if own.max_jobs is not None else base.max_jobs,
        nvcc_threads=own.nvcc_threads if own.nvcc_threads is not None else base.nvcc_threads,
        env={**base.env, **own.env},
        arch_env={**base.arch_env, **own.arch_env},
        system_packages=own.system_packages or base.system_packages,
        msvc_toolset=own.msvc_toolset or base.msvc_toolset,
    )


def bounded_jobs(max_jobs: int | None, env: Mapping[str, str]) -> int | None:
    """The recipe's (or ``_defaults.yml``'s) ``max_jobs``, unless the environment's ``MAX_JOBS`` is
    smaller: a maintainer's bound on this host's parallel compiles is never raised by a recipe."""
    text = env.get("MAX_JOBS", "").strip()
    if not text:
        return max_jobs
    if not re.fullmatch(r"[0-9]{1,6}", text) or int(text) < 1:
        raise UsageError(f"MAX_JOBS={text!r} in the environment is not a positive whole number",
                         hint="set MAX_JOBS=2 (the most parallel compiles on this host), or unset it")
    return int(text) if max_jobs is None else min(max_jobs, int(text))


def torch_version_for(config: FarmConfig, cell: Cell) -> str | None:
    """The full torch version the grid pins for the cell (``2.8.0``); None for torch-free cells."""
    if cell.torch == NO_TORCH:
        return None
    for row in config.defaults.grid:
        if row.cuda == cell.cuda and row.torch_minor == cell.torch:
            return row.torch
    raise UsageError(f"cell {cell.id}: the grid has no torch {cell.torch} for CUDA {cell.cuda}",
                     where=config.defaults.path.name)


def torch_index_for(config: FarmConfig, cell: Cell, override: str | None = None) -> str:
    """Where the cell's torch comes from: ``override`` (--torch-index / $FARM_TORCH_INDEX), else the
    CUDA line's ``torch_index`` in ``_defaults.yml``; ``{cu}`` in a URL becomes the cell's ``cu130``."""
    index = override or config.defaults.torch_index.get(cell.cuda)
    if index is None:
        raise UsageError(f"cell {cell.id}: _defaults.yml names no torch_index for CUDA {cell.cuda}",
                         where=config.defaults.path.name,
                         hint="add the line under torch_index, or pass --torch-index URL|pip")
    return index.replace("{cu}", cell.cu)


def resolve_spec(
    config: FarmConfig,
    recipe: Recipe,
    cell: Cell,
    overrides: SpecOverrides | None = None,
    *,
    arch: ArchRequest | None = None,
    torch_version: str | None = None,
) -> BuildSpec:
    """The one resolution of a cell's build. ``arch``/``torch_version``: what the matrix already
    resolved for the cell (carried, not resolved again); otherwise resolved here."""
    if cell.package != recipe.name:
        raise UsageError(f"cell {cell.id} is not a cell of package {recipe.name!r}")
    overrides = overrides or SpecOverrides()
    if arch is None:
        arch = require_arch_request(config, recipe, cell)
    if torch_version is None:
        torch_version = torch_version_for(config, cell)
    knob = knobs(config, recipe)
    knob = replace(knob, max_jobs=bounded_jobs(knob.max_jobs, overrides.env))
    farm_deps = tuple(fill_placeholders(recipe, cell, d) for d in knob.extra_deps if requirement_refs(d))
    knob = replace(knob, extra_deps=tuple(fill_placeholders(recipe, cell, d) for d in knob.extra_deps))
    return BuildSpec(
        cell=cell,
        arch=arch,
        # the line's components, torch's for a torch-linked cell, the recipe's extra
        toolkit=request_for(config.defaults.toolkit, cell.cuda, torch=cell.torch != NO_TORCH,
                            extra=knob.extra_cuda_components, source=overrides.toolkit_source, platform=cell.platform,
                            redist_url=overrides.redist_url, env=overrides.env),
        torch_version=torch_version,
        torch_index=torch_index_for(config, cell, overrides.torch_index) if torch_version is not None else None,
        knobs=knob,
        dist=recipe.dist,
        build_epoch=config.effective_epoch(recipe),
        jit=recipe.jit,
        source=source_of(recipe),
        defaults_sha256=config.defaults.sha256,
        recipe_sha256=recipe.sha256,
        vendored=vendored_rules(recipe),
        requires_dist=requires_dist(recipe, cell),
        pins=torch_pin(recipe, cell),
        required_components=(*(config.defaults.toolkit.torch_components if cell.torch != NO_TORCH else ()),
                             *knob.extra_cuda_components),
        compile_jobs=recipe.sharding.jobs_for(cell.platform) if recipe.sharding else 1,
        verify=recipe.verify,
        farm_deps=farm_deps,
        compile_cache=overrides.compile_cache,
        runtime_wheels=runtime_wheels(config.defaults.toolkit, cell.cuda, recipe.verify.runtime_libs,
                                      where=recipe.display),
    )


def families_from_lint(scope: Mapping[str, Any]) -> tuple[FamilyTargets, ...]:
    """The kernel families the lint of the source as built derived for the cell (its scope's
    family table), as the assertion checks them: named ``NAME (file:line)``, since a CMake project
    may give one arch variable to several families."""
    table = scope.get("families") or []
    sources = scope.get("family_sources") or []
    patterns = scope.get("family_patterns") or []
    if not len(table) == len(sources) == len(patterns):
        raise UsageError("the lint report's family table, its family sources and its family patterns differ "
                         "in length", hint="re-run the lint with this farm (its cache is keyed by the farm's version)")
    return tuple(FamilyTargets(f"{name} ({where})", tuple(srcs), ArchList.parse(targets) if targets else
                               ArchList(frozenset()), tuple(globs))
                 for (name, where, _, targets, _), srcs, globs in zip(table, sources, patterns, strict=True))


def write_spec(spec: BuildSpec, directory: Path) -> Path:
    """``build-spec.json`` in ``directory``: the build's record of what it was asked to build."""
    path = Path(directory) / SPEC_FILE
    atomic_write(path, [(json.dumps(spec.to_json(), indent=1, sort_keys=True) + "\n").encode()], durable=False)
    return path


def read_spec(path: Path) -> BuildSpec:
    """The spec at ``path``, validated (a :class:`UsageError` naming the file otherwise)."""
    try:
        raw = jsonread.read_bounded(path, MAX_SPEC_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read the build spec: {exc.strerror or exc}", where=str(path),
                         hint=f"pass the {SPEC_FILE} farm build wrote in the cell's build folder") from None
    except ValueError as exc:
        raise UsageError(f"the build spec is {exc}", where=str(path),
                         hint=f"pass the {SPEC_FILE} farm build wrote in the cell's build folder") from None
    try:
        data = jsonread.loads(raw)
    except ValueError as exc:
        raise UsageError(f"the build spec is not JSON farm wrote: {exc}", where=str(path)) from None
    return BuildSpec.from_json(data, where=str(path))

