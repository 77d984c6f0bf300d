"""A Python environment's installed CUDA extensions and torch, read from disk (nothing imported).

Every distribution with farm provenance (``_build_info.json`` in its ``.dist-info``) and every
other one whose extension modules hold device code, each extension read by farm's native fatbin
reader (per translation unit, the PTX ISA from its ``.version`` line). torch's version and CUDA
flavour come from its metadata and the text of its ``torch/version.py`` (parsed, never run):
importing torch would load the CUDA runtime, which is what a broken environment fails at.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from farm.binary.fatbin import EntryKind, ptx_isa
from farm.binary.inspection import inspect_file
from farm.errors import FarmError, ToolError, UsageError
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
        proc = subprocess.run([python, "-c", _ASK],
                              capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise UsageError(f"cannot run {python}: {exc.strerror}", where="--python",
                         hint="pass the python of the environment to check, e.g. .venv/bin/python") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{python} did not print its sys.path within 60 s", where="--python") from None
    if proc.returncode != 0:
        raise UsageError(f"{python} exited {proc.returncode}: {proc.stderr.strip()[-300:]}", where="--python",
                         hint="pass the python of the environment to check, e.g. .venv/bin/python")
    try:
        paths, tag = json.loads(proc.stdout)
    except (json.JSONDecodeError, ValueError, TypeError):
        raise UsageError(f"{python} printed no sys.path", where="--python") from None
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


DIRECT_URL = "direct_url.json"  # PEP 610: where an installer got a wheel it was given by URL
DIRECT_URL_MAX = 64 * 1024


def farm_index_of(dist: metadata.Distribution) -> str | None:
    """The root of the farm index a wheel was installed from, when the installer recorded its
    URL (``<root>/files/<wheel>``, as the compatibility pages' commands give it); None otherwise."""
    text = dist.read_text(DIRECT_URL)
    if text is None or len(text) > DIRECT_URL_MAX:
        return None
    try:
        url = json.loads(text).get("url")
    except (json.JSONDecodeError, AttributeError):
        return None
    m = re.fullmatch(r"(https?://[^\s\"'#?$`]+/)files/[^/\s\"'#?$`]+\.whl", url) if isinstance(url, str) else None
    return m[1] if m else None


def _package(dist: metadata.Distribution) -> Package | None:
    name = dist.metadata["Name"] or "?"
    site = Path(str(dist.locate_file("")))
    problems: list[str] = []
    info = None
    text = dist.read_text(BUILD_INFO)
    if text is not None:
        try:
            info = BuildInfo.from_json(text, where=f"{name} {dist.version}: {BUILD_INFO}")
        except FarmError as exc:
            problems.append(f"{BUILD_INFO} unreadable: {exc.message}")
    files = [str(f) for f in dist.files or () if _EXTENSION.search(str(f))]
    recorded = dict(info.extensions or {}) if info else {}
    if info and info.extensions:
        files = sorted(set(files) | set(info.extensions))
    if not files and info is None:
        return None
    extensions = []
    for rel in files:
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
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in seen:  # shadowed by an earlier path entry, as import would see it
            continue
        seen.add(name)
        if name == "torch":
            torch = torch_of(dist)
        pkg = _package(dist)
        if pkg is not None:
            packages.append(pkg)
    packages.sort(key=lambda p: p.dist.lower())
    tag = python_tag or f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return Environment(python or sys.executable, paths, tuple(packages), torch, tag)
