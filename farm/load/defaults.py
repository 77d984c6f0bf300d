"""``_defaults.yml`` read into :class:`~farm.model.config.Defaults`, its publish targets into their
kinds' settings (:func:`farm.publish.targets.parse_targets`)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from farm.errors import ConfigError, did_you_mean
from farm.load.sections import (
    COMPONENT,
    COMPONENT_HINT,
    CUDA_LINE,
    SHA256,
    TORCH_MINOR,
    Section,
    arch_spec,
    check_cuda_key,
    component_names,
    load_build,
    validate_archs,
    version_str,
)
from farm.model.arch import KNOWN_CUDA_LINES
from farm.model.config import (
    DEFAULTS_FILE,
    PLATFORM_GROUPS,
    PLATFORMS,
    TORCH_INDEX_PIP,
    ArchPolicy,
    ArchSpec,
    BuildKnobs,
    Defaults,
    GridRow,
    Phantom,
    ToolkitConfig,
    ToolkitLine,
    release_problem,
    url_problem,
)
from farm.model.yamlsrc import YList, load_yaml
from farm.publish.targets import PublishTarget, parse_targets

_PY_VERSION = re.compile(r"^3\.\d{1,2}$")


# ------------------------------------------------------------------------------------------------
# _defaults.yml
# ------------------------------------------------------------------------------------------------
_DEFAULTS_KEYS = (
    "build_epoch", "cuda_lines", "python", "platforms", "grid", "phantoms",
    "arch_policy", "publish", "default_target", "build", "toolkit", "torch_index",
)


def load_defaults(path: Path, *, display: str = DEFAULTS_FILE) -> Defaults:
    data, raw = load_yaml(path, display=display)
    top = Section(data, display, "")
    epoch = top.get("build_epoch", int, required=True)
    if epoch < 0:
        raise ConfigError("'build_epoch' must be >= 0", where=top.where("build_epoch"))

    cuda_lines = top.str_list("cuda_lines", required=True) or ()
    lines_value = top.data["cuda_lines"]
    for i, line in enumerate(cuda_lines):
        if not CUDA_LINE.match(line):
            raise ConfigError(f"CUDA line {line!r} is not like '12.8'", where=f"{display}:{lines_value.line_of(i)}")
        if line not in KNOWN_CUDA_LINES:
            raise ConfigError(
                f"CUDA line {line!r} has no nvcc support table in farm",
                where=f"{display}:{lines_value.line_of(i)}",
                hint=f"farm knows {', '.join(KNOWN_CUDA_LINES)}; add the line to farm/arch.py first",
            )

    py = top.section("python", required=True)
    assert py is not None
    py_min = version_str(py, "min", _PY_VERSION, "3.10", required=True)
    py_max = version_str(py, "max", _PY_VERSION, "3.14", required=True)
    py.done(("min", "max"))

    platforms = top.str_list("platforms", required=True) or ()
    for i, plat in enumerate(platforms):
        if plat not in PLATFORMS:
            raise ConfigError(
                f"unknown platform {plat!r}",
                where=f"{display}:{top.data['platforms'].line_of(i)}",
                hint=did_you_mean(plat, PLATFORMS) or f"platforms: {', '.join(PLATFORMS)}",
            )

    grid = _load_grid(top, cuda_lines)
    phantoms = _load_phantoms(top, cuda_lines, grid)
    policy = _load_policy(top, cuda_lines, grid)
    publish = _load_publish(top, path.parent, display)
    default_target = top.get("default_target", str)
    if default_target is not None and default_target not in publish:
        raise ConfigError(
            f"default_target {default_target!r} is not a publish target",
            where=top.where("default_target"),
            hint=did_you_mean(default_target, publish) or f"targets: {', '.join(publish)}",
        )
    build_sec = top.section("build")
    build = load_build(build_sec) if build_sec else BuildKnobs()
    toolkit_sec = top.section("toolkit")
    toolkit = _load_toolkit(toolkit_sec, cuda_lines) if toolkit_sec else ToolkitConfig()
    torch_index = _load_torch_index(top, cuda_lines, grid)
    top.done(_DEFAULTS_KEYS)
    return Defaults(
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
        build_epoch=epoch,
        cuda_lines=cuda_lines,
        python_min=py_min,
        python_max=py_max,
        platforms=platforms,
        grid=grid,
        phantoms=phantoms,
        policy=policy,
        publish=publish,
        default_target=default_target,
        build=build,
        toolkit=toolkit,
        torch_index=torch_index,
    )


def check_torch_index(value: str, where: str) -> str:
    """A torch source: an http(s)/file URL of a PEP 503 index, or ``pip``."""
    if value == TORCH_INDEX_PIP or url_problem(value.replace("{cu}", "cu130")) is None:
        return value
    raise ConfigError(f"torch index {value!r} is neither a URL nor 'pip'", where=where,
                      hint="give a PEP 503 index URL like https://download.pytorch.org/whl/cu130, "
                           "or 'pip' for pip's own configured indexes")


def _load_torch_index(top: Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> dict[str, str]:
    sec = top.section("torch_index")
    if sec is None:
        return {}
    out = {}
    for cuda in sec.data:
        check_cuda_key(sec, cuda, cuda_lines, "torch_index")
        out[cuda] = check_torch_index(sec.get(cuda, str), sec.where(cuda))
    missing = sorted({r.cuda for r in grid} - set(out))
    if missing:  # a cell of that line could not say where its torch comes from
        raise ConfigError(f"torch_index names no index for CUDA {', '.join(missing)}, which the grid builds",
                          where=sec.where(), hint="add a line per CUDA line, e.g. '13.0': https://download.pytorch.org/whl/cu130")
    return out
TOOLKIT_SOURCES = ("redist", "pypi")


def _load_toolkit(sec: Section, cuda_lines: tuple[str, ...]) -> ToolkitConfig:
    url = sec.get("redist_url", str, default=ToolkitConfig.redist_url)
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"{sec.key_path('redist_url')} {problem}", where=sec.where("redist_url"))
    base = component_names(sec, "components") or ()
    torch = component_names(sec, "torch_components") or ()
    lines_sec = sec.section("lines", required=True)
    assert lines_sec is not None
    lines: dict[str, ToolkitLine] = {}
    for cuda in lines_sec.data:
        check_cuda_key(lines_sec, cuda, cuda_lines, "a toolkit pin")
        one = lines_sec.section(cuda)
        assert one is not None
        release = one.get("release", str, required=True, fix=f"quote it: release: '{cuda}.0'")
        problem = release_problem(release, cuda)
        if problem:
            raise ConfigError(f"{one.key_path('release')} {problem}", where=one.where("release"))
        digest = one.get("manifest_sha256", str)
        if digest is not None and not SHA256.match(digest):
            raise ConfigError(f"{one.key_path('manifest_sha256')} is not a sha256 (64 hex digits)",
                              where=one.where("manifest_sha256"))
        source = one.get("source", str, default="redist")
        if source not in TOOLKIT_SOURCES:
            raise ConfigError(f"{one.key_path('source')} {source!r} is not one of {', '.join(TOOLKIT_SOURCES)}",
                              where=one.where("source"), hint=did_you_mean(source, TOOLKIT_SOURCES) or None)
        components = component_names(one, "components") or base
        pypi_sec = one.section("pypi")
        pypi: dict[str, str] = {}
        if pypi_sec is not None:
            for comp in pypi_sec.data:
                if not COMPONENT.match(comp):
                    raise ConfigError(f"{pypi_sec.key_path(comp)} is not a CUDA component name",
                                      where=pypi_sec.where(comp), hint=COMPONENT_HINT)
                pypi[comp] = version_str(pypi_sec, comp, re.compile(r"^\d+(\.\d+)+$"), "13.0.88")
        if source == "pypi":
            missing = [c for c in (*components, *torch) if c not in pypi]
            if missing:
                raise ConfigError(f"{one.key_path('pypi')} pins no wheel for {', '.join(missing)}",
                                  where=one.where("pypi" if pypi_sec else None),
                                  hint="pin each component's wheel version, or use source: redist")
        one.done(("release", "manifest_sha256", "source", "components", "pypi"))
        if not components:
            raise ConfigError(f"no toolkit components for CUDA {cuda}", where=one.where(),
                              hint="set toolkit.components (e.g. cuda_nvcc, cuda_cudart, cuda_cccl)")
        lines[cuda] = ToolkitLine(cuda, release, digest, source, components, pypi, one.where())
    sec.done(("redist_url", "components", "torch_components", "lines"))
    return ToolkitConfig(url, torch, lines)


def _load_grid(top: Section, cuda_lines: tuple[str, ...]) -> tuple[GridRow, ...]:
    rows = top.get("grid", list, required=True)
    out = []
    seen: dict[tuple[str, str], str] = {}
    for i, item in enumerate(rows):
        sec = Section(item, top.file, f"grid[{i}]", rows.line_of(i))
        cuda = version_str(sec, "cuda", CUDA_LINE, "12.8", required=True)
        check_cuda_key(sec, cuda, cuda_lines, f"grid[{i}]")
        torch = sec.get("torch", str, required=True, fix="quote it: torch: '2.8.0'")
        try:
            Version(torch)
        except InvalidVersion:
            raise ConfigError(f"torch {torch!r} is not a version", where=sec.where("torch")) from None
        pythons = sec.str_list("python", required=True) or ()
        for p in pythons:
            if not _PY_VERSION.match(p):
                raise ConfigError(f"python {p!r} is not like '3.11'", where=sec.where("python"))
        sec.done(("cuda", "torch", "python"))
        row = GridRow(cuda, torch, pythons, sec.where())
        key = (cuda, row.torch_minor)
        if key in seen:
            raise ConfigError(
                f"grid has CUDA {cuda} with torch {row.torch_minor} twice (also {seen[key]})", where=row.where
            )
        seen[key] = row.where
        out.append(row)
    return tuple(out)


def _load_phantoms(top: Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> frozenset[Phantom]:
    items = top.get("phantoms", list, default=YList())
    declared = {(r.cuda, r.torch_minor): r.pythons for r in grid}
    out = set()
    for i, item in enumerate(items):
        sec = Section(item, top.file, f"phantoms[{i}]", items.line_of(i))
        cuda = version_str(sec, "cuda", CUDA_LINE, "12.8", required=True)
        check_cuda_key(sec, cuda, cuda_lines, f"phantoms[{i}]")
        torch = version_str(sec, "torch", TORCH_MINOR, "2.8", required=True)
        python = version_str(sec, "python", _PY_VERSION, "3.13", required=True)
        plat = sec.get("platform", str, required=True)
        if plat not in PLATFORMS:
            raise ConfigError(f"unknown platform {plat!r}", where=sec.where("platform"),
                              hint=did_you_mean(plat, PLATFORMS) or None)
        sec.done(("cuda", "torch", "python", "platform"))
        if python not in declared.get((cuda, torch), ()):
            # a phantom that matches no grid cell hides a typo: the cell it meant stays scheduled
            raise ConfigError(f"phantoms[{i}] ({cuda}, torch {torch}, Python {python}) matches no grid cell",
                              where=sec.where(), hint="fix it to a (cuda, torch, python) of the grid, or remove it")
        out.add(Phantom(cuda, torch, python, plat))
    return frozenset(out)


def _load_policy(top: Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> ArchPolicy:
    sec = top.section("arch_policy", required=True)
    assert sec is not None
    groups = sorted(set(PLATFORM_GROUPS.values()))
    rows: dict[str, dict[str, ArchSpec]] = {}
    for group in groups:
        gsec = sec.section(group, required=group == "x86_64")
        rows[group] = {}
        if gsec is None:
            continue
        for cuda in gsec.data:
            check_cuda_key(gsec, cuda, cuda_lines, f"arch_policy.{group}")
            rows[group][cuda] = validate_archs(arch_spec(gsec, cuda), cuda)
    exceptions: dict[str, dict[tuple[str, str], ArchSpec]] = {g: {} for g in groups}
    items = sec.get("exceptions", list, default=YList())
    for i, item in enumerate(items):
        esec = Section(item, sec.file, f"arch_policy.exceptions[{i}]", items.line_of(i))
        cuda = version_str(esec, "cuda", CUDA_LINE, "12.8", required=True)
        check_cuda_key(esec, cuda, cuda_lines, f"arch_policy.exceptions[{i}]")
        torch = version_str(esec, "torch", TORCH_MINOR, "2.8", required=True)
        if not any(r.cuda == cuda and r.torch_minor == torch for r in grid):
            raise ConfigError(f"arch_policy.exceptions[{i}] ({cuda}, torch {torch}) matches no grid row",
                              where=esec.where(), hint="fix it to a (cuda, torch) of the grid, or remove it")
        group = esec.get("platforms", str, default="x86_64")
        if group not in groups:
            raise ConfigError(f"unknown platform group {group!r}", where=esec.where("platforms"),
                              hint=f"one of {', '.join(groups)}")
        spec = arch_spec(esec, "arch_list")
        if spec is None:
            esec.get("arch_list", str, required=True)
        exceptions[group][(cuda, torch)] = validate_archs(spec, cuda)
        esec.done(("cuda", "torch", "platforms", "arch_list"))
    sec.done((*groups, "exceptions"))
    return ArchPolicy(rows, exceptions)


def _load_publish(top: Section, root: Path, display: str) -> dict[str, PublishTarget]:
    """Each target's settings, parsed once, by its kind's class (the embedded default when there
    is no ``publish:`` mapping)."""
    sec = top.section("publish")
    return parse_targets(sec.data if sec is not None else None, root=root, where=display)
