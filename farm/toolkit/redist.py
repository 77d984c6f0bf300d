"""A ``CUDA_HOME`` from NVIDIA's redistributable archives: fetch, verify, unpack safely, merge.

Every archive is checked against the manifest's size and sha256 before it is opened; a download
goes to ``<name>.part`` and gets its final name only once verified, so an interrupted one is never
used. Extraction refuses absolute names, ``..``, links that leave the archive and special files,
and each archive must unpack to the one top folder NVIDIA's layout has. The archives' ``bin``,
``include``, ``lib``, ``nvvm``, ... merge into one tree; a file two components ship differently
is an error, not a silent overwrite.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from farm import netutil
from farm.errors import NetworkError, TooLarge, ToolError
from farm.fsutil import sha256_file
from farm.progress import Say
from farm.toolkit.components import Component
from farm.toolkit.manifest import Archive, Manifest, ManifestComponent, parse_manifest
from farm.toolkit.request import ToolkitRequest

MAX_MANIFEST = 16 << 20  # real manifests are ~40 KB; a server sending more is not serving one
_TIMEOUT = 60


@dataclass(frozen=True)
class Assembled:
    manifest_sha256: str
    components: tuple[Component, ...]


def _open(url: str):  # type: ignore[no-untyped-def]
    try:
        return urllib.request.urlopen(url, timeout=_TIMEOUT)
    except urllib.error.HTTPError as exc:
        raise ToolError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ToolError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}",
                        hint="check the network, or point FARM_CUDA_REDIST_URL at a reachable mirror") from None


def fetch_manifest(request: ToolkitRequest) -> Manifest:
    """Download and parse the release's manifest, checked against the pinned sha256 where there is one."""
    url = request.manifest_url
    try:
        with _open(url) as resp:
            data = resp.read(MAX_MANIFEST + 1)
    except ToolError as exc:
        if "HTTP 404" in exc.message or "No such file" in exc.message:
            raise ToolError(f"no manifest for CUDA release {request.release} at {url}",
                            hint=f"pinned releases: {', '.join(request.pinned)}" if request.pinned
                            else "check --release") from None
        raise
    if len(data) > MAX_MANIFEST:
        raise ToolError(f"{url} is larger than {MAX_MANIFEST >> 20} MB: not a redistrib manifest")
    digest = hashlib.sha256(data).hexdigest()
    if request.manifest_sha256 and digest != request.manifest_sha256:
        raise ToolError(f"manifest {url} has sha256 {digest}, pinned {request.manifest_sha256}",
                        hint="the manifest changed or the download was tampered with; check the pin in _defaults.yml")
    return parse_manifest(data, url=url, sha256=digest)


def download(url: str, dest: Path, archive: Archive, component: str, *, progress: Say | None = None) -> None:
    """``url`` -> ``dest``, verified against the manifest's size and sha256; nothing is left on failure."""
    try:
        # A server that sends more than the manifest says never costs unbounded disk.
        got = netutil.download(url, dest, max_bytes=archive.size, timeout=_TIMEOUT, progress=progress,
                               label=component)
    except TooLarge:
        size, sha256 = f">{archive.size}", "(more bytes than the manifest says)"
    except NetworkError as exc:
        raise ToolError(f"{component}: {exc.message}", hint="run it again; the partial file was discarded") from None
    else:
        if got.size == archive.size and got.sha256 == archive.sha256:
            return
        dest.unlink()
        size, sha256 = str(got.size), got.sha256
    raise ToolError(
        f"{component}: {url} does not match the manifest: {size} bytes, sha256 {sha256}; "
        f"the manifest says {archive.size} bytes, sha256 {archive.sha256}",
        hint="a truncated or altered download, or a mirror out of date; nothing was unpacked",
    )


def _check_member(name: str, stem: str, component: str, archive_name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ToolError(f"{component}: {archive_name} holds an unsafe member {name!r} (absolute or '..')",
                        hint="the archive is not NVIDIA's; nothing was unpacked")
    if not path.parts or path.parts[0] != stem:
        raise ToolError(f"{component}: {archive_name} member {name!r} is outside its top folder {stem}/",
                        hint="NVIDIA's archives unpack to one folder named like the archive")
    return path


def _unpack(path: Path, archive: Archive, component: str, dest: Path) -> Path:
    """Unpack into ``dest`` after checking every member; returns the top folder."""
    stem = archive.stem
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                _check_member(info.filename, stem, component, path.name)
            zf.extractall(dest)
    else:
        try:
            with tarfile.open(path, "r:xz") as tf:
                members = tf.getmembers()
                for m in members:
                    p = _check_member(m.name, stem, component, path.name)
                    if m.issym() or m.islnk():
                        target = PurePosixPath(m.linkname)
                        base = p.parent if m.issym() else PurePosixPath()
                        resolved = os.path.normpath(str(base / target))
                        if target.is_absolute() or resolved.startswith("..") or \
                                PurePosixPath(resolved).parts[:1] != (stem,):
                            raise ToolError(f"{component}: {path.name} member {m.name!r} links outside the "
                                            f"archive ({m.linkname!r})", hint="nothing was unpacked")
                    elif not (m.isfile() or m.isdir()):
                        raise ToolError(f"{component}: {path.name} member {m.name!r} is a device or fifo",
                                        hint="nothing was unpacked")
                tf.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            if isinstance(exc, ToolError):
                raise
            raise ToolError(f"{component}: {path.name} is not a readable .tar.xz: {exc}") from None
    top = dest / stem
    if not top.is_dir():
        raise ToolError(f"{component}: {path.name} did not unpack to {stem}/")
    return top


def _merge(top: Path, home: Path, component: str, owners: dict[str, str]) -> None:
    """Move ``top``'s tree into ``home``; top-level files (LICENSE) go to ``licenses/<component>/``."""
    for entry in sorted(top.iterdir()):
        if not entry.is_dir() or entry.is_symlink():
            (home / "licenses" / component).mkdir(parents=True, exist_ok=True)
            shutil.move(str(entry), home / "licenses" / component / entry.name)
            continue
        for dirpath, dirnames, filenames in os.walk(entry):
            rel_dir = Path(dirpath).relative_to(top)
            (home / rel_dir).mkdir(parents=True, exist_ok=True)
            for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                src, rel = Path(dirpath) / name, rel_dir / name
                dst = home / rel
                if dst.exists() or dst.is_symlink():
                    same = (src.is_symlink() and dst.is_symlink() and os.readlink(src) == os.readlink(dst)) or (
                        src.is_file() and dst.is_file() and not src.is_symlink()
                        and sha256_file(src) == sha256_file(dst))
                    if not same:
                        raise ToolError(f"{component} and {owners.get(str(rel), '?')} both ship {rel}, differently",
                                        hint="drop one of them from the components")
                    continue
                os.replace(src, dst)
                owners[str(rel)] = component


def finish_layout(home: Path, *, windows: bool) -> None:
    """``lib64 -> lib`` (nvcc.profile searches lib64) and the development links (Linux)."""
    if windows:
        return
    lib = home / "lib"
    if lib.is_dir() and not (home / "lib64").exists():
        (home / "lib64").symlink_to("lib")
    for path in sorted(lib.glob("lib*.so.*")) if lib.is_dir() else ():
        stem, _, suffix = path.name.partition(".so.")
        if "." in suffix:
            continue  # libfoo.so.13.0.96: the soname form libfoo.so.13 gets the link
        dev = lib / f"{stem}.so"
        if not dev.exists() and not dev.is_symlink():
            dev.symlink_to(path.name)


def assemble(
    request: ToolkitRequest,
    home: Path,
    *,
    progress: Callable[[str], None] | None = None,
) -> Assembled:
    """Fetch ``request``'s manifest and archives and build ``home`` from them."""
    say = progress or (lambda _msg: None)
    manifest = fetch_manifest(request)
    chosen: tuple[tuple[ManifestComponent, Archive], ...] = manifest.select(request.components, request.platform)
    work = home.parent / ".redist"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    owners: dict[str, str] = {}
    done = []
    try:
        for comp, archive in chosen:
            url = request.redist_url + archive.relative_path
            file = work / archive.relative_path.rsplit("/", 1)[-1]
            download(url, file, archive, f"{comp.key} {comp.version}", progress=say)
            top = _unpack(file, archive, comp.key, work / comp.key)
            file.unlink()
            _merge(top, home, comp.key, owners)
            done.append(Component(comp.key, comp.version, archive.sha256))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish_layout(home, windows=request.platform.startswith("windows"))
    return Assembled(manifest.sha256, tuple(done))
