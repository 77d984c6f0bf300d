"""Measuring what the Actions cache keys hold: the I/O behind ``farm cache-plan --measure``.

- **torch**: for each torch of the grid and each platform, PyPI's wheel (the row's Python
  :data:`PYTHON_TAG` standing for all: a key stores one) and every wheel its requirements bound
  on that platform (``==`` pins and ranges with an upper bound, each at the highest version the
  index has in range; an extra of a meta-package such as ``cuda-toolkit[cudart,...]`` followed
  one level down). Sizes are PEP 700's ``size`` of PEP 691 pages; requirements come from the
  core metadata the index serves beside a wheel (PEP 658), else from the wheel's own
  ``METADATA``, read with HTTP range requests (its central directory and one member, never the
  whole wheel). Unbounded requirements (``filelock``, ``sympy``: pure Python, a few MB) are left out.
- **toolkit**: a ``source: pypi`` line's pinned wheels per Linux platform; for the other lines and
  Windows, the ``size`` of each archive in NVIDIA's redistrib manifest, the manifest checked
  against its pinned sha256.

Whatever cannot be read is listed, with why, in :attr:`CacheSizes.not_measured`; the plan
estimates those keys (:mod:`farm.schedule.cacheplan`).
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterable, Mapping

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from farm.errors import NetworkError
from farm.model.config import FarmConfig
from farm.netutil import IndexPage, LinkedFile, fetch_bytes, project_url, read_page
from farm.schedule.cacheplan import CacheSizes, ComponentSize, TorchSize
from farm.schedule.grid import farm_platform, requirements
from farm.toolkit import components as comps
from farm.toolkit.manifest import parse_manifest
from farm.toolkit.request import platform_name, request_for

MAX_METADATA = 1 << 20
MAX_MANIFEST = 8 << 20
MAX_CENTRAL_DIRECTORY = 32 << 20  # torch's is ~2 MB
# The Python whose torch wheel stands for a row (every grid row has it).
PYTHON_TAG = "cp312"
# PEP 508 environments of farm's platforms.
MARKERS = {
    "linux_x86_64": {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
                     "os_name": "posix"},
    "linux_aarch64": {"platform_system": "Linux", "platform_machine": "aarch64", "sys_platform": "linux",
                      "os_name": "posix"},
    "win_amd64": {"platform_system": "Windows", "platform_machine": "AMD64", "sys_platform": "win32",
                  "os_name": "nt"},
}
_UPPER = re.compile(r"^(==|===|<=|<|~=)$")


# -- pure -------------------------------------------------------------------------------------------------
def marker_env(platform: str, extra: str = "", python_tag: str = PYTHON_TAG) -> dict[str, str]:
    version = f"{python_tag[2]}.{python_tag[3:]}"
    base = {k: str(v) for k, v in default_environment().items()}
    return {**base, **MARKERS[platform], "python_version": version, "python_full_version": version + ".0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": extra}


def bounded(lines: Iterable[str], platform: str, extra: str = "") -> list[Requirement]:
    """The requirements whose marker holds on ``platform`` (with ``extra`` requested) and whose
    version is bounded above (a pin or a range with a ceiling): what fixes a key's size."""
    env = marker_env(platform, extra)
    out: list[Requirement] = []
    for text in lines:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if any(_UPPER.match(s.operator) for s in req.specifier):
            out.append(req)
    return out


def pick_wheel(page: IndexPage, name: str, spec: SpecifierSet, platform: str,
               python_tag: str = PYTHON_TAG) -> LinkedFile | None:
    """The wheel pip would take for ``name`` ``spec`` on ``platform`` under ``python_tag``: the
    highest version in range with a sized wheel for the platform (its own ABI, abi3 or none),
    of that version the highest build; None when the page has none."""
    best: tuple[Version, tuple[int, str], LinkedFile] | None = None
    for file in page.files:
        if file.size is None or not file.filename.endswith(".whl"):
            continue
        try:
            dist, version, build, tags = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        if dist != canonicalize_name(name) or not spec.contains(version, prereleases=True):
            continue
        fits = any((tag.interpreter in (python_tag, "py3", "py2.py3")
                    or (tag.abi == "abi3" and tag.interpreter.startswith("cp3") and tag.interpreter <= python_tag))
                   and tag.abi in (python_tag, "abi3", "none")
                   and (tag.platform == "any" or farm_platform(tag.platform) == platform) for tag in tags)
        if fits and (best is None or (version, build or (-1, "")) > best[:2]):
            best = (version, build or (-1, ""), file)
    return best[2] if best else None


# -- I/O ----------------------------------------------------------------------------------------------------
class _RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, for :mod:`zipfile` (seek, tell, read)."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0
        self.fetched = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        self.fetched += end - self.pos
        if self.fetched > MAX_CENTRAL_DIRECTORY:
            raise NetworkError(f"{self.url}: reading its METADATA took more than {MAX_CENTRAL_DIRECTORY >> 20} MiB",
                               url=self.url)
        body, _, _ = fetch_bytes(self.url, max_bytes=end - self.pos,
                                 headers={"Range": f"bytes={self.pos}-{end - 1}"})
        if len(body) != end - self.pos:  # a server that ignores Range answers the whole file (capped above)
            raise NetworkError(f"{self.url} does not serve byte ranges", url=self.url)
        self.pos = end
        return body


def wheel_metadata(file: LinkedFile) -> bytes:
    """A wheel's core metadata: the index's PEP 658 file when it serves one, else the wheel's
    ``*.dist-info/METADATA`` read by ranges."""
    try:
        body, _, _ = fetch_bytes(file.url + ".metadata", max_bytes=MAX_METADATA)
        return body
    except NetworkError as exc:
        if exc.status != 404 or file.size is None:
            raise
    try:
        with zipfile.ZipFile(_RangeFile(file.url, file.size)) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise NetworkError(f"{file.filename} has {len(names)} .dist-info/METADATA files", url=file.url)
            info = zf.getinfo(names[0])
            if info.file_size > MAX_METADATA:
                raise NetworkError(f"{file.filename}: METADATA of {info.file_size} bytes", url=file.url)
            return zf.read(info)
    except (zipfile.BadZipFile, OSError) as exc:
        raise NetworkError(f"{file.filename}: not a readable wheel ({exc})", url=file.url) from None


class Index:
    """A simple-API index, each project page read once."""

    def __init__(self, root: str) -> None:
        self.root = root if root.endswith("/") else root + "/"
        self._pages: dict[str, IndexPage] = {}

    def page(self, project: str) -> IndexPage:
        key = canonicalize_name(project)
        if key not in self._pages:
            self._pages[key] = read_page(project_url(self.root, key))
        return self._pages[key]

    def wheel(self, req: Requirement, platform: str) -> LinkedFile | None:
        return pick_wheel(self.page(req.name), req.name, req.specifier, platform)


def _closure(index: Index, top: Iterable[str], platform: str, where: str,
             missing: list[str]) -> dict[str, int]:
    """name==version -> bytes of each bounded requirement's wheel, a meta-package's requested
    extras followed one level down."""
    sizes: dict[str, int] = {}

    def add(req: Requirement) -> LinkedFile | None:
        wheel = index.wheel(req, platform)
        if wheel is None or wheel.size is None:
            missing.append(f"{where}: no {platform} wheel of {req.name}{req.specifier}")
            return None
        _, version, _, _ = parse_wheel_filename(wheel.filename)
        sizes[f"{canonicalize_name(req.name)}=={version}"] = wheel.size
        return wheel

    for req in bounded(top, platform):
        wheel = add(req)
        if wheel is not None and req.extras:
            below = requirements(wheel_metadata(wheel))
            for extra in sorted(req.extras):
                for sub in bounded(below, platform, extra):
                    # the meta-package's own requirements (no extra in the marker): counted once, below
                    if sub.marker is not None and "extra" in str(sub.marker):
                        add(sub)
    return sizes


def measure_torch(index: Index, platform: str, torch: str, missing: list[str]) -> TorchSize | None:
    where = f"torch {torch} {platform}"
    try:
        wheel = index.wheel(Requirement(f"torch=={torch}"), platform)
        if wheel is None or wheel.size is None:
            missing.append(f"{where}: no {PYTHON_TAG} wheel on {index.root}")
            return None
        sizes = _closure(index, requirements(wheel_metadata(wheel)), platform, where, missing)
    except NetworkError as exc:
        missing.append(f"{where}: {exc.message}")
        return None
    return TorchSize(platform, torch, comps.cuda_line(sizes), wheel.filename, wheel.size + sum(sizes.values()), sizes)


def measure_toolkit(config: FarmConfig, index: Index, missing: list[str],
                    env: Mapping[str, str]) -> list[ComponentSize]:
    out: list[ComponentSize] = []
    toolkit = config.defaults.toolkit
    every = tuple(dict.fromkeys([*toolkit.torch_components, *(c for line in toolkit.lines.values()
                                                               for c in line.components)]))
    for cuda, line in sorted(toolkit.lines.items()):
        for platform in config.defaults.platforms:
            if line.source == "pypi" and not platform.startswith("win"):
                for component, version in sorted(line.pypi.items()):
                    req = Requirement(comps.pypi_requirement(component, version, cuda))
                    try:
                        wheel = index.wheel(req, platform)
                    except NetworkError as exc:
                        missing.append(f"CUDA {cuda} {platform} {component}: {exc.message}")
                        continue
                    if wheel is None or wheel.size is None:
                        missing.append(f"CUDA {cuda} {platform} {component}: no {platform} wheel of {req}")
                        continue
                    out.append(ComponentSize(cuda, platform, component, wheel.filename, wheel.size))
                continue
            request = request_for(toolkit, cuda, platform=platform, source="redist", env=env)
            try:
                body, _, _ = fetch_bytes(request.manifest_url, max_bytes=MAX_MANIFEST)
            except NetworkError as exc:
                missing.append(f"CUDA {cuda} {platform}: {exc.message}")
                continue
            digest = hashlib.sha256(body).hexdigest()
            if line.manifest_sha256 and digest != line.manifest_sha256:
                missing.append(f"CUDA {cuda} {platform}: {request.manifest_url} is not the pinned manifest "
                               f"(sha256 {digest}, pinned {line.manifest_sha256})")
                continue
            manifest = parse_manifest(body, url=request.manifest_url, sha256=digest)
            for component in every:
                entry = manifest.components.get(component)
                archive = entry.archives.get(platform_name(platform)) if entry else None
                if archive is not None:
                    out.append(ComponentSize(cuda, platform, component,
                                             archive.relative_path.rsplit("/", 1)[-1], archive.size))
    return out


def measure(config: FarmConfig, index_url: str, *, today: str, env: Mapping[str, str]) -> CacheSizes:
    """Every size the plan uses, measured now from ``index_url`` and the redist root."""
    index = Index(index_url)
    missing: list[str] = []
    torches = sorted({row.torch for row in config.defaults.grid}, key=Version)
    measured = [t for platform in config.defaults.platforms for torch in torches
                if (t := measure_torch(index, platform, torch, missing)) is not None]
    return CacheSizes(today, index.root, tuple(measured), tuple(measure_toolkit(config, index, missing, env)),
                      tuple(missing))
