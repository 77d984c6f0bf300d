"""A ``CUDA_HOME`` assembled for a :class:`~farm.toolkit.request.ToolkitRequest`, cached and verified.

Two sources make the same layout (bin, include, lib with the ``lib64`` link and the development
links such as ``libcudart.so -> libcudart.so.13``, nvvm): NVIDIA's PyPI wheels (CUDA 13, where they
are complete; :func:`install_script`) and NVIDIA's redistributable archives (every line and
platform; :mod:`farm.toolkit.redist`). ``nvcc.profile`` searches ``lib64``, so that link must exist
(the PyPI wheels ship ``lib`` only); the linker needs ``libcudart.so`` for ``-lcudart`` (torch extensions link it),
and ``lib/stubs/libcuda.so`` for ``-lcuda`` (:mod:`farm.toolkit.cudastub`; link time only).

:func:`ensure_toolkit` adds what makes a cache safe: a lock per prefix, assembly in a staging
folder, the ready stamp written only after ``nvcc --version`` reports the requested line, then an
atomic rename. A second call returns at once; an interrupted one leaves nothing that is used.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from farm import cacheseal, jsonread
from farm.errors import ToolError, UsageError
from farm.fsutil import SHA256_HEX, atomic_write, sha256_file, sweep_dead_dirs, temp_dir_prefix
from farm.toolkit import components as comps
from farm.toolkit import cudastub, redist
from farm.toolkit.components import Component
from farm.toolkit.request import ToolkitRequest

STAMP = ".farm-toolkit.json"


@dataclass(frozen=True)
class Toolkit:
    """A usable toolkit: export ``CUDA_HOME=cuda_home``."""

    cuda_home: Path
    nvcc: Path
    cuobjdump: Path
    version: str  # nvcc's release, e.g. "13.0.88"
    cuda: str = ""  # the CUDA line, e.g. "13.0"
    source: str = "installed"  # redist | pypi | installed (--cuda-home)
    release: str | None = None  # NVIDIA's release, e.g. "13.0.2"
    manifest_url: str | None = None
    manifest_sha256: str | None = None
    components: tuple[Component, ...] = ()
    prefix: Path | None = None  # the cache folder it was assembled in (None: installed)
    libcuda_stub: str | None = None  # sha256 of lib/stubs/libcuda.so, as the ready stamp has it (None: none)

    def record(self) -> dict[str, object]:
        """What ``_build_info.json`` and the ledger keep: which exact toolkit built the wheel."""
        return {
            "source": self.source, "release": self.release,
            "manifest_url": self.manifest_url, "manifest_sha256": self.manifest_sha256,
            "components": [c.to_json() for c in self.components],
            "libcuda_stub": self.libcuda_stub,
        }

    def to_json(self) -> dict[str, object]:
        return {
            "cuda": self.cuda,
            "cuda_home": str(self.cuda_home),
            "nvcc": str(self.nvcc),
            "cuobjdump": str(self.cuobjdump),
            "version": self.version,
            **self.record(),
        }


# Shell: the development links the linker needs (libX.so -> libX.so.N), where an archive or wheel
# ships only the versioned name. The glob is sorted, so libX.so.N wins over libX.so.N.M; a library
# shipped only as libX.so.N.M (nvrtc's libnvrtc-builtins.so.13.0, which cumm links with
# -lnvrtc-builtins) gets its link too, as an installed toolkit has it.
_DEV_LINKS_SH = (
    'for f in "$H"/lib/lib*.so.*; do [ -e "$f" ] || continue; n=${f##*/}; d="${f%.so.*}.so"; '
    '[ -e "$d" ] || [ -L "$d" ] || ln -s "$n" "$d"; done'
)


def install_script(request: ToolkitRequest, prefix: str, *, python: str = "python3") -> str:
    """A POSIX shell script that assembles a PyPI-sourced ``request`` under ``prefix``.

    ``prefix/cuda`` becomes ``CUDA_HOME``. Idempotent: a prefix stamped with the same key is left
    alone. The stamp is written last, after ``nvcc --version`` reported the requested line. This is
    cibuildwheel's ``before-all`` in the container and the core of :func:`ensure_toolkit` on the host.
    """
    if request.source != "pypi":
        raise AssertionError("install_script assembles PyPI toolkits")  # callers dispatch on source
    key = request.key()
    q = shlex.quote
    home = f"{prefix}/{home_in_prefix(request)}"
    stamp = f"{prefix}/{STAMP}"
    lines = [
        "set -eu",
        f"if [ -f {q(stamp)} ] && grep -q {q(key)} {q(stamp)}; then exit 0; fi",
        f"mkdir -p {q(prefix)}",
        (f"{q(python)} -m pip install --no-deps --only-binary=:all: --disable-pip-version-check "
         f"--no-input --no-compile --upgrade --report {q(prefix + '/pip-report.json')} "
         f"--target {q(prefix + '/site')} {' '.join(q(r) for r in request.pypi)}"),
        f"H={q(home)}",
        # nvcc.profile searches lib64 for cudart/cudadevrt; the wheels ship lib
        'ln -sfn lib "$H/lib64"',
        _DEV_LINKS_SH,
        # the link-time libcuda stub, made from the wheels' cuda.h by the same code as on the host
        f"{q(python)} - \"$H\" <<'FARM_CUDASTUB'\n{Path(cudastub.__file__).read_text(encoding='utf-8')}FARM_CUDASTUB",
        f"ln -sfn {q(home.removeprefix(prefix + '/'))} {q(prefix + '/cuda')}",
        # ready only when nvcc runs and reports the requested line
        f'"$H/bin/nvcc" --version | grep -q {q(f"release {request.cuda},")}',
        f"printf '%s\\n' {q(json.dumps({'key': key, 'cuda': request.cuda}))} > {q(stamp)}",
    ]
    return "\n".join(lines) + "\n"


def _stamp_purpose(prefix: Path) -> str:
    return f"toolkit-stamp:{prefix.name}"


def read_stamp(prefix: Path) -> dict[str, Any] | None:
    """The ready stamp of the toolkit under ``prefix`` (its request) when it is sealed with this
    user's key (:mod:`farm.cacheseal`): the components and manifest it names go into every wheel's
    provenance."""
    return cacheseal.read_object(Path(prefix) / STAMP, _stamp_purpose(Path(prefix)))


def _object(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (pip's report, read defensively)."""
    return value if isinstance(value, dict) else {}


def _pypi_components(report: Path, request: ToolkitRequest) -> tuple[Component, ...]:
    """The installed wheels' versions and sha256, from pip's installation report."""
    by_wheel = {canonicalize_name(Requirement(comps.pypi_requirement(c, "0", request.cuda)).name): c
                for c in request.components}
    out = []
    try:
        data = jsonread.load_file(report, 64 << 20)
        items = [item for item in data.get("install", []) if isinstance(item, dict)]
    except (OSError, ValueError, AttributeError) as exc:
        raise ToolError(f"pip wrote no readable installation report at {report}: {exc}") from None
    for item in items:
        meta = _object(item.get("metadata"))
        name = canonicalize_name(str(meta.get("name", "")))
        hashes = _object(_object(_object(item.get("download_info")).get("archive_info")).get("hashes"))
        if name in by_wheel:
            out.append(Component(by_wheel[name], str(meta.get("version")), hashes.get("sha256")))
    order = {c: i for i, c in enumerate(request.components)}
    return tuple(sorted(out, key=lambda c: order[c.name]))


_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


def parse_nvcc_release(text: str) -> str:
    """``13.0.88`` from ``nvcc --version`` output (``... release 13.0, V13.0.88``)."""
    m = _NVCC_RELEASE.search(text)
    if not m:
        raise ToolError("cannot read a version from `nvcc --version`", hint=f"its output was: {text.strip()[:200]!r}")
    return m.group(2)


def nvcc_release(nvcc: Path) -> str:
    """What ``nvcc --version`` reports, e.g. ``13.0.88``."""
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"cannot run {nvcc} --version: {exc}") from exc
    if proc.returncode != 0:
        raise ToolError(f"{nvcc} --version exited {proc.returncode}", hint=proc.stderr.strip()[:200] or None)
    return parse_nvcc_release(proc.stdout)


def _exe(request: ToolkitRequest, tool: str) -> str:
    return f"bin/{tool}.exe" if request.platform.startswith("windows") else f"bin/{tool}"


def _host_platform() -> str:
    return "windows-x86_64" if os.name == "nt" else (
        "linux-sbsa" if platform.machine() in ("aarch64", "arm64") else "linux-x86_64")


def _stamp_components(value: object) -> tuple[Component, ...] | None:
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("version"), str)
                and isinstance(item.get("sha256"), (str, type(None)))):
            return None
        out.append(Component(item["name"], item["version"], item.get("sha256")))
    return tuple(out)


def _runs(tool: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        proc = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return proc if proc.returncode == 0 else None


def _cached(prefix: Path, request: ToolkitRequest) -> Toolkit | None:
    """The toolkit under ``prefix`` when its stamp names ``request``'s key and the toolkit itself
    bears the stamp out, else None (the caller assembles it again).

    CI restores this cache, and anyone who can push a branch can write one, so the stamp must be
    sealed with this user's key, and is even then a claim checked on every use: ``home`` lies
    inside the prefix (links resolved), nvcc and cuobjdump are there and run, and nvcc reports the
    release the stamp names, of the requested line. A toolkit for another platform cannot run
    here: its tools must at least be non-empty files and the stamp's release of the requested line."""
    stamp = read_stamp(prefix)
    if stamp is None or stamp.get("key") != request.key():
        return None
    rel, claimed = stamp.get("home"), stamp.get("nvcc")
    components = _stamp_components(stamp.get("components", []))
    urls = [stamp.get("manifest_url"), stamp.get("manifest_sha256")]
    if not (isinstance(rel, str) and rel and isinstance(claimed, str) and claimed.startswith(request.cuda + ".")
            and components is not None and all(isinstance(u, (str, type(None))) for u in urls)):
        return None
    try:
        root = prefix.resolve()
        home = (prefix / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if home == root or not home.is_relative_to(root):
        return None
    stub = stamp.get("libcuda_stub")
    if stub is not None and not (isinstance(stub, str) and SHA256_HEX.fullmatch(stub)
                                 and (home / cudastub.STUB).is_file()):
        return None
    nvcc, cuobjdump = home / _exe(request, "nvcc"), home / _exe(request, "cuobjdump")
    try:
        if not all(tool.is_file() and tool.stat().st_size > 0 for tool in (nvcc, cuobjdump)):
            return None
    except OSError:
        return None
    if request.platform == _host_platform():
        proc = _runs(nvcc, "--version")
        if proc is None or _NVCC_RELEASE.search(proc.stdout) is None or parse_nvcc_release(proc.stdout) != claimed:
            return None
        if _runs(cuobjdump, "--version") is None:
            return None
    return Toolkit(home, nvcc, cuobjdump, claimed, request.cuda, request.source, request.release,
                   urls[0], urls[1], components, prefix, stub)


def cached_toolkit(prefix: Path, request: ToolkitRequest) -> Toolkit | None:
    """``request``'s toolkit when it is assembled under ``prefix`` already (nothing to download)."""
    return _cached(Path(prefix).absolute(), request)


def toolkit_prefix(root: Path, request: ToolkitRequest) -> Path:
    """Where a build's toolkit lives in the cache: ``<root>/<line>/<source>-<release>-<platform>-<key>``."""
    return Path(root) / request.cuda / request.slug


def _ready_version(home: Path, request: ToolkitRequest, components: Sequence[Component]) -> str:
    """nvcc's release, once it reports the requested line: the condition for the ready stamp.

    A toolkit for another platform (Windows archives on a Linux host) cannot run here: its
    ``cuda_nvcc`` version from the manifest stands in, and must be of the requested line.
    """
    nvcc = home / _exe(request, "nvcc")
    if request.platform == _host_platform():
        version = nvcc_release(nvcc)
    else:
        if not nvcc.is_file():
            raise ToolError(f"the assembled toolkit has no {nvcc.name}", where=str(home))
        version = next((c.version for c in components if c.name == "cuda_nvcc"), "")
    if not version.startswith(request.cuda + "."):
        raise ToolError(f"{nvcc} reports release {version}, not CUDA {request.cuda}",
                        hint="the pinned release or the mirror serves another line; "
                             "check toolkit.lines in _defaults.yml")
    return version


def ensure_toolkit(
    request: ToolkitRequest,
    prefix: Path,
    *,
    python: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Toolkit:
    """Return ``request``'s toolkit under ``prefix``, assembling it if needed.

    Cached: a prefix stamped with the same key returns without running anything. ``prefix`` must
    be empty, missing, or a toolkit this function made; anything else is refused untouched.
    Concurrent calls for one prefix wait on its lock; the second finds the first's toolkit.
    """
    prefix = Path(prefix).absolute()
    if prefix.exists() and not prefix.is_dir():
        raise UsageError(f"--prefix {prefix} is a file, not a folder", hint="choose an empty or new --prefix")
    found = _cached(prefix, request)
    if found is not None:
        return found
    prefix.parent.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    with FileLock(str(prefix) + ".lock"):
        found = _cached(prefix, request)  # another process may have finished meanwhile
        if found is not None:
            return found
        # a stamp, even one not believed, marks a folder farm made: it is assembled again
        if prefix.exists() and not (prefix / STAMP).exists() and any(prefix.iterdir()):
            raise UsageError(f"{prefix} exists and is not a toolkit farm assembled; refusing to write into it",
                             hint="choose an empty or new --prefix")
        say(f"assembling CUDA {request.cuda} ({request.source} {request.release}, {request.platform}) "
            f"into {prefix}: {', '.join(request.components)}")
        sweep_dead_dirs(prefix.parent, f".{prefix.name}.staging")  # a killed assembly's half toolkit
        staging = Path(tempfile.mkdtemp(prefix=temp_dir_prefix(f".{prefix.name}.staging"), dir=prefix.parent))
        try:
            stamp = _assemble(request, staging, python=python or sys.executable, say=say)
            atomic_write(staging / STAMP, [cacheseal.seal(json.dumps(stamp, indent=2).encode() + b"\n",
                                                          _stamp_purpose(prefix))])
            # Every link inside is relative, so the staged tree is valid at its final place.
            if prefix.exists():
                old = prefix.with_name(f".{prefix.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                prefix.rename(old)
                staging.rename(prefix)
                shutil.rmtree(old, ignore_errors=True)
            else:
                staging.rename(prefix)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        toolkit = _cached(prefix, request)
        if toolkit is None:
            raise ToolError(f"the toolkit just assembled in {prefix} does not verify (its nvcc or cuobjdump "
                            "does not run, or reports another release)", where=str(prefix),
                            hint="remove the prefix and run `farm toolkit` again; check the pins in _defaults.yml")
        say(f"CUDA {request.cuda} toolkit ready: CUDA_HOME={toolkit.cuda_home}")
        return toolkit


def _require_pip(python: str) -> None:
    """A PyPI toolkit's wheels are installed by ``python -m pip``: its installation report records
    each wheel's version and sha256. farm depends on pip, but an environment can still lack it."""
    probe = subprocess.run([python, "-c", "import pip"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise ToolError(
            f"{python} has no pip: farm installs a toolkit's wheels from PyPI with `python -m pip`",
            where=python,
            hint=f"install pip there (`uv pip install --python {python} pip`, or `{python} -m ensurepip`); "
                 "reinstalling farm there brings it too (farm depends on pip)",
        )


def _assemble(request: ToolkitRequest, staging: Path, *, python: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Assemble into ``staging``; the stamp's content once it is ready."""
    home = home_in_prefix(request)
    if request.source == "pypi":
        if os.name == "nt":
            raise ToolError("assembling a toolkit from PyPI is implemented for Linux hosts only",
                            hint="use --source redist, or pass an installed toolkit (farm build --cuda-home)")
        _require_pip(python)
        proc = subprocess.run(["sh", "-c", install_script(request, str(staging), python=python)],
                              capture_output=True, text=True, check=False)
        stub_failed = proc.stderr.rfind(f"farm: {cudastub.FAILED}: ")
        if proc.returncode != 0 and stub_failed >= 0:  # the wheels are in: pip is not what went wrong
            raise ToolError(proc.stderr[stub_failed:].removeprefix("farm: ").strip(),
                            where=str(staging / home))
        if proc.returncode != 0:
            raise ToolError(
                f"installing CUDA {request.cuda}'s wheels failed (rc {proc.returncode}):\n"
                + (proc.stderr or proc.stdout).strip()[-3000:],
                hint="check that pip can reach PyPI (proxy, certificates) and that the pins exist",
            )
        components = _pypi_components(staging / "pip-report.json", request)
        manifest_url = manifest_sha = None
    else:
        result = redist.assemble(request, staging / "cuda", progress=say)
        components = result.components
        manifest_url, manifest_sha = request.manifest_url, result.manifest_sha256
        # the host's compiler builds only the host's stub; MSVC links the archives' lib/x64/cuda.lib
        if request.platform == _host_platform() and not request.platform.startswith("windows"):
            try:
                cudastub.build_stub(staging / home)
            except (cudastub.StubError, OSError) as exc:
                raise ToolError(cudastub.failure(exc), where=str(staging / home)) from None
    version = _ready_version((staging / home).resolve(), request, components)
    stub = staging / home / cudastub.STUB
    return {
        "key": request.key(), "cuda": request.cuda, "home": home, "nvcc": version,
        "request": request.to_json(), "manifest_url": manifest_url, "manifest_sha256": manifest_sha,
        "components": [c.to_json() for c in components],
        # generated or NVIDIA's own; link time only (never on LD_LIBRARY_PATH, never in a wheel)
        "libcuda_stub": sha256_file(stub) if stub.is_file() else None,
    }


def home_in_prefix(request: ToolkitRequest) -> str:
    """Where CUDA_HOME lies in an assembled toolkit's prefix: the archives' tree, or the wheels' site."""
    return f"site/nvidia/cu{request.cuda.split('.')[0]}" if request.source == "pypi" else "cuda"


def toolkit_at_home(cuda_home: Path) -> Toolkit:
    """A toolkit installed by other means (an image's, a system one): checked, not assembled."""
    home = Path(cuda_home).absolute()
    exe = ".exe" if os.name == "nt" else ""
    nvcc = home / "bin" / f"nvcc{exe}"
    cuobjdump = home / "bin" / f"cuobjdump{exe}"
    if not nvcc.exists():
        raise ToolError(f"{home} has no bin/nvcc{exe}", hint="point CUDA_HOME at a CUDA toolkit")
    if not cuobjdump.exists():
        raise ToolError(f"{home} has no bin/cuobjdump{exe}", hint="install the toolkit's cuobjdump component")
    release = nvcc_release(nvcc)
    return Toolkit(home, nvcc, cuobjdump, release, ".".join(release.split(".")[:2]), "installed")
