"""What both of farm's YAML files are made of: a mapping's typed, line-aware access
(:class:`Section`: unknown keys refused at the end), the value checks, and the ``build:`` knobs
that ``_defaults.yml`` and a recipe both hold."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from farm.errors import ConfigError, clip, did_you_mean
from farm.model.arch import ArchList, Rendering, validate_for_cuda
from farm.model.config import (
    DEFAULTS_FILE,
    ENV_NAME,
    FARM_ENV,
    PLATFORMS,
    ArchSpec,
    BuildKnobs,
)
from farm.model.yamlsrc import YList, YMap

SHA256 = re.compile(r"^[0-9a-f]{64}$")
CUDA_LINE = re.compile(r"^\d{2}\.\d$")
TORCH_MINOR = re.compile(r"^\d+\.\d+$")
_SYSTEM_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_MSVC_TOOLSET = re.compile(r"^14\.[0-9]{2}$")  # vcvarsall's -vcvars_ver: 14.44 is Visual Studio 2022 17.14


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a mapping"}


class Section:
    """Typed, position-aware access to one YAML mapping; unknown keys are refused at the end."""

    def __init__(self, data: Any, file: str, path: str, line: int = 0) -> None:
        self.file = file
        self.path = path
        if not isinstance(data, YMap):
            what = "the file" if not path else f"{path!r}"
            raise ConfigError(
                f"{what} must be a mapping, got {describe(data)}",
                where=f"{file}:{getattr(data, 'line', line) or line or 1}",
            )
        self.data = data
        self.seen: set[str] = set()

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def where(self, key: str | None = None) -> str:
        line = self.data.line_of(key) if key else self.data.line
        return f"{self.file}:{line}"

    def get(self, key: str, kind: type, *, required: bool = False, default: Any = None, fix: str = "") -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                raise ConfigError(
                    f"missing required key {self.key_path(key)!r}",
                    where=self.where(),
                    hint=fix or f"add '{key}:' here",
                )
            return default
        value = self.data[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            hint = fix
            if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
                hint = hint or f"quote it: {key}: '{clip(value)}' (YAML reads {clip(value)} as a number)"
            raise ConfigError(
                f"{self.key_path(key)!r} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {describe(value)}",
                where=self.where(key),
                hint=hint or None,
            )
        return value

    def section(self, key: str, *, required: bool = False) -> Section | None:
        if key not in self.data:
            self.get(key, dict, required=required)
            return None
        self.seen.add(key)
        return Section(self.data[key], self.file, self.key_path(key), self.data.line_of(key))

    def str_list(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        value = self.get(key, list, required=required)
        if value is None:
            return None
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ConfigError(
                    f"item {i + 1} of {self.key_path(key)!r} must be a string, got {describe(item)}",
                    where=f"{self.file}:{value.line_of(i) if isinstance(value, YList) else self.data.line_of(key)}",
                    hint=f"quote it: '{clip(item)}'" if isinstance(item, (int, float)) else None,
                )
        return tuple(value)

    def words(self, key: str) -> tuple[str, ...]:
        """A list of strings, or one string of space-separated words (``extra_deps: psutil numpy``)."""
        self.seen.add(key)
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(value.split())
        return self.str_list(key) or ()

    def done(self, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        for key in self.data:
            if key not in allowed:
                suggestion = did_you_mean(key, allowed)
                raise ConfigError(
                    f"unknown key {self.key_path(key)!r}",
                    where=self.where(key),
                    hint=suggestion or f"allowed keys here: {', '.join(allowed)}",
                )


def describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({clip(value)})"
    if isinstance(value, str):
        return f"a string ({clip(repr(value))})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def arch_spec(sec: Section, key: str) -> ArchSpec | None:
    text = sec.get(key, str, fix=f"write it as a string: {key}: '8.0;9.0+PTX'")
    if text is None:
        return None
    where = sec.where(key)
    return ArchSpec(text, ArchList.parse(text, where=f"{where} ({sec.key_path(key)})"), where)


def check_cuda_key(sec: Section, key: str, cuda_lines: tuple[str, ...], what: str) -> None:
    if key not in cuda_lines:
        raise ConfigError(
            f"{what} is keyed by unknown CUDA line {key!r}",
            where=sec.where(key),
            hint=did_you_mean(key, cuda_lines) or f"CUDA lines in {DEFAULTS_FILE}: {', '.join(cuda_lines)}",
        )


def version_str(sec: Section, key: str, pattern: re.Pattern[str], example: str, **kw: Any) -> Any:
    value = sec.get(key, str, fix=f"quote it: {key}: '{example}'", **kw)
    if value is not None and not pattern.match(value):
        raise ConfigError(f"{sec.key_path(key)!r} is {value!r}, not like {example!r}", where=sec.where(key))
    return value
COMPONENT = re.compile(r"^[a-z][a-z0-9_]*$")


def component_names(sec: Section, key: str) -> tuple[str, ...] | None:
    names = sec.str_list(key)
    for name in names or ():
        if not COMPONENT.match(name):
            raise ConfigError(f"{sec.key_path(key)} entry {name!r} is not a CUDA component name",
                              where=sec.where(key), hint=COMPONENT_HINT)
    return names


COMPONENT_HINT = "name components as NVIDIA's redistrib manifest does: libcublas, libcusparse, cuda_nvtx"


def load_build(sec: Section) -> BuildKnobs:
    knobs = BuildKnobs(
        subdir=sec.get("subdir", str),
        patch_script=_load_patch_scripts(sec),
        platform_patch_script=_load_platform_patches(sec),
        extra_deps=sec.words("extra_deps"),
        extra_cuda_components=sec.words("extra_cuda_components"),
        nvcc_flags=sec.words("nvcc_flags"),
        max_jobs=sec.get("max_jobs", int),
        nvcc_threads=sec.get("nvcc_threads", int),
        env=dict(sec.get("env", dict, default={})),
        arch_env=_load_arch_env(sec),
        system_packages=sec.words("system_packages"),
        msvc_toolset=sec.get("msvc_toolset", str, fix="quote it: msvc_toolset: '14.44'"),
    )
    if knobs.msvc_toolset is not None and not _MSVC_TOOLSET.match(knobs.msvc_toolset):
        raise ConfigError(f"{sec.key_path('msvc_toolset')} {knobs.msvc_toolset!r} is not a Visual C++ toolset version",
                          where=sec.where("msvc_toolset"), hint="as vcvarsall's -vcvars_ver takes it, e.g. '14.44'")
    for pkg in knobs.system_packages:
        if not _SYSTEM_PACKAGE.match(pkg):
            raise ConfigError(f"{sec.key_path('system_packages')} entry {pkg!r} is not a package name",
                              where=sec.where("system_packages"), hint="dnf package names, e.g. sparsehash-devel")
    for key in ("max_jobs", "nvcc_threads"):
        value = getattr(knobs, key)
        if value is not None and value < 1:
            raise ConfigError(f"{sec.key_path(key)!r} must be >= 1", where=sec.where(key))
    for comp in knobs.extra_cuda_components:  # versions come from the line's pinned release
        if not COMPONENT.match(comp):
            raise ConfigError(
                f"{sec.key_path('extra_cuda_components')} entry {comp!r} is not a CUDA component name",
                where=sec.where("extra_cuda_components"),
                hint=COMPONENT_HINT + " (the line's pinned release gives the version)",
            )
    for key, value in knobs.env.items():
        if not ENV_NAME.match(key):
            raise ConfigError(f"{sec.key_path('env')}.{key} is not an environment variable name",
                              where=sec.where("env"), hint="letters, digits and _, not starting with a digit")
        if key in FARM_ENV:
            raise ConfigError(
                f"{sec.key_path('env')}.{key} is set by farm for every build",
                where=sec.where("env"),
                hint={"MAX_JOBS": "use build.max_jobs", "NVCC_APPEND_FLAGS": "use build.nvcc_flags"}.get(
                    key, "use the recipe's arch overrides; the post-build assertion checks the result"),
            )
        if not isinstance(value, str):
            raise ConfigError(f"{sec.key_path('env')}.{key} must be a string, got {describe(value)}",
                              where=sec.where("env"),
                              hint=f"quote it: {key}: '{clip(value)}'" if not isinstance(value, (list, dict))
                              else "environment values are strings")
    if knobs.subdir and (knobs.subdir.startswith("/") or ".." in Path(knobs.subdir).parts):
        raise ConfigError(f"{sec.key_path('subdir')!r} must stay inside the source tree", where=sec.where("subdir"))
    for key in knobs.arch_env:
        if key in knobs.env:
            raise ConfigError(f"{key} is in both {sec.key_path('env')} and {sec.key_path('arch_env')}",
                              where=sec.where("arch_env"), hint="keep it in arch_env: it follows the cell's list")
    sec.done(("subdir", "patch_script", "platform_patch_script", "extra_deps", "extra_cuda_components", "nvcc_flags",
              "max_jobs", "nvcc_threads", "env", "arch_env", "system_packages", "msvc_toolset"))
    return knobs


def _script_problem(script: object) -> str | None:
    """Why ``script`` is not a patch script's path (a Python file inside the repository), or None."""
    if not isinstance(script, str) or not script.endswith(".py"):
        return f"must be the path of a Python script, got {describe(script)}"
    if script.startswith("/") or ".." in Path(script).parts:
        return "must stay inside the repository"
    return None


def _load_patch_scripts(sec: Section) -> tuple[str, ...]:
    """``patch_script: packages/patches/x.py``, or a list of them run in order."""
    scripts = sec.words("patch_script")
    for script in scripts:
        problem = _script_problem(script)
        if problem:
            raise ConfigError(f"{sec.key_path('patch_script')} entry {script!r} {problem}",
                              where=sec.where("patch_script"),
                              hint="a path relative to the repository, e.g. packages/patches/x.py")
    return scripts


def _load_platform_patches(sec: Section) -> dict[str, str]:
    """``platform_patch_script: {win_amd64: packages/patches/x_msvc.py}``: a platform farm builds,
    a script path inside the repository (a Python file, as patch_script)."""
    raw = sec.get("platform_patch_script", dict, default={})
    out = {}
    for plat, script in raw.items():
        where = f"{sec.file}:{raw.line_of(plat)}" if isinstance(raw, YMap) else sec.where("platform_patch_script")
        if plat not in PLATFORMS:
            raise ConfigError(f"{sec.key_path('platform_patch_script')}.{plat}: unknown platform", where=where,
                              hint=did_you_mean(str(plat), PLATFORMS) or f"one of {', '.join(PLATFORMS)}")
        problem = _script_problem(script)
        if problem:
            raise ConfigError(f"{sec.key_path('platform_patch_script')}.{plat} {problem}", where=where,
                              hint="a path relative to the repository, e.g. packages/patches/NAME_msvc.py")
        out[plat] = script
    return out


def _load_arch_env(sec: Section) -> dict[str, Rendering]:
    raw = sec.get("arch_env", dict, default={})
    out = {}
    renderings = [r.value for r in Rendering]
    for key, value in raw.items():
        where = f"{sec.file}:{raw.line_of(key)}" if isinstance(raw, YMap) else sec.where("arch_env")
        if not ENV_NAME.match(key) or key in FARM_ENV:
            raise ConfigError(
                f"{sec.key_path('arch_env')}.{key}: " + ("is set by farm for every build" if key in FARM_ENV
                                                          else "is not an environment variable name"),
                where=where, hint="name the package's own variable, e.g. NATTEN_CUDA_ARCH",
            )
        if value not in renderings:
            raise ConfigError(
                f"{sec.key_path('arch_env')}.{key} is {value!r}, not a rendering of the arch list",
                where=where, hint=did_you_mean(str(value), renderings) or f"one of {', '.join(renderings)}",
            )
        out[key] = Rendering(value)
    return out


def validate_archs(spec: ArchSpec | None, cuda: str) -> ArchSpec:
    """``spec`` (a list that was required), checked against what CUDA ``cuda``'s nvcc builds."""
    assert spec is not None
    validate_for_cuda(spec.archs, cuda, where=spec.where)
    return spec
