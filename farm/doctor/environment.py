"""A Python environment's installed CUDA extensions and torch, read from disk (nothing imported).

Every distribution with farm provenance (``_build_info.json`` in its ``.dist-info``) and every
other one whose extension modules hold device code, each extension read by farm's native fatbin
reader (per translation unit, the PTX ISA from its ``.version`` line). torch's version and CUDA
flavour come from its metadata and the text of its ``torch/version.py`` (parsed, never run):
importing torch would load the CUDA runtime, which is what a broken environment fails at.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from farm import jsonread
from farm.binary.fatbin import EntryKind, ptx_isa
from farm.binary.inspection import inspect_file
from farm.doctor.machine import MAX_OUTPUT, run_capped
from farm.errors import FarmError, ToolError, UsageError, clip
from farm.fsutil import sha256_file
from farm.model.arch import ArchList
from farm.provenance.buildinfo import BuildInfo
from farm.toolkit.components import cuda_line

BUILD_INFO = "_build_info.json"
# extension modules, not the shared libraries beside them (libcublas is not an extension, and
# reading every nvidia-* library would take minutes)
_EXTENSION = re.compile(r"(\.(cpython-[^/.]+|abi3|cp\d+[^/.]*)\.so|\.pyd)$")
VERSION_PY = "torch/version.py"  # torch's build facts, as its setup wrote them
VERSION_PY_MAX = 64 * 1024
MAX_META = 16 << 20  # a METADATA, RECORD or _build_info.json of an installed wheel: kilobytes


@dataclass(frozen=True)
class Extension:
    path: str  # relative to the environment's site directory, as the wheel's RECORD has it
    units: tuple[ArchList, ...]  # what each translation unit's fatbin holds
    ptx_isa: str | None
    ptx_bytes: int  # PTX the driver JIT-compiles when it picks PTX (uncompressed size)
    modified: bool | None  # differs from the sha256 its provenance records; None: nothing recorded

    @property
    def found(self) -> ArchList:
        return ArchList.of(t for u in self.units for t in u)


@dataclass(frozen=True)
class Package:
    dist: str
    version: str
    location: str
    build_info: BuildInfo | None  # farm provenance; None: found by inspection
    extensions: tuple[Extension, ...]
    problems: tuple[str, ...] = ()  # what could not be read, with where
    index_url: str | None = None  # the farm index it was installed from by URL (direct_url.json)


@dataclass(frozen=True)
class Torch:
    version: str  # "2.11.0+cu130"
    cuda: str | None  # "13.0"; "cpu" for a CPU build; None: the metadata does not say

    @property
    def minor(self) -> str:
        return ".".join(self.version.split("+")[0].split(".")[:2])


@dataclass(frozen=True)
class Environment:
    python: str  # the interpreter whose environment this is
    paths: tuple[str, ...]
    packages: tuple[Package, ...]
    torch: Torch | None
    python_tag: str = f"cp{sys.version_info[0]}{sys.version_info[1]}"  # what wheels it installs


_ASK = "import json, sys; print(json.dumps([sys.path, 'cp%d%d' % sys.version_info[:2]]))"


def python_paths(python: str) -> tuple[tuple[str, ...], str]:
    """``sys.path`` and the Python tag of another interpreter (a venv's python): the only thing
    run in it."""
    try:
        code, stdout, stderr = run_capped([python, "-c", _ASK], timeout=60)
    except OSError as exc:
        raise UsageError(f"cannot run {python}: {exc.strerror}", where="--python",
                         hint="pass the python of the environment to check, e.g. .venv/bin/python") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{python} did not print its sys.path within 60 s", where="--python") from None
    if code is None:
        raise UsageError(f"{python} printed more than {MAX_OUTPUT >> 20} MiB where an interpreter prints its "
                         "sys.path: not read further", where="--python",
                         hint="pass the python of the environment to check, e.g. .venv/bin/python")
    if code != 0:
        raise UsageError(f"{python} exited {code}: {clip(stderr.strip()[-300:], 300)}", where="--python",
                         hint="pass the python of the environment to check, e.g. .venv/bin/python")
    try:
        paths, tag = jsonread.loads(stdout)
        if not isinstance(paths, list) or not isinstance(tag, str):
            raise TypeError
    except (ValueError, TypeError):
        raise UsageError(f"{python} printed no sys.path (its first bytes: {clip(stdout[:60])!r})",
                         where="--python", hint="pass the python of the environment to check") from None
    return tuple(str(p) for p in paths if p), str(tag)


def version_py_cuda(text: str) -> str | None:
    """The ``cuda`` line of torch's ``torch/version.py`` (``cuda: Optional[str] = '13.0'``), read
    as Python's syntax tree, never run: ``"13.0"``, ``"cpu"`` when it is ``None`` (a build without
    CUDA), None when the file does not say."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(value, ast.Constant):
            if value.value is None:
                return "cpu"
            if isinstance(value.value, str) and re.fullmatch(r"\d+\.\d+", value.value):
                return value.value
    return None


def _version_py(dist: metadata.Distribution) -> str | None:
    """The CUDA line the installed torch's ``torch/version.py`` records (see :func:`version_py_cuda`)."""
    path = Path(str(dist.locate_file(VERSION_PY)))
    try:
        with open(path, "rb") as fh:
            raw = fh.read(VERSION_PY_MAX + 1)
    except OSError:
        return None
    if len(raw) > VERSION_PY_MAX:  # not the few lines torch writes: not believed
        return None
    return version_py_cuda(raw.decode("utf-8", "replace"))


def torch_of(dist: metadata.Distribution) -> Torch:
    """torch's version and CUDA line: from the local label (``+cu130``), else from the
    ``cuda`` line of its ``torch/version.py`` (PyPI's Linux wheels have no label), else from
    its metadata's pin on NVIDIA's CUDA runtime wheel or ``cuda-toolkit`` meta-package."""
    version = dist.version
    local = version.partition("+")[2]
    m = re.fullmatch(r"cu(\d+)(\d)", local)
    if m:
        return Torch(version, f"{m[1]}.{m[2]}")
    if local in ("cpu", "cxx11.abi") or local.startswith("rocm"):
        return Torch(version, "cpu" if local != "cxx11.abi" else None)
    recorded = _version_py(dist)
    if recorded is not None:
        return Torch(version, recorded)
    # PyPI's default build: its runtime comes from NVIDIA's wheels, pinned exactly
    return Torch(version, cuda_line(dist.requires or ()))


def _extension(site: Path, rel: str, recorded: str | None) -> Extension | None:
    path = site / rel
    so = inspect_file(path, stubs=True)
    if not so.has_device_code:
        return None
    runnable = so.runnable
    ptx = sum(e.uncompressed_size or e.payload_size for f in runnable for e in f.entries if e.kind is EntryKind.PTX)
    modified = None if recorded is None else sha256_file(path) != recorded
    return Extension(rel, so.units, ptx_isa(path, runnable), ptx, modified)


def _read_meta(dist: metadata.Distribution, name: str) -> bytes | None:
    """A file of the distribution's ``.dist-info`` (None when it has none), read only as a
    regular file and at most :data:`MAX_META` bytes: installed files are anyone's (a
    ``_build_info.json`` made a link to ``/dev/zero`` was read until memory ran out)."""
    folder = getattr(dist, "_path", None)  # importlib.metadata's PathDistribution: its .dist-info folder
    if folder is None:
        text = dist.read_text(name)
        return None if text is None else text.encode()
    try:
        return jsonread.read_bounded(Path(folder) / name, MAX_META)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{name} {clip(exc, 120)}") from None


def _inside(rel: str) -> bool:
    """Whether ``rel`` names a file under the environment's site folder (RECORD and provenance are the wheel's word:
    ``../../etc/shadow`` or ``/dev/zero`` is never read, nor shown)."""
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts and "\\" not in rel


DIRECT_URL = "direct_url.json"  # PEP 610: where an installer got a wheel it was given by URL
DIRECT_URL_MAX = 64 * 1024


def farm_index_of(dist: metadata.Distribution) -> str | None:
    """The root of the farm index a wheel was installed from, when the installer recorded its
    URL (``<root>/files/<wheel>``, as the compatibility pages' commands give it); None otherwise."""
    try:
        raw = _read_meta(dist, DIRECT_URL)
        url = jsonread.loads(raw).get("url") if raw is not None and len(raw) <= DIRECT_URL_MAX else None
    except (UsageError, ValueError, AttributeError):
        return None
    m = re.fullmatch(r"(https?://[^\s\"'#?$`]+/)files/[^/\s\"'#?$`]+\.whl", url) if isinstance(url, str) else None
    return m[1] if m else None


def _unreadable(dist: metadata.Distribution, exc: Exception) -> Package:
    where = str(getattr(dist, "_path", "?"))
    return Package(Path(where).name, "?", where, None, (), (f"unreadable: {clip(exc, 160)}",))


def _package(dist: metadata.Distribution, name: str) -> Package | None:
    files = [str(f) for f in dist.files or () if _EXTENSION.search(str(f))]
    site = Path(str(dist.locate_file("")))
    problems: list[str] = []
    info = None
    try:
        raw = _read_meta(dist, BUILD_INFO)
        if raw is not None:
            info = BuildInfo.from_json(raw, where=f"{name} {dist.version}: {BUILD_INFO}")
    except FarmError as exc:
        problems.append(f"{BUILD_INFO} unreadable: {exc.message}")
    recorded = dict(info.extensions or {}) if info else {}
    if info and info.extensions:
        files = sorted(set(files) | set(info.extensions))
    if not files and info is None and not problems:
        return None
    extensions = []
    for rel in files:
        if not _inside(rel):
            problems.append(f"{clip(rel, 80)}: not a path inside the environment; not read")
            continue
        if not (site / rel).is_file():
            problems.append(f"{rel}: listed but not installed")
            continue
        try:
            ext = _extension(site, rel, recorded.get(rel))
        except FarmError as exc:
            problems.append(f"{rel}: {exc.message}")
            continue
        except OSError as exc:  # unreadable (permissions): say which, check the rest
            problems.append(f"{rel}: cannot read it ({exc.strerror})")
            continue
        if ext is not None:
            extensions.append(ext)
    if info is None and not extensions and not problems:
        return None  # host-only extensions: not a CUDA package
    return Package(name, dist.version, str(site), info, tuple(extensions), tuple(problems), farm_index_of(dist))


def scan(paths: tuple[str, ...] | None = None, python: str | None = None, python_tag: str | None = None) -> Environment:
    """The environment on ``paths`` (default: this interpreter's ``sys.path``)."""
    paths = paths if paths is not None else tuple(p for p in sys.path if p)
    seen: set[str] = set()
    packages, torch = [], None
    for dist in metadata.distributions(path=list(paths)):
        try:
            for part in ("METADATA", "RECORD"):  # what importlib.metadata reads whole: checked first
                _read_meta(dist, part)
            shown = dist.metadata["Name"] or "?"
            dist.files  # noqa: B018 (RECORD parsed now, where its error can be caught)
        except (UsageError, UnicodeDecodeError, ValueError) as exc:
            packages.append(_unreadable(dist, exc))
            continue
        name = shown.lower().replace("_", "-")
        if name in seen:  # shadowed by an earlier path entry, as import would see it
            continue
        seen.add(name)
        if name == "torch":
            torch = torch_of(dist)
        pkg = _package(dist, shown)
        if pkg is not None:
            packages.append(pkg)
    packages.sort(key=lambda p: p.dist.lower())
    tag = python_tag or f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return Environment(python or sys.executable, paths, tuple(packages), torch, tag)
