"""The config model: ``_defaults.yml`` and ``packages/<name>.yml``, loaded and validated strictly.

Every mistake is a :class:`~farm.errors.ConfigError` naming the file, the line, the key and a fix.
The recipe reference (every key, its type and meaning) is in ``docs/recipes.md``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from farm.errors import ArchError, ConfigError, UsageError, clip, did_you_mean
from farm.model.arch import KNOWN_CUDA_LINES, ArchList, Rendering, validate_for_cuda
from farm.model.yamlsrc import YList, YMap, load_yaml

DEFAULTS_FILE = "_defaults.yml"
PACKAGES_DIR = "packages"
LEDGER_DIR = "ledger"  # the ledger: one file per package and epoch (farm/provenance/ledgerfiles.py)
LEDGER_FILE = "ledger.jsonl"  # a ledger from before the folder, read until `farm ledger migrate`

PLATFORMS: tuple[str, ...] = ("linux_x86_64", "linux_aarch64", "win_amd64")
# The arch policy has one table for x86_64 (Linux and Windows) and one for aarch64.
PLATFORM_GROUPS: dict[str, str] = {"linux_x86_64": "x86_64", "win_amd64": "x86_64", "linux_aarch64": "aarch64"}
SHARD_PLATFORMS: tuple[str, ...] = ("linux_x86_64", "linux_aarch64")
# Platforms that share a group with another: a recipe may give them arch rules of their own.
SPLIT_PLATFORMS: tuple[str, ...] = ("linux_x86_64", "win_amd64")
PUBLISH_KINDS = ("index", "github", "twine")
FLOATING_REFS = frozenset({"main", "master", "head", "develop", "dev", "trunk", "latest", "nightly"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# archives source.vendor unpacks (farm.source.fetch.unpack reads them)
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar", ".zip")
_CUDA_LINE = re.compile(r"^\d{2}\.\d$")
_TORCH_MINOR = re.compile(r"^\d+\.\d+$")
_PY_VERSION = re.compile(r"^3\.\d{1,2}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SYSTEM_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_MSVC_TOOLSET = re.compile(r"^14\.[0-9]{2}$")  # vcvarsall's -vcvars_ver: 14.44 is Visual Studio 2022 17.14
# requires_dist placeholders: another recipe's version, and the local label its wheel of the same cell carries
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_REF = re.compile(r"^(version|local):([A-Za-z0-9][A-Za-z0-9._-]*)$")
# Variables the build planner sets from the cell and the knobs; a recipe's env must not shadow them.
FARM_ENV = frozenset({
    "CUDA_HOME", "CUDA_PATH", "PATH", "FORCE_CUDA", "TORCH_CUDA_ARCH_LIST", "CUDAARCHS",
    "CMAKE_CUDA_ARCHITECTURES", "MAX_JOBS", "NVCC_APPEND_FLAGS",
})
# Variables that change what a build compiles or links, or the tag it gives the wheel:
# setuptools' compiler (its sysconfig customization), torch's cpp_extension, CMake (its documented
# environment variables, and scikit-build-core's), nvcc, the compilers' search paths. A build on
# the host (native, and cibuildwheel's win_amd64 builds) takes them from its plan alone, as
# cibuildwheel's container does: the caller's values are not passed to the build. Those farm sets
# above are among them; a recipe's build.env may set the others. MAX_JOBS and PATH are not: the
# one caps parallelism, the other finds the tools.
COMPILER_ENV = (FARM_ENV - {"MAX_JOBS", "PATH"}) | frozenset({
    # setuptools (distutils' unix compiler) and torch's cpp_extension (CC is nvcc's -ccbin there)
    "CC", "CXX", "CPP", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "LDCXXSHARED",
    "AR", "ARFLAGS", "RANLIB", "PYTORCH_NVCC", "CUDA_INC_PATH", "CUDNN_HOME", "CUDNN_PATH",
    # CMake: compilers, their flags, launchers, build type, toolchain; scikit-build-core's and the
    # CMAKE_ARGS that it and many setup.py files pass on
    "CUDACXX", "CUDAHOSTCXX", "CUDAFLAGS", "CMAKE_BUILD_TYPE", "CMAKE_TOOLCHAIN_FILE", "CMAKE_ARGS",
    *(f"CMAKE_{lang}_{role}_LAUNCHER" for lang in ("C", "CXX", "CUDA") for role in ("COMPILER", "LINKER")),
    "SKBUILD_CMAKE_ARGS", "SKBUILD_CMAKE_DEFINE", "SKBUILD_CMAKE_BUILD_TYPE",
    # nvcc's own
    "NVCC_PREPEND_FLAGS", "NVCC_CCBIN",
    # MSVC's: cl.exe and link.exe add these to every command line
    "CL", "_CL_", "LINK", "_LINK_",
    # search paths: gcc's headers and link folders (the plan's LIBRARY_PATH is the toolkit's
    # stubs), CMake's find_package/find_path/find_library
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",
    "CMAKE_PREFIX_PATH", "CMAKE_INCLUDE_PATH", "CMAKE_LIBRARY_PATH",
    # platform overrides: sysconfig's platform and build-time variables (the wheel's tag, the
    # compiler and flags setuptools reads from them), macOS's -arch flags
    "_PYTHON_HOST_PLATFORM", "_PYTHON_SYSCONFIGDATA_NAME", "ARCHFLAGS",
})


# ------------------------------------------------------------------------------------------------
# Domain
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArchSpec:
    """An arch list as written, parsed, and where it was written."""

    text: str
    archs: ArchList
    where: str


@dataclass(frozen=True)
class ArchRules:
    """Package-level overrides, most specific first: per (cuda, torch), per cuda, whole package."""

    by_combo: Mapping[tuple[str, str], ArchSpec] = field(default_factory=dict)
    by_cuda: Mapping[str, ArchSpec] = field(default_factory=dict)
    default: ArchSpec | None = None


@dataclass(frozen=True)
class GridRow:
    cuda: str
    torch: str  # full version, e.g. "2.8.0"
    pythons: tuple[str, ...]  # "3.11"
    where: str

    @property
    def torch_minor(self) -> str:
        v = Version(self.torch)
        return f"{v.major}.{v.minor}"


@dataclass(frozen=True)
class Phantom:
    cuda: str
    torch: str  # minor
    python: str  # "3.13"
    platform: str


@dataclass(frozen=True)
class ArchPolicy:
    """Per platform group: a row per CUDA line, and per-(cuda, torch) exceptions."""

    rows: Mapping[str, Mapping[str, ArchSpec]]
    exceptions: Mapping[str, Mapping[tuple[str, str], ArchSpec]]


@dataclass(frozen=True)
class PublishTarget:
    name: str
    kind: str  # index | github | twine
    options: Mapping[str, Any]
    where: str


@dataclass(frozen=True)
class BuildKnobs:
    subdir: str | None = None
    patch_script: tuple[str, ...] = ()  # run in order on every cell's source
    # platform -> a second script for that platform's cells only, run after patch_script (the MSVC
    # fixes of win_amd64 cells): the other platforms build the tree they always built
    platform_patch_script: Mapping[str, str] = field(default_factory=dict)
    extra_deps: tuple[str, ...] = ()
    extra_cuda_components: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()
    max_jobs: int | None = None
    nvcc_threads: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # variable -> rendering of the cell's arch list, for packages that read their own variable
    arch_env: Mapping[str, Rendering] = field(default_factory=dict)
    # dnf packages installed, in order, in the Linux build container before the build
    system_packages: tuple[str, ...] = ()
    # the Visual C++ toolset of win_amd64 builds (vcvarsall -vcvars_ver); None: farm's default
    msvc_toolset: str | None = None

    def patch_scripts(self, platform: str | None) -> tuple[str, ...]:
        """The scripts a cell of ``platform`` is patched with, in order (None: the common one only)."""
        own = self.platform_patch_script.get(platform) if platform else None
        return (*self.patch_script, *((own,) if own else ()))


@dataclass(frozen=True)
class ToolkitLine:
    """One CUDA line's pinned toolkit (``toolkit.lines`` in ``_defaults.yml``)."""

    cuda: str
    release: str  # NVIDIA's release, e.g. "12.8.1": names redistrib_12.8.1.json
    manifest_sha256: str | None  # the manifest's sha256, where it is known
    source: str  # redist | pypi: where this line's toolkit comes from by default
    components: tuple[str, ...]  # what every cell of the line gets (manifest keys)
    pypi: Mapping[str, str]  # component -> wheel version, for the pypi source
    where: str


@dataclass(frozen=True)
class ToolkitConfig:
    redist_url: str = "https://developer.download.nvidia.com/compute/cuda/redist/"
    torch_components: tuple[str, ...] = ()  # added for torch-linked cells: torch's headers include them
    lines: Mapping[str, ToolkitLine] = field(default_factory=dict)


@dataclass(frozen=True)
class Defaults:
    path: Path
    sha256: str
    build_epoch: int
    cuda_lines: tuple[str, ...]
    python_min: str
    python_max: str
    platforms: tuple[str, ...]
    grid: tuple[GridRow, ...]
    phantoms: frozenset[Phantom]
    policy: ArchPolicy
    publish: Mapping[str, PublishTarget]
    default_target: str | None
    build: BuildKnobs
    toolkit: ToolkitConfig = field(default_factory=ToolkitConfig)
    # CUDA line -> where its torch comes from: a PEP 503 index URL, or "pip" (pip's own config)
    torch_index: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GitSource:
    repo: str  # URL or GitHub owner/name
    ref: str  # tag or commit
    submodules: bool = False

    @property
    def url(self) -> str:
        if "://" in self.repo or self.repo.startswith("git@") or self.repo.startswith("/"):
            return self.repo
        return f"https://github.com/{self.repo}.git"


@dataclass(frozen=True)
class SdistSource:
    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class PathSource:
    path: Path  # absolute
    display: str  # as written, relative to the repository


Source = GitSource | SdistSource | PathSource


@dataclass(frozen=True)
class ArchiveOrigin:
    """An archive at a URL, pinned by its sha256 (a release tarball, a distribution's orig tarball)."""

    url: str
    sha256: str


@dataclass(frozen=True)
class VendorSource:
    """A tree placed into the recipe's source before anything reads it: what upstream keeps in a
    git submodule that the fetch does not carry (gsplat's GLM), or clones while it builds
    (sageattn3's CUTLASS). ``path``: where, relative to the source root; ``origin``: the pinned
    archive or sdist (sha256 verified before unpacking), or a git repository at a full commit
    (git checks every object's hash as it fetches); ``subdir``: the folder placed there (default:
    an archive's one top folder, a repository's whole checkout)."""

    path: str
    origin: ArchiveOrigin | SdistSource | GitSource
    subdir: str | None
    where: str


@dataclass(frozen=True)
class LintIgnore:
    rule: str
    path: str  # glob, relative to the source root
    reason: str
    where: str


@dataclass(frozen=True)
class KernelFamily:
    """Sources a build compiles for their own subset of the cell's list: ``archs`` intersected
    with the list the way vLLM's ``cuda_archs_loose_intersection`` does (``9.0a`` when 9.0 is
    asked for, ``12.0f`` for any 12.x, ``+PTX`` keeping that arch's PTX), on CUDA ``min_cuda`` and
    later only."""

    name: str
    sources: tuple[str, ...]  # globs relative to the build root
    archs: str  # as the build writes it: "9.0a;10.0f;12.0f"
    min_cuda: str | None
    where: str


@dataclass(frozen=True)
class ExtensionArchs:
    """Extensions matching ``glob`` (archive path or basename) are built for ``spec`` alone."""

    glob: str
    spec: ArchSpec
    cuda: str | None = None  # only on this CUDA line (the extension is built only there); None = every line


@dataclass(frozen=True)
class VendoredLib:
    """Bundled libraries (``*.libs/`` members) matching ``glob`` (archive path or basename): their
    own arch list (empty: host-only), or ``archs`` None and ``exempt`` the reviewed reason."""

    glob: str
    archs: ArchList | None
    exempt: str | None
    where: str


@dataclass(frozen=True)
class ComboFilter:
    cuda: str
    torch: str | None  # minor; None = any
    pythons: tuple[str, ...] | None


@dataclass(frozen=True)
class Restriction:
    """The part of the grid a package builds on (None = no restriction)."""

    platforms: tuple[str, ...] | None = None
    cuda: tuple[str, ...] | None = None
    combinations: tuple[ComboFilter, ...] | None = None
    min_torch: str | None = None


@dataclass(frozen=True)
class Sharding:
    """``sharding:``: the cell's compile split over ``jobs`` compile jobs plus one link job, on
    ``platforms`` (Linux only: the nvcc launcher that splits the compile is not built for Windows)."""

    jobs: int
    platforms: tuple[str, ...] = SHARD_PLATFORMS

    def jobs_for(self, platform: str) -> int:
        """Compile jobs for a cell of ``platform``: 1 (an ordinary build) where it does not shard."""
        return self.jobs if platform in self.platforms else 1


@dataclass(frozen=True)
class VerifyKnobs:
    """How the built wheel is imported on a runner without a GPU (the import check's knobs)."""

    import_name: str | None = None  # the module to import when it is not the dist name
    extra_imports: tuple[str, ...] = ()  # submodules imported too
    no_direct_import: tuple[str, ...] = ()  # globs of extension files loaded by the package, not on their own
    # the import fails without a GPU: True (any device error), or text the error must contain
    expect_device_error: bool | str = False
    needs_driver: bool = False  # the import needs libcuda (the NVIDIA driver) present
    # CUDA components (cuda_nvrtc, ...) whose libraries the import loads: NVIDIA's PyPI wheels of the
    # cell's CUDA line are installed into the check's environment (a user installs them beside the wheel)
    runtime_libs: tuple[str, ...] = ()


@dataclass(frozen=True)
class SiblingPin:
    """What a requires_dist placeholder needs of another recipe."""

    version: str
    links_torch: bool


@dataclass(frozen=True)
class Recipe:
    name: str
    dist: str
    version: str
    source: Source
    links_torch: bool
    jit: bool  # kernels compiled at run time: no AOT device code, maybe no extension at all
    build_epoch: int
    arch: ArchRules
    arch_by_platform: Mapping[str, ArchRules]  # platform, then platform group -> rules consulted first
    extensions: tuple[ExtensionArchs, ...]
    lint_ignore: tuple[LintIgnore, ...]
    only: Restriction
    build: BuildKnobs
    requires_dist: tuple[str, ...]
    path: Path
    display: str  # packages/<name>.yml
    sha256: str
    sharding: Sharding | None = None  # compile jobs + one link job (docs/recipes.md)
    verify: VerifyKnobs = VerifyKnobs()
    # recipes named by requires_dist placeholders ({version:NAME}, {local:NAME}); filled by load_config
    siblings: Mapping[str, SiblingPin] = field(default_factory=dict)
    vendored: tuple[VendoredLib, ...] = ()  # what bundled libraries must hold (asserted like extensions)
    # "cmake": the build gives kernel families their own targets per CUDA line (vLLM's
    # set_gencode_flags_for_srcs); the lint derives them from the CMake files for each cell.
    # "declared": the recipe lists them (families).
    kernel_families: str = ""
    families: tuple[KernelFamily, ...] = ()
    vendor: tuple[VendorSource, ...] = ()  # trees placed into the source (source.vendor)

    def where(self, line: int | None = None) -> str:
        return f"{self.display}:{line}" if line else self.display


@dataclass(frozen=True)
class FarmConfig:
    root: Path
    defaults: Defaults
    recipes: Mapping[str, Recipe]

    def recipe(self, name: str) -> Recipe:
        try:
            return self.recipes[name]
        except KeyError:
            raise UsageError(
                f"unknown package {name!r}",
                hint=did_you_mean(name, self.recipes) or f"known packages: {', '.join(sorted(self.recipes))}",
            ) from None

    def effective_epoch(self, recipe: Recipe) -> int:
        return self.defaults.build_epoch + recipe.build_epoch


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a mapping"}


class _Section:
    """Typed, position-aware access to one YAML mapping; unknown keys are refused at the end."""

    def __init__(self, data: Any, file: str, path: str, line: int = 0) -> None:
        self.file = file
        self.path = path
        if not isinstance(data, YMap):
            what = "the file" if not path else f"{path!r}"
            raise ConfigError(
                f"{what} must be a mapping, got {_describe(data)}",
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
                f"{self.key_path(key)!r} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {_describe(value)}",
                where=self.where(key),
                hint=hint or None,
            )
        return value

    def section(self, key: str, *, required: bool = False) -> _Section | None:
        if key not in self.data:
            self.get(key, dict, required=required)
            return None
        self.seen.add(key)
        return _Section(self.data[key], self.file, self.key_path(key), self.data.line_of(key))

    def str_list(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        value = self.get(key, list, required=required)
        if value is None:
            return None
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ConfigError(
                    f"item {i + 1} of {self.key_path(key)!r} must be a string, got {_describe(item)}",
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


def _describe(value: Any) -> str:
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


def _arch_spec(sec: _Section, key: str) -> ArchSpec | None:
    text = sec.get(key, str, fix=f"write it as a string: {key}: '8.0;9.0+PTX'")
    if text is None:
        return None
    where = sec.where(key)
    return ArchSpec(text, ArchList.parse(text, where=f"{where} ({sec.key_path(key)})"), where)


def _check_cuda_key(sec: _Section, key: str, cuda_lines: tuple[str, ...], what: str) -> None:
    if key not in cuda_lines:
        raise ConfigError(
            f"{what} is keyed by unknown CUDA line {key!r}",
            where=sec.where(key),
            hint=did_you_mean(key, cuda_lines) or f"CUDA lines in {DEFAULTS_FILE}: {', '.join(cuda_lines)}",
        )


def _version_str(sec: _Section, key: str, pattern: re.Pattern[str], example: str, **kw: Any) -> Any:
    value = sec.get(key, str, fix=f"quote it: {key}: '{example}'", **kw)
    if value is not None and not pattern.match(value):
        raise ConfigError(f"{sec.key_path(key)!r} is {value!r}, not like {example!r}", where=sec.where(key))
    return value


# ------------------------------------------------------------------------------------------------
# _defaults.yml
# ------------------------------------------------------------------------------------------------
_DEFAULTS_KEYS = (
    "build_epoch", "cuda_lines", "python", "platforms", "grid", "phantoms",
    "arch_policy", "publish", "default_target", "build", "toolkit", "torch_index",
)


def load_defaults(path: Path, *, display: str = DEFAULTS_FILE) -> Defaults:
    data, raw = load_yaml(path, display=display)
    top = _Section(data, display, "")
    epoch = top.get("build_epoch", int, required=True)
    if epoch < 0:
        raise ConfigError("'build_epoch' must be >= 0", where=top.where("build_epoch"))

    cuda_lines = top.str_list("cuda_lines", required=True) or ()
    lines_value = top.data["cuda_lines"]
    for i, line in enumerate(cuda_lines):
        if not _CUDA_LINE.match(line):
            raise ConfigError(f"CUDA line {line!r} is not like '12.8'", where=f"{display}:{lines_value.line_of(i)}")
        if line not in KNOWN_CUDA_LINES:
            raise ConfigError(
                f"CUDA line {line!r} has no nvcc support table in farm",
                where=f"{display}:{lines_value.line_of(i)}",
                hint=f"farm knows {', '.join(KNOWN_CUDA_LINES)}; add the line to farm/arch.py first",
            )

    py = top.section("python", required=True)
    assert py is not None
    py_min = _version_str(py, "min", _PY_VERSION, "3.10", required=True)
    py_max = _version_str(py, "max", _PY_VERSION, "3.14", required=True)
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
    publish = _load_publish(top)
    default_target = top.get("default_target", str)
    if default_target is not None and default_target not in publish:
        raise ConfigError(
            f"default_target {default_target!r} is not a publish target",
            where=top.where("default_target"),
            hint=did_you_mean(default_target, publish) or f"targets: {', '.join(publish)}",
        )
    build_sec = top.section("build")
    build = _load_build(build_sec) if build_sec else BuildKnobs()
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


TORCH_INDEX_PIP = "pip"  # pip's own configured indexes (pip.conf, PIP_INDEX_URL, find-links, constraints)


def check_torch_index(value: str, where: str) -> str:
    """A torch source: an http(s)/file URL of a PEP 503 index, or ``pip``."""
    if value == TORCH_INDEX_PIP or url_problem(value.replace("{cu}", "cu130")) is None:
        return value
    raise ConfigError(f"torch index {value!r} is neither a URL nor 'pip'", where=where,
                      hint="give a PEP 503 index URL like https://download.pytorch.org/whl/cu130, "
                           "or 'pip' for pip's own configured indexes")


def _load_torch_index(top: _Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> dict[str, str]:
    sec = top.section("torch_index")
    if sec is None:
        return {}
    out = {}
    for cuda in sec.data:
        _check_cuda_key(sec, cuda, cuda_lines, "torch_index")
        out[cuda] = check_torch_index(sec.get(cuda, str), sec.where(cuda))
    missing = sorted({r.cuda for r in grid} - set(out))
    if missing:  # a cell of that line could not say where its torch comes from
        raise ConfigError(f"torch_index names no index for CUDA {', '.join(missing)}, which the grid builds",
                          where=sec.where(), hint="add a line per CUDA line, e.g. '13.0': https://download.pytorch.org/whl/cu130")
    return out


_RELEASE = re.compile(r"\d+\.\d+\.\d+")
_COMPONENT = re.compile(r"^[a-z][a-z0-9_]*$")
TOOLKIT_SOURCES = ("redist", "pypi")


def release_problem(release: str, cuda: str) -> str | None:
    """Why ``release`` is not a CUDA ``cuda`` release (``13.0.2`` for ``13.0``), or None: the one
    rule for the pin in ``_defaults.yml`` and ``--release`` (the release names a cache folder)."""
    if not _RELEASE.fullmatch(release) or not release.startswith(cuda + "."):
        return f"{clip(release)!r} is not a CUDA {cuda} release like '{cuda}.1'"
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an index or download root, or None: http(s) with a host, or file. The
    one rule for each URL in ``_defaults.yml`` (``redist_url``, ``torch_index``) and its flag
    (``--redist-url``, ``$FARM_CUDA_REDIST_URL``, ``--torch-index``, ``farm grid --index``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname if parts.scheme in ("http", "https") else ""
        _port = parts.port  # a port that is not a number raises here
    except ValueError:
        host = None
    if (host is None or parts.scheme not in ("http", "https", "file") or (parts.scheme != "file" and not host)
            or any(ch.isspace() or ord(ch) < 32 for ch in url)):
        return f"{clip(url)!r} is not an http(s) URL with a host, nor a file URL"
    return None


def _components(sec: _Section, key: str) -> tuple[str, ...] | None:
    names = sec.str_list(key)
    for name in names or ():
        if not _COMPONENT.match(name):
            raise ConfigError(f"{sec.key_path(key)} entry {name!r} is not a CUDA component name",
                              where=sec.where(key), hint=_COMPONENT_HINT)
    return names


_COMPONENT_HINT = "name components as NVIDIA's redistrib manifest does: libcublas, libcusparse, cuda_nvtx"


def _load_toolkit(sec: _Section, cuda_lines: tuple[str, ...]) -> ToolkitConfig:
    url = sec.get("redist_url", str, default=ToolkitConfig.redist_url)
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"{sec.key_path('redist_url')} {problem}", where=sec.where("redist_url"))
    base = _components(sec, "components") or ()
    torch = _components(sec, "torch_components") or ()
    lines_sec = sec.section("lines", required=True)
    assert lines_sec is not None
    lines: dict[str, ToolkitLine] = {}
    for cuda in lines_sec.data:
        _check_cuda_key(lines_sec, cuda, cuda_lines, "a toolkit pin")
        one = lines_sec.section(cuda)
        assert one is not None
        release = one.get("release", str, required=True, fix=f"quote it: release: '{cuda}.0'")
        problem = release_problem(release, cuda)
        if problem:
            raise ConfigError(f"{one.key_path('release')} {problem}", where=one.where("release"))
        digest = one.get("manifest_sha256", str)
        if digest is not None and not _SHA256.match(digest):
            raise ConfigError(f"{one.key_path('manifest_sha256')} is not a sha256 (64 hex digits)",
                              where=one.where("manifest_sha256"))
        source = one.get("source", str, default="redist")
        if source not in TOOLKIT_SOURCES:
            raise ConfigError(f"{one.key_path('source')} {source!r} is not one of {', '.join(TOOLKIT_SOURCES)}",
                              where=one.where("source"), hint=did_you_mean(source, TOOLKIT_SOURCES) or None)
        components = _components(one, "components") or base
        pypi_sec = one.section("pypi")
        pypi: dict[str, str] = {}
        if pypi_sec is not None:
            for comp in pypi_sec.data:
                if not _COMPONENT.match(comp):
                    raise ConfigError(f"{pypi_sec.key_path(comp)} is not a CUDA component name",
                                      where=pypi_sec.where(comp), hint=_COMPONENT_HINT)
                pypi[comp] = _version_str(pypi_sec, comp, re.compile(r"^\d+(\.\d+)+$"), "13.0.88")
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


def _load_grid(top: _Section, cuda_lines: tuple[str, ...]) -> tuple[GridRow, ...]:
    rows = top.get("grid", list, required=True)
    out = []
    seen: dict[tuple[str, str], str] = {}
    for i, item in enumerate(rows):
        sec = _Section(item, top.file, f"grid[{i}]", rows.line_of(i))
        cuda = _version_str(sec, "cuda", _CUDA_LINE, "12.8", required=True)
        _check_cuda_key(sec, cuda, cuda_lines, f"grid[{i}]")
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


def _load_phantoms(top: _Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> frozenset[Phantom]:
    items = top.get("phantoms", list, default=YList())
    declared = {(r.cuda, r.torch_minor): r.pythons for r in grid}
    out = set()
    for i, item in enumerate(items):
        sec = _Section(item, top.file, f"phantoms[{i}]", items.line_of(i))
        cuda = _version_str(sec, "cuda", _CUDA_LINE, "12.8", required=True)
        _check_cuda_key(sec, cuda, cuda_lines, f"phantoms[{i}]")
        torch = _version_str(sec, "torch", _TORCH_MINOR, "2.8", required=True)
        python = _version_str(sec, "python", _PY_VERSION, "3.13", required=True)
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


def _load_policy(top: _Section, cuda_lines: tuple[str, ...], grid: tuple[GridRow, ...]) -> ArchPolicy:
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
            _check_cuda_key(gsec, cuda, cuda_lines, f"arch_policy.{group}")
            spec = _arch_spec(gsec, cuda)
            assert spec is not None
            _validate(spec, cuda)
            rows[group][cuda] = spec
    exceptions: dict[str, dict[tuple[str, str], ArchSpec]] = {g: {} for g in groups}
    items = sec.get("exceptions", list, default=YList())
    for i, item in enumerate(items):
        esec = _Section(item, sec.file, f"arch_policy.exceptions[{i}]", items.line_of(i))
        cuda = _version_str(esec, "cuda", _CUDA_LINE, "12.8", required=True)
        _check_cuda_key(esec, cuda, cuda_lines, f"arch_policy.exceptions[{i}]")
        torch = _version_str(esec, "torch", _TORCH_MINOR, "2.8", required=True)
        if not any(r.cuda == cuda and r.torch_minor == torch for r in grid):
            raise ConfigError(f"arch_policy.exceptions[{i}] ({cuda}, torch {torch}) matches no grid row",
                              where=esec.where(), hint="fix it to a (cuda, torch) of the grid, or remove it")
        group = esec.get("platforms", str, default="x86_64")
        if group not in groups:
            raise ConfigError(f"unknown platform group {group!r}", where=esec.where("platforms"),
                              hint=f"one of {', '.join(groups)}")
        spec = _arch_spec(esec, "arch_list")
        if spec is None:
            esec.get("arch_list", str, required=True)
        assert spec is not None
        _validate(spec, cuda)
        esec.done(("cuda", "torch", "platforms", "arch_list"))
        exceptions[group][(cuda, torch)] = spec
    sec.done((*groups, "exceptions"))
    return ArchPolicy(rows, exceptions)


def _load_publish(top: _Section) -> dict[str, PublishTarget]:
    sec = top.section("publish")
    out: dict[str, PublishTarget] = {}
    if sec is None:
        return out
    for name in sec.data:
        tsec = sec.section(name)
        assert tsec is not None
        kind = tsec.get("kind", str, required=True)
        if kind not in PUBLISH_KINDS:
            raise ConfigError(f"unknown publish kind {kind!r}", where=tsec.where("kind"),
                              hint=did_you_mean(kind, PUBLISH_KINDS) or f"one of {', '.join(PUBLISH_KINDS)}")
        options = {k: v for k, v in tsec.data.items() if k != "kind"}
        out[name] = PublishTarget(name, kind, options, tsec.where())
    return out


def _load_build(sec: _Section) -> BuildKnobs:
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
        if not _COMPONENT.match(comp):
            raise ConfigError(
                f"{sec.key_path('extra_cuda_components')} entry {comp!r} is not a CUDA component name",
                where=sec.where("extra_cuda_components"),
                hint=_COMPONENT_HINT + " (the line's pinned release gives the version)",
            )
    for key, value in knobs.env.items():
        if not _ENV_NAME.match(key):
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
            raise ConfigError(f"{sec.key_path('env')}.{key} must be a string, got {_describe(value)}",
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
        return f"must be the path of a Python script, got {_describe(script)}"
    if script.startswith("/") or ".." in Path(script).parts:
        return "must stay inside the repository"
    return None


def _load_patch_scripts(sec: _Section) -> tuple[str, ...]:
    """``patch_script: packages/patches/x.py``, or a list of them run in order."""
    scripts = sec.words("patch_script")
    for script in scripts:
        problem = _script_problem(script)
        if problem:
            raise ConfigError(f"{sec.key_path('patch_script')} entry {script!r} {problem}",
                              where=sec.where("patch_script"),
                              hint="a path relative to the repository, e.g. packages/patches/x.py")
    return scripts


def _load_platform_patches(sec: _Section) -> dict[str, str]:
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


def _load_arch_env(sec: _Section) -> dict[str, Rendering]:
    raw = sec.get("arch_env", dict, default={})
    out = {}
    renderings = [r.value for r in Rendering]
    for key, value in raw.items():
        where = f"{sec.file}:{raw.line_of(key)}" if isinstance(raw, YMap) else sec.where("arch_env")
        if not _ENV_NAME.match(key) or key in FARM_ENV:
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


def _validate(spec: ArchSpec, cuda: str) -> None:
    validate_for_cuda(spec.archs, cuda, where=spec.where)


# ------------------------------------------------------------------------------------------------
# packages/<name>.yml
# ------------------------------------------------------------------------------------------------
_RECIPE_KEYS = (
    "name", "dist", "version", "source", "links_torch", "jit", "build_epoch", "arch", "extensions",
    "lint_ignore", "kernel_families", "only", "min_torch", "build", "requires_dist", "verify", "vendored",
    "sharding",
)
# More compile jobs than this is a typo, not a plan: each one is a CI job of the 256-job matrix.
MAX_SHARD_JOBS = 64


def load_recipe(path: Path, defaults: Defaults, root: Path) -> Recipe:
    display = _display(path, root)
    data, raw = load_yaml(path, display=display)
    top = _Section(data, display, "")
    name = top.get("name", str, required=True)
    if name != path.stem:
        raise ConfigError(f"name {name!r} does not match the file name {path.name!r}", where=top.where("name"),
                          hint=f"rename the file to {name}.yml or set name: {path.stem}")
    dist = top.get("dist", str, default=name.replace("-", "_"))
    if not _NAME.match(dist):
        raise ConfigError(f"dist {dist!r} is not a valid distribution name", where=top.where("dist"))
    src_sec = top.section("source", required=True)
    assert src_sec is not None
    source = _load_source(src_sec, root)
    vendor = _load_vendor(src_sec)
    version = top.get("version", str, fix="quote it: version: '1.2.3'",
                      default=source.version if isinstance(source, SdistSource) else None)
    if version is None:
        top.get("version", str, required=True, fix="add the package version, e.g. version: '2.8.3'")
    try:
        Version(version)
    except InvalidVersion:
        raise ConfigError(f"version {version!r} is not a PEP 440 version", where=top.where("version")) from None
    if "+" in version:
        raise ConfigError(f"version {version!r} already has a local label", where=top.where("version"),
                          hint="farm adds +cuXXXtorchM.m itself; write the public version")
    links_torch = top.get("links_torch", bool, required=True)
    jit = top.get("jit", bool, default=False)
    epoch = top.get("build_epoch", int, default=0)
    if epoch < 0:
        raise ConfigError("'build_epoch' must be >= 0", where=top.where("build_epoch"))

    arch, by_platform = _load_arch_rules(top, defaults)
    extensions = _load_extensions(top, defaults)
    vendored = _load_vendored(top)
    ignores = _load_ignores(top)
    families_kind, families = _load_families(top)
    only = _load_only(top, defaults)
    build_sec = top.section("build")
    build = _load_build(build_sec) if build_sec else BuildKnobs()
    requires = top.words("requires_dist")
    # written into the wheel's METADATA: each must be a PEP 508 requirement
    required = _requirements(top, "requires_dist", requires, "write it like 'numpy>=1.24'")
    for req, parsed in zip(requires, required, strict=True):
        if links_torch and parsed.name.lower() == "torch":
            # the wheel runs only with the torch minor it was built against: farm writes that pin
            raise ConfigError(f"requires_dist entry {req!r}: farm pins torch itself (torch==<the cell's minor>.*) "
                              "for a package that links torch; a torch entry would loosen that pin",
                              where=top.where("requires_dist"), hint=f"remove {req!r} from requires_dist")
    if build_sec:  # a farm wheel of the same cell as a build dependency: {version:X}+{local:X}
        _requirements(build_sec, "extra_deps", build.extra_deps,
                      "write it like 'numpy>=1.24' or 'cumm=={version:cumm}+{local:cumm}'")
    sharding = _load_sharding(top)
    verify_sec = top.section("verify")
    verify = _load_verify(verify_sec) if verify_sec else VerifyKnobs()
    top.done(_RECIPE_KEYS)
    if not links_torch:
        combos = [spec for rules in (arch, *by_platform.values()) for spec in rules.by_combo.values()]
        if combos:
            raise ConfigError("per-(cuda, torch) arch overrides on a package with links_torch: false",
                              where=combos[0].where, hint="use arch.by_cuda: the package has no torch axis")
    recipe = Recipe(
        name=name, dist=dist, version=version, source=source, links_torch=links_torch, jit=jit,
        build_epoch=epoch, arch=arch, arch_by_platform=by_platform, extensions=extensions,
        lint_ignore=ignores, only=only, build=build, requires_dist=requires, path=path,
        display=display, sha256=hashlib.sha256(raw).hexdigest(), verify=verify, vendored=vendored,
        sharding=sharding, kernel_families=families_kind, families=families, vendor=vendor,
    )
    return recipe


def _load_sharding(top: _Section) -> Sharding | None:
    """``sharding: 20`` or ``sharding: {jobs: 10, platforms: [linux_x86_64, linux_aarch64]}``."""
    if "sharding" not in top.data:
        return None
    value = top.data["sharding"]
    if isinstance(value, YMap):
        sec = top.section("sharding")
        assert sec is not None
        jobs, platforms, where = sec.get("jobs", int, required=True), sec.str_list("platforms"), sec.where("jobs")
        for p in platforms or ():
            if p not in SHARD_PLATFORMS:
                raise ConfigError(f"sharding.platforms: farm shards Linux builds only, not {p!r}",
                                  where=sec.where("platforms"),
                                  hint=did_you_mean(p, SHARD_PLATFORMS) or f"one of {', '.join(SHARD_PLATFORMS)}")
        sec.done(("jobs", "platforms"))
    else:
        jobs = top.get("sharding", int, fix="write the number of compile jobs, e.g. sharding: 10")
        platforms, where = None, top.where("sharding")
    if not 2 <= jobs <= MAX_SHARD_JOBS:
        raise ConfigError(f"sharding: {jobs} compile jobs; it must be between 2 and {MAX_SHARD_JOBS}", where=where,
                          hint="remove the key for an ordinary (unsharded) build")
    return Sharding(jobs, tuple(platforms) if platforms else SHARD_PLATFORMS)


def _requirements(sec: _Section, key: str, entries: tuple[str, ...], hint: str) -> list[Requirement]:
    """The entries of a requirement list (``requires_dist``, ``build.extra_deps``), parsed with
    their placeholders sampled. An entry that is no requirement is refused, and so is one that
    names an earlier entry's project (canonical name) under the same marker: pip would take
    both, and which specifier the recipe meant is for its author to say."""
    value = sec.data.get(key)
    parsed: list[Requirement] = []
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for i, entry in enumerate(entries):
        where = f"{sec.file}:{value.line_of(i)}" if isinstance(value, YList) else sec.where(key)
        try:
            req = Requirement(_sample(entry, f"{sec.key_path(key)} entry", where))
        except InvalidRequirement as exc:
            raise ConfigError(f"{sec.key_path(key)} entry {entry!r} is not a requirement: {exc}",
                              where=where, hint=hint) from None
        ident = (canonicalize_name(req.name), str(req.marker or ""))
        if ident in seen:
            first, first_where = seen[ident]
            marker = f" under the same marker ({req.marker})" if req.marker else ""
            raise ConfigError(f"{sec.key_path(key)} entry {entry!r} repeats project {ident[0]!r} of entry "
                              f"{first!r} ({first_where}){marker}", where=where,
                              hint="keep one entry, with every version specifier it needs")
        seen[ident] = (entry, where)
        parsed.append(req)
    return parsed


def requirement_refs(requirement: str) -> list[tuple[str, str]]:
    """The ``(kind, recipe)`` placeholders of a requires_dist entry: ``{version:cumm}`` -> ``("version", "cumm")``."""
    return [(m[1], m[2]) for m in (_REF.match(p) for p in _PLACEHOLDER.findall(requirement)) if m]


def _sample(requirement: str, what: str, where: str) -> str:
    """The entry with its placeholders filled with sample values, to check it is a requirement."""
    def fill(match: re.Match[str]) -> str:
        ref = _REF.match(match[1])
        if ref is None:
            raise ConfigError(f"{what} {requirement!r}: unknown placeholder {match[0]!r}", where=where,
                              hint="placeholders are {version:NAME} and {local:NAME}, NAME a recipe in packages/")
        return "0" if ref[1] == "version" else "cu128"
    return _PLACEHOLDER.sub(fill, requirement)


def _load_verify(sec: _Section) -> VerifyKnobs:
    device = sec.data.get("expect_device_error", False)
    sec.seen.add("expect_device_error")
    if not isinstance(device, (bool, str)) or device == "":
        raise ConfigError(f"{sec.key_path('expect_device_error')!r} must be true or the text the error contains, "
                          f"got {_describe(device)}", where=sec.where("expect_device_error"))
    knobs = VerifyKnobs(
        import_name=sec.get("import_name", str),
        extra_imports=sec.words("extra_imports"),
        no_direct_import=sec.words("no_direct_import"),
        expect_device_error=device,
        needs_driver=sec.get("needs_driver", bool, default=False),
        runtime_libs=_components(sec, "runtime_libs") or (),
    )
    for name in (knobs.import_name, *knobs.extra_imports):
        if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise ConfigError(f"verify: {name!r} is not a module name", where=sec.where(),
                              hint="a dotted Python module name, e.g. spconv.pytorch")
    sec.done(("import_name", "extra_imports", "no_direct_import", "expect_device_error", "needs_driver",
              "runtime_libs"))
    return knobs


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _load_source(sec: _Section, root: Path) -> Source:
    kinds = [k for k in ("git", "sdist", "path") if k in sec.data]
    if len(kinds) != 1:
        sec.done(("git", "sdist", "path", "vendor"))
        raise ConfigError(
            "source must have exactly one of 'git', 'sdist', 'path'"
            + (f" (found {', '.join(kinds)})" if kinds else ""),
            where=sec.where(), hint="e.g. source: {git: {repo: owner/name, ref: v1.2.3}}",
        )
    kind = kinds[0]
    if kind == "path":
        rel = sec.get("path", str)
        sec.done(("path", "vendor"))
        target = (root / rel).resolve()
        if not target.is_dir():
            raise ConfigError(f"source.path {rel!r} is not a directory", where=sec.where("path"),
                              hint="give a folder relative to the repository root")
        return PathSource(target, rel)
    sub = sec.section(kind)
    sec.done((kind, "vendor"))
    assert sub is not None
    if kind == "git":
        repo = _git_repo(sub)
        ref = sub.get("ref", str, required=True, fix="pin a tag or a commit: ref: v1.2.3")
        if ref.lower() in FLOATING_REFS or ref.startswith("refs/heads/") or ref.lower().startswith("origin/"):
            raise ConfigError(
                f"source.git.ref {ref!r} is a floating ref: builds would change under the same version",
                where=sub.where("ref"), hint="pin a release tag or a full commit sha",
            )
        submodules = sub.get("submodules", bool, default=False)
        sub.done(("repo", "ref", "submodules"))
        return GitSource(repo, ref, submodules)
    name = sub.get("name", str, required=True)
    version = sub.get("version", str, required=True, fix="quote it: version: '1.2.3'")
    sha = sub.get("sha256", str, required=True, fix="add the sdist's sha256 (pip download, then sha256sum)")
    if not _SHA256.match(sha):
        raise ConfigError("source.sdist.sha256 must be 64 lowercase hex digits", where=sub.where("sha256"))
    sub.done(("name", "version", "sha256"))
    return SdistSource(name, version, sha)


def _git_repo(sub: _Section) -> str:
    """A git section's ``repo``: a GitHub owner/name or a git URL (a local path included)."""
    repo = sub.get("repo", str, required=True)
    is_url = "://" in repo or repo.startswith(("git@", "/"))
    if not is_url and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise ConfigError(f"{sub.key_path('repo')} {clip(repo)!r} is neither a GitHub owner/name nor a git URL",
                          where=sub.where("repo"), hint="e.g. repo: Dao-AILab/flash-attention")
    return str(repo)


def _relative_path(sec: _Section, key: str, what: str, example: str, *, required: bool = True) -> str | None:
    """A folder relative to a tree's root, as written (``a/b``): no absolute path, ``..``, ``.``
    part, backslash or ``.git``; None when absent and not required."""
    value = sec.get(key, str, required=required, fix=f"e.g. {key}: {example}")
    if value is None:
        return None
    parts = value.split("/")
    if (not value or value.startswith("/") or "\\" in value or ":" in parts[0]
            or any(part in ("", ".", "..", ".git") for part in parts)):
        raise ConfigError(f"{sec.key_path(key)} {clip(value)!r} is not a folder inside {what}",
                          where=sec.where(key),
                          hint=f"write a relative path with '/' and no '..', '.' or empty parts, e.g. {example}")
    return str(value)


def _load_vendor(src: _Section) -> tuple[VendorSource, ...]:
    """``source.vendor``: trees placed into the source at a path, each from a pinned archive, sdist
    or git commit."""
    items = src.get("vendor", list, default=YList())
    out: list[VendorSource] = []
    for i, item in enumerate(items):
        sec = _Section(item, src.file, f"source.vendor[{i}]", items.line_of(i))
        path = _relative_path(sec, "path", "the source", "third_party/glm")
        assert path is not None
        kinds = [k for k in ("archive", "sdist", "git") if k in sec.data]
        if len(kinds) != 1:
            sec.done(("path", "archive", "sdist", "git", "subdir"))
            raise ConfigError(
                f"{sec.path} must have exactly one of 'archive', 'sdist', 'git'"
                + (f" (found {', '.join(kinds)})" if kinds else ""), where=sec.where(),
                hint="e.g. archive: {url: https://host/glm-1.0.1.tar.xz, sha256: <64 hex>}")
        sub = sec.section(kinds[0])
        assert sub is not None
        origin: ArchiveOrigin | SdistSource | GitSource
        if kinds[0] == "git":
            repo = _git_repo(sub)
            ref = sub.get("ref", str, required=True, fix="the full commit: ref: <40 hex> (git rev-parse TAG^{commit})")
            if not _COMMIT.match(ref):
                raise ConfigError(
                    f"{sub.key_path('ref')} {clip(ref)!r} is not a full commit (40 lowercase hex digits)",
                    where=sub.where("ref"),
                    hint="a vendored git tree is pinned by its commit, which git checks as it fetches (a tag or "
                         "branch can move); write the tag in a comment: git rev-parse TAG^{commit}")
            sub.done(("repo", "ref"))
            origin = GitSource(repo, ref)
        elif kinds[0] == "archive":
            url = sub.get("url", str, required=True, fix="the archive's URL (http, https or file)")
            problem = url_problem(url)
            if problem:
                raise ConfigError(f"{sub.key_path('url')}: {problem}", where=sub.where("url"),
                                  hint="give the archive's http(s) URL")
            if not url.lower().split("?")[0].endswith(_ARCHIVE_SUFFIXES):
                raise ConfigError(f"{sub.key_path('url')} {clip(url)!r} does not name an archive farm unpacks",
                                  where=sub.where("url"), hint=f"one of {', '.join(_ARCHIVE_SUFFIXES)}")
            sha = _pinned_sha256(sub)
            sub.done(("url", "sha256"))
            origin = ArchiveOrigin(url, sha)
        else:
            name = sub.get("name", str, required=True)
            version = sub.get("version", str, required=True, fix="quote it: version: '1.2.3'")
            sha = _pinned_sha256(sub)
            sub.done(("name", "version", "sha256"))
            origin = SdistSource(name, version, sha)
        subdir = _relative_path(sec, "subdir", "the archive", "glm-1.0.1", required=False)
        sec.done(("path", kinds[0], "subdir"))
        for earlier in out:  # one tree per place: nested or equal paths would overwrite each other
            a, b = earlier.path + "/", path + "/"
            if a.startswith(b) or b.startswith(a):
                raise ConfigError(f"{sec.path}.path {path!r} overlaps {earlier.path!r} ({earlier.where})",
                                  where=sec.where("path"), hint="give each vendored tree its own folder")
        out.append(VendorSource(path, origin, subdir, sec.where()))
    return tuple(out)


def _pinned_sha256(sec: _Section) -> str:
    sha = sec.get("sha256", str, required=True, fix="add the file's sha256 (sha256sum FILE)")
    if not _SHA256.match(sha):
        raise ConfigError(f"{sec.key_path('sha256')} must be 64 lowercase hex digits", where=sec.where("sha256"))
    return str(sha)


def _load_rules(sec: _Section, defaults: Defaults) -> ArchRules:
    default = _arch_spec(sec, "list")
    by_cuda: dict[str, ArchSpec] = {}
    bc = sec.section("by_cuda")
    if bc is not None:
        for cuda in bc.data:
            _check_cuda_key(bc, cuda, defaults.cuda_lines, f"{bc.path}")
            spec = _arch_spec(bc, cuda)
            assert spec is not None
            _validate(spec, cuda)
            by_cuda[cuda] = spec
    by_combo: dict[tuple[str, str], ArchSpec] = {}
    bk = sec.section("by_combo")
    if bk is not None:
        grid_keys = {(r.cuda, r.torch_minor) for r in defaults.grid}
        for key in bk.data:
            m = re.fullmatch(r"(\d{2}\.\d)/(\d+\.\d+)", key)
            if not m:
                raise ConfigError(f"{bk.path} key {key!r} is not 'CUDA/TORCH' like '12.8/2.8'", where=bk.where(key))
            cuda, torch = m[1], m[2]
            _check_cuda_key(bk, cuda, defaults.cuda_lines, f"{bk.path}")
            if (cuda, torch) not in grid_keys:
                raise ConfigError(f"{bk.path} key {key!r} matches no grid row", where=bk.where(key),
                                  hint="the grid in _defaults.yml has no such (cuda, torch) combination")
            spec = _arch_spec(bk, key)
            assert spec is not None
            _validate(spec, cuda)
            by_combo[(cuda, torch)] = spec
    return ArchRules(by_combo, by_cuda, default)


def _load_arch_rules(top: _Section, defaults: Defaults) -> tuple[ArchRules, dict[str, ArchRules]]:
    sec = top.section("arch")
    if sec is None:
        return ArchRules(), {}
    # platform groups (x86_64, aarch64), and the platforms of a group with more than one (win_amd64)
    groups = [*sorted(set(PLATFORM_GROUPS.values())), *SPLIT_PLATFORMS]
    by_platform: dict[str, ArchRules] = {}
    rules = _load_rules(sec, defaults)
    for group in groups:
        gsec = sec.section(group)
        if gsec is not None:
            by_platform[group] = _load_rules(gsec, defaults)
            gsec.done(("list", "by_cuda", "by_combo"))
    sec.done(("list", "by_cuda", "by_combo", *groups))
    return rules, by_platform


def _load_extensions(top: _Section, defaults: Defaults) -> tuple[ExtensionArchs, ...]:
    sec = top.section("extensions")
    if sec is None:
        return ()
    out = []
    for glob in sec.data:
        if not isinstance(sec.data[glob], YMap):  # one list for every CUDA line
            spec = _extension_spec(sec, glob)
            assert spec is not None
            out.append(ExtensionArchs(glob, spec))
            continue
        # {by_cuda: {line: list}}: an extension the package builds only on some lines
        one = sec.section(glob)
        assert one is not None
        bc = one.section("by_cuda", required=True)
        assert bc is not None
        for cuda in bc.data:
            _check_cuda_key(bc, cuda, defaults.cuda_lines, bc.path)
            spec = _extension_spec(bc, cuda)
            assert spec is not None
            _validate(spec, cuda)
            out.append(ExtensionArchs(glob, spec, cuda))
        one.done(("by_cuda",))
    return tuple(out)


def _extension_spec(sec: _Section, key: str) -> ArchSpec | None:
    """An extension's own list, or ``none``: a host-only extension beside CUDA ones (a CPU op
    module), which must then hold no device code."""
    value = sec.data.get(key)
    if isinstance(value, str) and value.strip().lower() == "none":
        sec.seen.add(key)
        return ArchSpec(value, ArchList(frozenset()), sec.where(key))
    return _arch_spec(sec, key)


def _load_vendored(top: _Section) -> tuple[VendoredLib, ...]:
    sec = top.section("vendored")
    if sec is None:
        return ()
    out = []
    for glob in sec.data:
        if isinstance(sec.data[glob], dict):
            sub = sec.section(glob)
            assert sub is not None
            reason = sub.get("exempt", str, required=True,
                             fix="exempt: 'why its targets need not be asserted "
                                 "(e.g. NVIDIA's cuBLAS as NVIDIA ships it)'")
            sub.done(("exempt",))
            if not reason.strip():
                raise ConfigError(f"{sub.key_path('exempt')} is empty", where=sub.where("exempt"),
                                  hint="an exemption needs a reason a reviewer can check")
            out.append(VendoredLib(glob, None, reason.strip(), sub.where("exempt")))
            continue
        text = sec.get(glob, str,
                       fix=f"write an arch list, 'none' (host-only) or {{exempt: REASON}}: {glob}: '8.0;9.0'")
        where = sec.where(glob)
        archs = (ArchList(frozenset()) if text.strip().lower() == "none"
                 else ArchList.parse(text, where=f"{where} ({sec.key_path(glob)})"))
        out.append(VendoredLib(glob, archs, None, where))
    return tuple(out)


_FAMILY_ARCH = re.compile(r"\d+\.\d[af]?(\+PTX)?")


def _load_families(top: _Section) -> tuple[str, tuple[KernelFamily, ...]]:
    """``kernel_families: cmake``, or ``{NAME: {sources: [globs], archs: '9.0a;10.0f', cuda: '>=12.8'}}``."""
    value = top.data.get("kernel_families")
    top.seen.add("kernel_families")
    if value is None:
        return "", ()
    if isinstance(value, str):
        if value != "cmake":
            raise ConfigError(f"kernel_families {value!r} is not known", where=top.where("kernel_families"),
                              hint="write 'kernel_families: cmake' (families read from the package's CMake files), "
                                   "or a mapping NAME: {sources, archs, cuda}")
        return "cmake", ()
    sec = top.section("kernel_families")
    assert sec is not None
    out = []
    for name in sec.data:
        one = sec.section(name)
        if one is None:
            raise ConfigError(f"{sec.key_path(str(name))} must be a mapping", where=sec.where(str(name)),
                              hint="give sources: [globs] and archs: '9.0a;10.0f'")
        sources = one.str_list("sources", required=True) or ()
        if not sources:
            raise ConfigError(f"{one.key_path('sources')} is empty", where=one.where("sources"),
                              hint="list the family's translation units (globs from the build root)")
        archs = one.get("archs", str, required=True, fix="archs: '9.0a;10.0f;12.0f' (as the build writes them)")
        items = [a for a in re.split(r"[;\s]+", archs) if a]
        bad = [a for a in items if not _FAMILY_ARCH.fullmatch(a)]
        if not items or bad:
            raise ConfigError(f"{one.key_path('archs')}: {', '.join(bad) or 'empty'} is not an arch like 9.0a, "
                              "10.0f or 8.0+PTX", where=one.where("archs"), hint="write them as the build does")
        cuda = one.get("cuda", str)
        if cuda is not None and not re.fullmatch(r">=\s*\d+\.\d+", cuda):
            raise ConfigError(f"{one.key_path('cuda')} {cuda!r} is not '>=X.Y'", where=one.where("cuda"),
                              hint="the first CUDA line that builds the family, e.g. '>=12.8'")
        one.done(("sources", "archs", "cuda"))
        out.append(KernelFamily(str(name), tuple(sources), ";".join(items),
                                cuda.removeprefix(">=").strip() if cuda else None, one.where()))
    if not out:
        raise ConfigError("kernel_families is empty", where=top.where("kernel_families"),
                          hint="declare at least one family, or remove the key")
    return "declared", tuple(out)


def _load_ignores(top: _Section) -> tuple[LintIgnore, ...]:
    items = top.get("lint_ignore", list, default=YList())
    out = []
    for i, item in enumerate(items):
        sec = _Section(item, top.file, f"lint_ignore[{i}]", items.line_of(i))
        rule = sec.get("rule", str, required=True)
        path = sec.get("path", str, required=True, fix="a glob relative to the source root, e.g. csrc/*.cu")
        reason = sec.get("reason", str, required=True, fix="say why this finding is safe to ignore")
        if not reason.strip():
            raise ConfigError("lint_ignore reason is empty", where=sec.where("reason"),
                              hint="say why this finding is safe to ignore")
        sec.done(("rule", "path", "reason"))
        out.append(LintIgnore(rule, path, reason, sec.where()))
    return tuple(out)


def _load_only(top: _Section, defaults: Defaults) -> Restriction:
    min_torch = _version_str(top, "min_torch", _TORCH_MINOR, "2.5") if "min_torch" in top.data else None
    top.seen.add("min_torch")
    sec = top.section("only")
    if sec is None:
        return Restriction(min_torch=min_torch)
    platforms = sec.str_list("platforms")
    for plat in platforms or ():
        if plat not in PLATFORMS:
            raise ConfigError(f"unknown platform {plat!r}", where=sec.where("platforms"),
                              hint=did_you_mean(plat, PLATFORMS) or f"platforms: {', '.join(PLATFORMS)}")
    cuda = sec.str_list("cuda")
    for line in cuda or ():
        if line not in defaults.cuda_lines:
            raise ConfigError(f"only.cuda names unknown CUDA line {line!r}", where=sec.where("cuda"),
                              hint=did_you_mean(line, defaults.cuda_lines) or None)
    combos: tuple[ComboFilter, ...] | None = None
    items = sec.get("combinations", list)
    if items is not None:
        combos = tuple(_combo_filter(sec, item, i, items.line_of(i), defaults) for i, item in enumerate(items))
    sec.done(("platforms", "cuda", "combinations"))
    return Restriction(platforms, cuda, combos, min_torch)


def _combo_filter(sec: _Section, item: Any, i: int, line: int, defaults: Defaults) -> ComboFilter:
    csec = _Section(item, sec.file, f"only.combinations[{i}]", line)
    cuda = _version_str(csec, "cuda", _CUDA_LINE, "12.8", required=True)
    _check_cuda_key(csec, cuda, defaults.cuda_lines, f"only.combinations[{i}]")
    torch = _version_str(csec, "torch", _TORCH_MINOR, "2.8")
    pythons = csec.str_list("python")
    csec.done(("cuda", "torch", "python"))
    rows = [r for r in defaults.grid if r.cuda == cuda and (torch is None or r.torch_minor == torch)]
    known = {p for r in rows for p in r.pythons}
    missing = [p for p in pythons or () if p not in known]
    if not rows or missing:
        # a combination that selects nothing would silently drop the package's cells
        what = f"Python {', '.join(missing)} with " if rows else ""
        raise ConfigError(f"only.combinations[{i}] selects {what}CUDA {cuda}"
                          + (f", torch {torch}" if torch else "") + ", which the grid does not have",
                          where=csec.where(), hint=f"the grid in {DEFAULTS_FILE} has: " + ", ".join(
                              f"{r.cuda}/{r.torch_minor}" for r in defaults.grid if r.cuda == cuda))
    return ComboFilter(cuda, torch, pythons)


# ------------------------------------------------------------------------------------------------
# The whole repository
# ------------------------------------------------------------------------------------------------
def load_config(root: Path, *, packages: Iterable[str] | None = None) -> FarmConfig:
    """Load ``_defaults.yml`` and every recipe (or only ``packages``) under ``root``."""
    root = root.resolve()
    defaults = load_defaults(root / DEFAULTS_FILE)
    pkg_dir = root / PACKAGES_DIR
    if not pkg_dir.is_dir():
        raise ConfigError(f"no {PACKAGES_DIR}/ folder", where=str(root), hint="run farm from the farm repository root")
    files = sorted(pkg_dir.glob("*.yml"))
    if packages is not None:
        wanted = list(packages)
        names = {f.stem: f for f in files}
        for name in wanted:
            if name not in names:
                raise UsageError(f"unknown package {name!r}",
                                 hint=did_you_mean(name, names) or f"known packages: {', '.join(sorted(names))}")
        files = [names[n] for n in wanted]
    recipes = {}
    for f in files:
        recipe = load_recipe(f, defaults, root)
        validate_recipe_archs(recipe, defaults)
        recipes[recipe.name] = recipe
    for name, recipe in recipes.items():
        recipes[name] = _link_siblings(recipe, recipes, defaults, root)
    return FarmConfig(root, defaults, recipes)


def _link_siblings(recipe: Recipe, loaded: Mapping[str, Recipe], defaults: Defaults, root: Path) -> Recipe:
    """Resolve the recipes that ``recipe``'s requires_dist and extra_deps placeholders name
    (loading them if needed): another recipe's wheel of the same cell, at run time or to build."""
    siblings: dict[str, SiblingPin] = {}
    for req in (*recipe.requires_dist, *recipe.build.extra_deps):
        for kind, name in requirement_refs(req):
            if name not in siblings:
                other = loaded.get(name) or _load_sibling(recipe, req, name, defaults, root)
                siblings[name] = SiblingPin(other.version, other.links_torch)
            if kind == "local" and siblings[name].links_torch and not recipe.links_torch:
                raise ConfigError(f"requirement {req!r}: {name} links torch, {recipe.name} does not",
                                  where=recipe.where(), hint=f"a torch-free wheel cannot pin {name}'s per-torch wheel")
    return replace(recipe, siblings=siblings) if siblings else recipe


def _load_sibling(recipe: Recipe, req: str, name: str, defaults: Defaults, root: Path) -> Recipe:
    path = root / PACKAGES_DIR / f"{name}.yml"
    if not path.is_file():
        known = [p.stem for p in (root / PACKAGES_DIR).glob("*.yml")]
        raise ConfigError(f"requires_dist entry {req!r} names {name!r}, which has no recipe",
                          where=recipe.where(), hint=did_you_mean(name, known) or None)
    return load_recipe(path, defaults, root)


def validate_recipe_archs(recipe: Recipe, defaults: Defaults) -> None:
    """Every package-wide arch list must build on every CUDA line the package builds on."""
    lines = [c for c in defaults.cuda_lines if recipe.only.cuda is None or c in recipe.only.cuda]
    if recipe.only.combinations is not None:
        lines = [c for c in lines if any(f.cuda == c for f in recipe.only.combinations)]
    for ext in recipe.extensions:  # an extension's own list applies on every line too
        for cuda in lines if ext.cuda is None else ():  # per-line lists were checked against their line
            try:
                validate_for_cuda(ext.spec.archs, cuda, where=ext.spec.where)
            except ArchError as exc:
                raise ArchError(
                    f"{exc.message}; extensions[{ext.glob!r}] applies to CUDA {cuda}",
                    where=exc.where,
                    hint="use arches every CUDA line of the package builds, or only.cuda to skip lines",
                ) from None
    for rules in (recipe.arch, *recipe.arch_by_platform.values()):
        if rules.default is None:
            continue
        for cuda in lines:
            if cuda in rules.by_cuda:
                continue  # overridden for that line
            try:
                validate_for_cuda(rules.default.archs, cuda, where=rules.default.where)
            except ArchError as exc:
                raise ArchError(
                    f"{exc.message}; the package-wide arch list applies to CUDA {cuda}",
                    where=exc.where, hint=f"add arch.by_cuda['{cuda}'] for that line, or only.cuda to skip it",
                ) from None
