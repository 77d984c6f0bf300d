"""The configuration's frozen types: ``_defaults.yml`` (:class:`Defaults`), ``packages/<name>.yml``
(:class:`Recipe`) and a farm root's whole configuration (:class:`FarmConfig`), with the value
rules other stages share.

:mod:`farm.load` reads and validates the files into these types; every mistake is a
:class:`~farm.errors.ConfigError` naming the file, the line, the key and a fix. The recipe
reference (every key, its type and meaning) is in ``docs/recipes.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from packaging.version import Version

from farm.errors import UsageError, clip, did_you_mean
from farm.model.arch import ArchList, Rendering

if TYPE_CHECKING:
    from farm.publish.targets import PublishTarget

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
# requires_dist placeholders: another recipe's version, and the local label its wheel of the same cell carries
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
PLACEHOLDER_REF = re.compile(r"^(version|local):([A-Za-z0-9][A-Za-z0-9._-]*)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what a recipe or target may name as a variable
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
    publish: Mapping[str, PublishTarget]  # parsed by their kind's class (farm.publish.targets)
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


TORCH_INDEX_PIP = "pip"  # pip's own configured indexes (pip.conf, PIP_INDEX_URL, find-links, constraints)


_RELEASE = re.compile(r"\d+\.\d+\.\d+")


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


def requirement_refs(requirement: str) -> list[tuple[str, str]]:
    """The ``(kind, recipe)`` placeholders of a requires_dist entry: ``{version:cumm}`` -> ``("version", "cumm")``."""
    return [(m[1], m[2]) for m in (PLACEHOLDER_REF.match(p) for p in PLACEHOLDER.findall(requirement)) if m]
