"""What a cell needs of this host, checked before anything is downloaded.

Before ``farm build`` fetches a source, assembles a toolkit or makes a build environment, each
planned cell is checked against the host:

- **platform**: the native builder builds Linux cells of this machine's architecture on Linux;
  cibuildwheel builds Linux cells in a container (any host with the engine) and Windows cells
  only on Windows;
- **engine**: cibuildwheel's container engine starts containers (Linux cells);
- **emulation**: a Linux cell of another architecture than the host's needs a binfmt_misc
  handler a container can use (:func:`farm.builder.images.emulation_blocker`);
- **image**: the cell's manylinux image is here (and of the cell's architecture), or its
  registry answers; a local image is asked once per image ID for its interpreters and compiler
  (:mod:`farm.builder.images`): the cell's ``/opt/python/<tag>-<tag>`` must run that Python;
- **python**: the native builder has an interpreter of the cell's version
  (:mod:`farm.builder.interpreters`), or uv offers one to install (then its download server must
  answer); cibuildwheel's image has it;
- **compiler**: the native builder has a C++ compiler (``$CXX``, ``c++``, ``g++``); so does the image;
- **system**: the native builder's host has the recipe's ``system_packages`` installed (the
  container installs them; on this host they are checked, never installed: :mod:`farm.builder.syspkgs`);
  a Windows cell has MSVC (``cl.exe`` on PATH, or Visual Studio's C++ tools as vswhere finds them);
- **disk**: the cache has room for what is not cached yet (a toolkit, a build environment, the build);
- **network**: each server a missing piece comes from answers (a TCP connection, a few seconds):
  the redist root or the package index for the toolkit, the torch index, the source's git host
  (after git's own ``url.<base>.insteadOf`` rewrites, as git will fetch it) or index. Nothing is
  checked for what is cached already.

:func:`platform_blocker` and :func:`container_blocker` are pure; :class:`Preflight` gathers the
host's facts once per run (each image once, its probe cached per image ID). A cell this host
cannot build is skipped with one line saying why; when the user named it (the blocking
dimension was a filter on the command line) it is refused instead (exit 2 for what the host is,
3 for what it lacks). A missing interpreter is refused with :func:`python_blocker`'s words and exit
code by the preflight and by the native builder alike.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from farm.builder import buildenv, syspkgs
from farm.builder.buildenv import find_uv
from farm.builder.images import ImageFacts, emulated_machines, emulation_blocker, image_for, probe_image, registry_of
from farm.builder.interpreters import Interpreter, Search, find_interpreter, managed_download
from farm.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, FarmError, ToolError, UsageError
from farm.model.cells import Cell
from farm.model.config import TORCH_INDEX_PIP, ArchiveOrigin, GitSource, PathSource, SdistSource, VendorSource
from farm.source.fetch import git_fetch_url, index_url, is_cached
from farm.toolkit.assemble import cached_toolkit, toolkit_prefix

if TYPE_CHECKING:
    from farm.builder.spec import BuildSpec

# What a missing piece takes on disk (measured on Linux x86_64 builds; a margin over each):
TOOLKIT_BYTES = 4 << 30  # an assembled toolkit with torch's components, archives unpacked
TORCH_ENV_BYTES = 7 << 30  # a build environment with torch and its CUDA libraries (about 5 GB)
PLAIN_ENV_BYTES = 512 << 20  # a build environment without torch
BUILD_BYTES = 2 << 30  # the source's copy, objects and wheels of one cell
MANAGED_PYTHON_BYTES = 256 << 20  # a Python uv installs (about 100 MB unpacked)
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Blocker:
    """Why this host cannot build a cell: the dimension (platform, engine, python, compiler, disk,
    network), the reason in words, and the exit code when the cell was named explicitly."""

    dimension: str
    reason: str
    exit_code: int = EXIT_ENVIRONMENT
    hint: str | None = None  # the fix, where the dimension's usual one does not fit

    def error(self, cell: Cell) -> FarmError:
        kind = UsageError if self.exit_code == EXIT_BAD_INPUT else ToolError
        return kind(f"cell {cell.id} cannot be built on this host: {self.reason}",
                    hint=self.hint or _HINTS.get(self.dimension))


_HINTS = {
    "platform": "build it on a host of that platform (CI runs each platform on its own runner)",
    "engine": "start the engine, or use --builder native",
    "image": "make the image (the local one: bash .ci/podman-setup.sh), pull it where its registry answers "
             "(podman pull IMAGE), or name another with --image / --image-aarch64",
    "python": "install that Python (uv python install X.Y, pyenv install X.Y, or the distribution's pythonX.Y)",
    "compiler": "install a C++ compiler (on Debian: apt-get install g++), or set CXX",
    "system": "install the recipe's system packages on this host, or build in the container (--builder cibuildwheel)",
    "disk": "free space in the cache (farm cache prune), or pass --cache-dir on a larger disk",
    "network": "reach that server (a proxy, a mirror: --redist-url, --torch-index, PIP_INDEX_URL), "
               "or fill the cache on a host that can",
}


@dataclass(frozen=True)
class Host:
    system: str  # sys.platform's family: linux | win32 | darwin
    machine: str  # x86_64 | aarch64 | AMD64

    @classmethod
    def this(cls) -> Host:
        return cls(sys.platform, platform.machine())


def platform_blocker(cell: Cell, builder: str, host: Host) -> Blocker | None:
    """Whether ``builder`` can build ``cell``'s platform on ``host`` at all (pure)."""
    system = "Linux" if host.system.startswith("linux") else "Windows" if host.system == "win32" else host.system
    if builder == "native":
        if not (host.system.startswith("linux") and cell.platform.startswith("linux")):
            return Blocker("platform", f"the native builder builds Linux cells on Linux; the cell is "
                                       f"{cell.platform}, this host is {system}", EXIT_BAD_INPUT)
        if not cell.platform.endswith(host.machine):
            return Blocker("platform", f"the cell is {cell.platform}, this host is {host.machine}", EXIT_BAD_INPUT)
        return None
    if cell.platform.startswith("win") and host.system != "win32":
        return Blocker("platform", f"cibuildwheel builds {cell.platform} wheels on Windows; this host is {system}",
                       EXIT_BAD_INPUT)
    return None


def container_blocker(cell: Cell, host: Host, handlers: Mapping[str, bool] | None, reference: str | None,
                      facts: ImageFacts | None, registry_down: str | None) -> Blocker | None:
    """Whether cibuildwheel's container can build the Linux ``cell`` on ``host`` (pure).
    ``handlers``: the host's binfmt_misc handlers (ELF machine -> usable by a container; None: not
    mounted); ``reference``: the cell's image (None: cibuildwheel names none); ``facts``: the
    image's, when it is here; ``registry_down``: why its registry does not answer (None: it does,
    or the image is here)."""
    machine = cell.platform.removeprefix("linux_")
    emulation = emulation_blocker(machine, host.machine, handlers)
    if emulation is not None:
        return Blocker("platform", emulation, EXIT_BAD_INPUT)
    if reference is None:
        return Blocker("image", f"no manylinux image is named for {machine} and cibuildwheel names none")
    if facts is None:
        registry = registry_of(reference)
        if registry is None:
            return Blocker("image", f"the image {reference} is not here, and a localhost/ image is never pulled")
        if registry_down is not None:
            return Blocker("image", f"the image {reference} is not here, and its registry {registry} does not "
                                    f"answer ({registry_down})")
        return None  # pulled by the build; its interpreters are known once it is here
    if facts.os != "linux" or facts.machine != machine:
        return Blocker("image", f"the image {reference} is {facts.os}/{facts.machine}; the cell needs linux/{machine}",
                       EXIT_BAD_INPUT)
    if cell.python not in facts.pythons:
        has = ", ".join(f"{t} ({v})" for t, v in sorted(facts.pythons.items())) or "none"
        notes = "".join(f"; {n}" for n in facts.notes)
        return Blocker("python", f"the image {reference} has no Python {cell.python_version} "
                                 f"(/opt/python/{cell.python}-{cell.python} is not there; it has {has}{notes})",
                       EXIT_BAD_INPUT, hint=f"name an image that has it (--image), or build it with --builder "
                                            f"native and a Python {cell.python_version} on this host")
    if facts.compiler is None:
        return Blocker("compiler", f"the image {reference} has no C++ compiler (c++ or g++)",
                       hint="name an image that has one (--image); manylinux images do")
    return None


def python_blocker(search: Search, *, uv: bool) -> Blocker:
    """The native builder's host has no interpreter of the cell's Python (``search`` found none,
    and uv offers none to install): what the host is, exit 2 when the cell was named. A probe
    that timed out is said as such and is the environment's (exit 3): the Python is there, the
    host too busy to answer; the build may be run again."""
    note = "uv offers no download of it" if uv else "uv, which could install one, is not here"
    if search.timed_out:
        return Blocker("python", search.missing(note), EXIT_ENVIRONMENT,
                       hint="run the build again when the host is less loaded, or name an interpreter that "
                            "answers (PATH, uv, pyenv)")
    return Blocker("python", search.missing(note), EXIT_BAD_INPUT)


def url_host(url: str) -> tuple[str, int] | None:
    """``(host, port)`` a URL is fetched from; None for a local path or file URL."""
    if url.startswith("git@"):  # git@github.com:o/r.git
        return url[4:].split(":", 1)[0], 22
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("", "file") or not parts.hostname:
        return None
    return parts.hostname, parts.port or {"http": 80, "ssh": 22, "git": 9418}.get(parts.scheme, 443)


def _reachable(host: str, port: int) -> str | None:
    """None when a TCP connection opens; else why not."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)


def _compiler(environ: Mapping[str, str]) -> str | None:
    path = environ.get("PATH", "")
    cxx = environ.get("CXX")
    if cxx:
        return shutil.which(cxx.split()[0], path=path)
    return shutil.which("c++", path=path) or shutil.which("g++", path=path)


VSWHERE = Path("Microsoft Visual Studio", "Installer", "vswhere.exe")  # under %ProgramFiles(x86)%
MSVC_COMPONENT = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"


def _msvc(environ: Mapping[str, str]) -> str | None:
    """cl.exe on PATH (a developer prompt), else the newest Visual Studio with the C++ x64 tools
    as vswhere (the installer's locator, where setuptools looks too) reports it; None: neither."""
    cl = shutil.which("cl.exe", path=environ.get("PATH", ""))
    if cl:
        return cl
    root = environ.get("ProgramFiles(x86)")
    vswhere = Path(root) / VSWHERE if root else None
    if vswhere is None or not vswhere.is_file():
        return None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        proc = subprocess.run([str(vswhere), "-latest", "-products", "*", "-requires", MSVC_COMPONENT,
                               "-property", "installationPath"], capture_output=True, text=True,
                              timeout=30, check=False)
        found = proc.stdout.strip().splitlines()[:1]
        return found[0] if proc.returncode == 0 and found else None
    return None


@dataclass
class Preflight:
    """The host's facts, each found once per ``farm build`` and shared by its cells."""

    builder: str
    engine: str = "docker"
    host: Host = field(default_factory=Host.this)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    check_engine: Callable[[str], object] | None = None  # raises ToolError when the engine cannot run
    images: Mapping[str, str] = field(default_factory=dict)  # arch -> the manylinux image the plan names
    cache: Path | None = None  # where an image's probe is cached (per image ID)
    # the host's binfmt_misc handlers and an image's facts (the engine asked); replaceable in tests
    emulation: Callable[[], Mapping[str, bool] | None] = emulated_machines
    probe: Callable[[str, str, Path | None], tuple[ImageFacts | None, str]] = probe_image
    _engine: dict[str, str | None] = field(default_factory=dict)
    uv: str | None = field(default_factory=find_uv)  # installs a cell's Python that is not here
    _interpreters: dict[str, Search] = field(default_factory=dict)  # tag -> what find_interpreter found
    _managed: dict[str, str | None] = field(default_factory=dict)  # tag -> where uv would download it
    _reach: dict[tuple[str, int], str | None] = field(default_factory=dict)
    _handlers: list[Mapping[str, bool] | None] = field(default_factory=list)
    _images: dict[str, tuple[ImageFacts | None, str]] = field(default_factory=dict)
    # the host's package database (apt, dnf, None) and what it lacks; replaceable in tests
    manager: Callable[[], str | None] = syspkgs.host_manager
    missing: Callable[[Sequence[str], str], Sequence[str]] = syspkgs.missing_packages
    _system: dict[tuple[str, ...], tuple[str, str] | None] = field(default_factory=dict)

    def _container(self, cell: Cell) -> Blocker | None:
        if not self._handlers:
            self._handlers.append(self.emulation())
        handlers = self._handlers[0]
        machine = cell.platform.removeprefix("linux_")
        reference = image_for(machine, self.images, self.environ)
        facts = down = None
        if reference is not None and emulation_blocker(machine, self.host.machine, handlers) is None:
            if reference not in self._images:
                self._images[reference] = self.probe(self.engine, reference, self.cache)
            facts, why = self._images[reference]
            if why:
                return Blocker("image", why)
            registry = registry_of(reference)
            if facts is None and registry is not None:
                host, _, port = registry.partition(":")
                down = self._answer((host, int(port) if port.isdigit() else 443))
        return container_blocker(cell, self.host, handlers, reference, facts, down)

    def interpreter(self, cell: Cell) -> Interpreter | None:
        found = self._interpreters.get(cell.python)
        return found.interpreter if found is not None else None

    def _python(self, cell: Cell) -> Blocker | None:
        if cell.python not in self._interpreters:
            self._interpreters[cell.python] = find_interpreter(cell.python, environ=self.environ, uv=self.uv)
        found = self._interpreters[cell.python]
        if found.interpreter is not None or self.managed(cell) is not None:
            return None  # here, or uv installs it: a download, checked with the others
        return python_blocker(found, uv=self.uv is not None)

    def managed(self, cell: Cell) -> str | None:
        """Where uv would download the cell's Python from, when none is here (asked once per tag)."""
        if self.uv is None or self.interpreter(cell) is not None:
            return None
        if cell.python not in self._managed:
            self._managed[cell.python] = managed_download(cell.python, self.uv, environ=self.environ)
        return self._managed[cell.python]

    def _engine_blocker(self) -> Blocker | None:
        if self.engine not in self._engine:
            try:
                if self.check_engine is not None:
                    self.check_engine(self.engine)
                self._engine[self.engine] = None
            except FarmError as exc:
                self._engine[self.engine] = exc.message
        why = self._engine[self.engine]
        return None if why is None else Blocker("engine", why)

    def _answer(self, where: tuple[str, int]) -> str | None:
        """Why ``(host, port)`` does not answer (None: it does), asked once per run."""
        if where not in self._reach:
            self._reach[where] = _reachable(*where)
        return self._reach[where]

    def reach(self, url: str, what: str) -> Blocker | None:
        where = url_host(url)
        if where is None:
            return None
        why = self._answer(where)
        return None if why is None else Blocker(
            "network", f"{what} comes from {where[0]}:{where[1]}, which does not answer ({why})")

    def _packages(self, names: tuple[str, ...]) -> Blocker | None:
        """The recipe's system packages (dnf names) on this host, asked once per list."""
        if names not in self._system:
            self._system[names] = syspkgs.blocker_reason(names, self.manager(), self.missing)
        found = self._system[names]
        return None if found is None else Blocker("system", found[0], hint=found[1])

    def check(self, cell: Cell, *, downloads: Mapping[str, str] | None = None, disk_needed: int = 0,
              cache: Path | None = None, system_packages: tuple[str, ...] = ()) -> Blocker | None:
        """The first reason this host cannot build ``cell``, or None. ``downloads``: what is not
        cached yet -> the URL it comes from; ``disk_needed``: bytes the cache must have free;
        ``system_packages``: the recipe's (dnf names), checked on the native builder's host."""
        blocker = platform_blocker(cell, self.builder, self.host)
        if blocker is None and self.builder == "cibuildwheel" and cell.platform.startswith("linux"):
            blocker = self._engine_blocker()
            if blocker is None:
                blocker = self._container(cell)
        if blocker is None and self.builder == "cibuildwheel" and cell.platform.startswith("win") \
                and _msvc(self.environ) is None:
            blocker = Blocker("compiler", "no MSVC C++ toolset (cl.exe on PATH, or a Visual Studio with the C++ "
                                          "x64 tools that vswhere finds)",
                              hint="install Visual Studio Build Tools with the C++ workload "
                                   f"({MSVC_COMPONENT}), or run from a developer prompt")
        if blocker is None and self.builder == "native":
            blocker = self._python(cell)
            if blocker is None and _compiler(self.environ) is None:
                blocker = Blocker("compiler", "no C++ compiler ($CXX, c++ or g++) on PATH")
            if blocker is None and system_packages:
                blocker = self._packages(system_packages)
        if blocker is None and cache is not None and disk_needed:
            probe = cache
            while not probe.exists() and probe != probe.parent:
                probe = probe.parent
            with contextlib.suppress(OSError):
                free = shutil.disk_usage(probe).free
                if free < disk_needed:
                    blocker = Blocker("disk", f"{probe} has {free / 1e9:.1f} GB free; the cell needs about "
                                              f"{disk_needed / 1e9:.1f} GB for what is not cached yet")
        downloads = dict(downloads or {})
        managed = self.managed(cell) if self.builder == "native" and blocker is None else None
        if managed is not None:
            downloads[f"Python {cell.python_version} (uv python install)"] = managed
        for what, url in downloads.items():
            if blocker is not None:
                break
            blocker = self.reach(url, what)
        return blocker


@dataclass(frozen=True)
class Needs:
    """What a cell's build would fetch (what -> the URL it comes from) and the disk it would take."""

    downloads: Mapping[str, str]
    disk: int


def needs_of(spec: BuildSpec, source: GitSource | SdistSource | PathSource, *, builder: str, source_cache: Path,
             toolkit_root: Path, cuda_home: Path | None, env_root: Path,
             interpreter: Interpreter | None, vendor: tuple[VendorSource, ...] = ()) -> Needs:
    """What is not cached yet for ``spec``'s build, and where it would come from."""
    downloads: dict[str, str] = {}
    disk = BUILD_BYTES
    pip_index = index_url()
    if not is_cached(source, source_cache):
        # git fetches through the user's URL rewrites: a mirror or local clone is what must answer
        downloads["the source"] = git_fetch_url(source.url) if isinstance(source, GitSource) else pip_index
    if vendor and not is_cached(source, source_cache, vendor):
        for entry in vendor:
            origin = entry.origin
            downloads[f"the vendored {entry.path}"] = (git_fetch_url(origin.url) if isinstance(origin, GitSource)
                                                       else origin.url if isinstance(origin, ArchiveOrigin)
                                                       else pip_index)
    if cuda_home is None and cached_toolkit(toolkit_prefix(toolkit_root, spec.toolkit), spec.toolkit) is None:
        downloads["the CUDA toolkit"] = spec.toolkit.manifest_url if spec.toolkit.source == "redist" else pip_index
        disk += TOOLKIT_BYTES
    if builder == "native":
        new_env = interpreter is None  # uv installs the Python first; its environment is new
        if interpreter is not None:
            contents = buildenv.spec_for(spec, interpreter.path)
            new_env = buildenv.reuse_problem(contents, Path(env_root).absolute() / contents.slug) is not None
        if new_env:
            downloads["the build tools"] = pip_index
            if spec.torch_index and spec.torch_index != TORCH_INDEX_PIP:
                downloads["torch"] = spec.torch_index
            disk += ((MANAGED_PYTHON_BYTES if interpreter is None else 0)
                     + (TORCH_ENV_BYTES if spec.torch_version else PLAIN_ENV_BYTES))
    return Needs(downloads, disk)
