"""The import check: a built wheel installed in a fresh environment and imported, as a user would.

The assertion proves what device code a wheel holds; it never loads the wheel. This check does:
a new venv of the cell's interpreter (no pip, nothing installed), the wheel installed into it by
pip with its requirements, and each module the recipe's ``verify:`` names imported in a separate
interpreter started in an empty folder (``-I``: no source tree, no ``PYTHONPATH`` on the path).

For a package that links torch, the build environment's site-packages (torch and its
dependencies, the recipe's ``extra_deps``) is made visible through a ``.pth`` file placed after
the venv's own site-packages: the wheel's files are found first, torch is not installed again
(about 5 GB), and pip sees it as installed when it resolves the wheel's requirements.

What is imported (:func:`modules_to_import`, pure): ``verify.import_name`` (default: the
distribution's name as a module), ``verify.extra_imports``, and every Python extension module in
the wheel on its own, except those matching ``verify.no_direct_import``. A failing import is
accepted only when the recipe says why: ``expect_device_error`` (the import fails without a GPU:
any device error, or one containing the given text) or ``needs_driver`` on a host without the
NVIDIA driver (an error that names libcuda). A shared library the loader cannot find is never a
device error: a CUDA runtime library the import loads (libcudart, libnvrtc, ...) is named in
``verify.runtime_libs``, and NVIDIA's wheels of the cell's CUDA line are installed into the fresh
environment with the wheel, their library folders on the loader's path, as a user without torch
installs them beside the package.
"""

from __future__ import annotations

import csv
import ctypes
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from farm.binary.wheelfile import SafeWheel
from farm.errors import ToolError, clip, pip_failure
from farm.model.config import VerifyKnobs

Log = Callable[[str], None]

# An extension module file: name.cpython-311-x86_64-linux-gnu.so, name.abi3.so, name.cp311-win_amd64.pyd
_EXTENSION = re.compile(r"(?P<name>[A-Za-z_]\w*)\.(?:cpython-[^./]+\.so|abi3\.so|[^./]*\.pyd|pyd)$")
# what a "device error" says when `expect_device_error: true` accepts any
_DEVICE_ERROR = re.compile(r"cuda|gpu|device|driver|libcuda|nvml", re.IGNORECASE)
# the driver's libraries: libcuda.so.1 (not libcudart, the runtime), libnvidia-*
_DRIVER_ERROR = re.compile(r"libcuda(?![a-z_])|libnvidia|nvidia driver|cuda driver", re.IGNORECASE)
# the loader found no such library: ImportError: libnvrtc.so.13: cannot open shared object file
_MISSING_LIBRARY = re.compile(r"(?P<lib>[\w.+-]+\.so[\w.]*): cannot open shared object file")
_SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
IMPORT_TIMEOUT_S = 600  # one interpreter importing every module (torch alone takes seconds)
PTH_NAME = "zz_farm_build_env.pth"

# Imports each module named on the command line and prints one JSON line per module. A module
# whose package failed to import is reported with the package's error, not imported again: what
# the failed import left in sys.modules (a submodule loaded before the package failed) would
# otherwise pass for imported, and an extension module cannot be loaded twice in one process.
_PROBE = """\
import importlib, json, sys, traceback
failed = {}
for name in sys.argv[1:]:
    parts = name.split(".")
    parent = next((p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in failed), None)
    if parent is not None:
        error = f"its package {parent} failed to import: {failed[parent]}"
    else:
        try:
            importlib.import_module(name)
            error = None
        except BaseException as exc:
            error = traceback.format_exception_only(type(exc), exc)[-1].strip()
    if error is not None:
        failed[name] = error
    print(json.dumps({"module": name, "error": error}), flush=True)
"""


@dataclass(frozen=True)
class ModuleImport:
    module: str
    error: str | None  # the exception's last line; None when the import worked
    accepted: str | None = None  # why a failure is no defect (the recipe's verify says so)
    hint: str | None = None  # what to do about a failure

    @property
    def ok(self) -> bool:
        return self.error is None or self.accepted is not None

    def to_json(self) -> dict[str, str | None]:
        return {"module": self.module, "error": self.error, "accepted": self.accepted}


@dataclass(frozen=True)
class ImportCheck:
    wheel: Path
    python: str  # the interpreter's version the check ran ("3.12.1")
    imports: tuple[ModuleImport, ...]

    @property
    def passed(self) -> bool:
        return all(i.ok for i in self.imports)

    def render(self) -> str:
        lines = [f"import check of {self.wheel.name} (Python {self.python}, a fresh environment):"]
        for i in self.imports:
            if i.error is None:
                lines.append(f"  import {i.module}: ok")
            elif i.accepted:
                lines.append(f"  import {i.module}: {i.error} (accepted: {i.accepted})")
            else:
                lines.append(f"  import {i.module}: FAILED: {i.error}" + (f" ({i.hint})" if i.hint else ""))
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {"wheel": str(self.wheel), "python": self.python, "passed": self.passed,
                "imports": [i.to_json() for i in self.imports]}


# ------------------------------------------------------------------------------------------------
# the pure core: what to import, and how to judge what came back
# ------------------------------------------------------------------------------------------------
def module_name(dist: str) -> str:
    """The module a distribution installs by default: ``demo-ext`` -> ``demo_ext``."""
    return re.sub(r"[-.]+", "_", dist).lower()


def extension_modules(names: Sequence[str], no_direct_import: Sequence[str] = ()) -> tuple[str, ...]:
    """The dotted names of the wheel's Python extension modules (``pkg/_C.cpython-311-...so`` ->
    ``pkg._C``), minus those matching a ``no_direct_import`` glob (on the archive path or the
    file name). Vendored libraries (``*.libs/``) and the metadata are no modules."""
    found = []
    for name in names:
        parts = name.split("/")
        if any(p.endswith((".libs", ".dist-info", ".data")) for p in parts[:-1]):
            continue
        m = _EXTENSION.match(parts[-1])
        if m is None or not all(p.isidentifier() for p in parts[:-1]):
            continue
        if any(fnmatch.fnmatch(name, g) or fnmatch.fnmatch(parts[-1], g) for g in no_direct_import):
            continue
        found.append(".".join([*parts[:-1], m["name"]]))
    return tuple(sorted(set(found)))


def modules_to_import(names: Sequence[str], knobs: VerifyKnobs, dist: str) -> tuple[str, ...]:
    """In order: the package, the recipe's extra imports, then each extension module on its own."""
    first = knobs.import_name or module_name(dist)
    return tuple(dict.fromkeys((first, *knobs.extra_imports,
                                *extension_modules(names, knobs.no_direct_import))))


def judge(module: str, error: str | None, knobs: VerifyKnobs, *, driver_present: bool) -> ModuleImport:
    """One import's outcome under the recipe's ``verify:`` knobs. A library the loader cannot find
    is no device error, whatever ``expect_device_error`` says: only the driver's, under
    ``needs_driver`` on a host without it."""
    if error is None:
        return ModuleImport(module, None)
    missing = _MISSING_LIBRARY.search(error)
    expected = knobs.expect_device_error
    if missing is None and isinstance(expected, str) and expected in error:
        return ModuleImport(module, error, f"verify.expect_device_error: the error contains {expected!r}")
    if missing is None and expected is True and _DEVICE_ERROR.search(error):
        return ModuleImport(module, error, "verify.expect_device_error: a device error without a GPU")
    if knobs.needs_driver and not driver_present and _DRIVER_ERROR.search(error):
        return ModuleImport(module, error, "verify.needs_driver: this host has no NVIDIA driver")
    if missing is not None and not _DRIVER_ERROR.search(missing["lib"]):
        return ModuleImport(module, error, hint=f"{missing['lib']} is no device error: a CUDA runtime library "
                                                "the import loads is named in verify.runtime_libs (cuda_nvrtc, ...)")
    return ModuleImport(module, error)


def driver_present() -> bool:
    """Whether the NVIDIA driver's libcuda loads on this host."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


# ------------------------------------------------------------------------------------------------
# the shell: a fresh environment, pip, an interpreter
# ------------------------------------------------------------------------------------------------
def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        raise ToolError(f"{python} cannot say where its site-packages is: {clip(out.stderr.strip())}")
    return Path(out.stdout.strip())


def _version(python: Path) -> str:
    out = subprocess.run([str(python), "-I", "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True, check=False, timeout=120)
    return out.stdout.strip() or "unknown"


def make_fresh_env(interpreter: Path | str, directory: Path, *, visible_site: Path | None = None) -> Path:
    """A new venv of ``interpreter`` in ``directory`` (nothing installed, not even pip); with
    ``visible_site``, that folder is on its path after its own site-packages. Returns its python."""
    if directory.exists():
        shutil.rmtree(directory)
    try:
        proc = subprocess.run([str(interpreter), "-m", "venv", "--without-pip", str(directory)],
                              capture_output=True, text=True, check=False, timeout=300)
    except OSError as exc:
        raise ToolError(f"cannot run the interpreter {interpreter}: {exc.strerror or exc}",
                        hint="install that Python, or build the cell where it is") from None
    if proc.returncode != 0:
        raise ToolError(f"cannot make a fresh environment with {interpreter}: {clip(proc.stderr.strip())}",
                        hint="the interpreter needs its venv module (on Debian: apt-get install python3-venv)")
    python = directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if visible_site is not None:
        (_site_packages(python) / PTH_NAME).write_text(f"{visible_site}\n", encoding="utf-8")
    return python


def install_wheel(python: Path, wheel: Path, *, find_links: Sequence[Path] = (), runtime: Sequence[str] = (),
                  log: Log) -> None:
    """The wheel and its requirements into the environment of ``python``, by farm's pip, with the
    ``runtime`` wheels (``nvidia-cuda-nvrtc==13.0.88``). A requirement the environment already
    sees (torch through the build environment) is kept; a farm wheel a requirement pins
    (``cumm==0.7.11+cu128``) comes from ``find_links``."""
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--disable-pip-version-check",
           "--no-compile", *(a for d in find_links for a in ("--find-links", str(d))), str(wheel), *runtime]
    log(f"installing {' '.join((wheel.name, *runtime))} into a fresh environment")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise ToolError(f"pip cannot install {wheel.name} into a fresh environment for its import check "
                        f"(rc {proc.returncode}): {pip_failure(proc.stderr or proc.stdout)}",
                        where=str(wheel),
                        hint="a requirement of the wheel cannot be found: check the index, or the "
                             "recipe's requires_dist")


def library_dirs(sites: Sequence[Path], requirements: Sequence[str]) -> tuple[Path, ...]:
    """The folders holding the shared libraries of the installed ``requirements``, as their
    RECORDs list them (``nvidia/cu13/lib``; ``nvidia/cuda_nvrtc/lib`` for CUDA 12's wheels), in
    the first of ``sites`` that has each (the fresh environment's, then the build environment's
    that pip saw as installed)."""
    wanted = {canonicalize_name(Requirement(r).name) for r in requirements}
    found: dict[Path, None] = {}
    for site in sites:
        for info in sorted(site.glob("*.dist-info")):
            name = canonicalize_name(info.name.split("-", 1)[0])
            if name not in wanted:
                continue
            wanted.discard(name)
            with open(info / "RECORD", newline="", encoding="utf-8") as fh:
                for row in csv.reader(fh):
                    if row and _SHARED_LIBRARY.search(row[0]):
                        found[(site / row[0]).resolve().parent] = None
    if wanted:
        raise ToolError(f"pip installed {', '.join(sorted(wanted))}, but no environment of the import check "
                        f"records it ({', '.join(map(str, sites))})",
                        hint="read pip's output above; the import check's environment is made anew each time")
    return tuple(found)


def run_imports(python: Path, modules: Sequence[str], *, environ: dict[str, str] | None = None) -> list[
        tuple[str, str | None]]:
    """Import each module in one interpreter started with ``-I`` in an empty folder."""
    env = dict(os.environ if environ is None else environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="farm-import-") as empty:
        try:
            proc = subprocess.run([str(python), "-I", "-c", _PROBE, *modules], cwd=empty, env=env,
                                  capture_output=True, text=True, check=False, timeout=IMPORT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ToolError(f"importing {', '.join(modules)} took over {IMPORT_TIMEOUT_S} s",
                            hint="an import that waits forever (a lock, a download): fix the package") from None
    results: dict[str, str | None] = {}
    for line in proc.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the package printed something while importing
        if isinstance(row, dict) and row.get("module") in modules:
            results[row["module"]] = row.get("error")
    # an import that killed the interpreter (a segfault, os._exit) leaves no line: its error is
    # the interpreter's exit and the last of its stderr
    crashed = f"the interpreter died (rc {proc.returncode}): {clip(proc.stderr.strip()[-500:])}"
    return [(m, results.get(m, crashed)) for m in modules]


def check_wheel(wheel: Path, knobs: VerifyKnobs, *, dist: str, interpreter: Path | str, work: Path,
                visible_site: Path | None = None, find_links: Sequence[Path] = (), first: Sequence[str] = (),
                runtime: Sequence[str] = (), log: Log = lambda _: None) -> ImportCheck:
    """The import check of ``wheel`` in a fresh environment of ``interpreter`` under ``work``.
    ``first``: modules imported before the wheel's (``torch``: a torch extension module loads
    only once torch has loaded its libraries, as in every program that uses one). ``runtime``:
    NVIDIA's wheels of the CUDA libraries the import loads (the spec's ``runtime_wheels``),
    installed beside the wheel, their library folders first on ``LD_LIBRARY_PATH``."""
    with SafeWheel(wheel) as sw:
        names = sw.names()
    modules = tuple(dict.fromkeys((*first, *modules_to_import(names, knobs, dist))))
    env_dir = work / "import-check"
    python = make_fresh_env(interpreter, env_dir, visible_site=visible_site)
    try:
        install_wheel(python, wheel, find_links=find_links, runtime=runtime, log=log)
        environ = dict(os.environ)
        sites = [_site_packages(python), *([visible_site] if visible_site is not None else [])]
        dirs = [str(d) for d in library_dirs(sites, runtime)] if runtime else []
        if dirs:
            environ["LD_LIBRARY_PATH"] = os.pathsep.join([*dirs, *filter(None, [environ.get("LD_LIBRARY_PATH")])])
        log(f"importing {', '.join(modules)}")
        driver = driver_present()
        outcome = run_imports(python, modules, environ=environ)
        return ImportCheck(wheel, _version(python),
                           tuple(judge(m, e, knobs, driver_present=driver) for m, e in outcome))
    finally:
        shutil.rmtree(env_dir, ignore_errors=True)
