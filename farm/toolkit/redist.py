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
import zipfile
from collections.abc import Callable, Sequence
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
_TIMEOUT = 60  # seconds a server may stay silent
MANIFEST_DEADLINE = 120.0  # seconds for the whole manifest
# NVIDIA's largest archive (libcublas with its static libraries) is about 1 GB; a torch toolkit's
# components together about 2.5 GB. Checked against the manifest's sizes before downloading.
MAX_ARCHIVE = 2 << 30
MAX_DOWNLOAD = 7 << 29  # 3.5 GiB
# Unpacked, an archive holds at most this many times its own size (binaries compress 2-4x with
# xz, headers up to ~10x) or UNPACK_FLOOR, whichever is more: a decompression bomb is refused
# from its members' sizes before anything is written.
UNPACK_RATIO = 16
UNPACK_FLOOR = 64 << 20


@dataclass(frozen=True)
class Assembled:
    manifest_sha256: str
    components: tuple[Component, ...]


def fetch_manifest(request: ToolkitRequest) -> Manifest:
    """Download and parse the release's manifest, checked against the pinned sha256 where there is one."""
    url = request.manifest_url
    try:
        data, _final, _type = netutil.fetch_bytes(url, max_bytes=MAX_MANIFEST, timeout=_TIMEOUT,
                                                  deadline=MANIFEST_DEADLINE)
    except TooLarge:
        raise ToolError(f"{url} is larger than {MAX_MANIFEST >> 20} MB: not a redistrib manifest",
                        hint="check the redist root (--redist-url / FARM_CUDA_REDIST_URL)") from None
    except NetworkError as exc:
        if exc.status == 404 or "No such file" in exc.message:
            raise ToolError(f"no manifest for CUDA release {request.release} at {url}",
                            hint=f"pinned releases: {', '.join(request.pinned)}" if request.pinned
                            else "check --release") from None
        raise ToolError(f"cannot fetch the CUDA {request.release} manifest: {exc.message}",
                        hint="check the network, or point FARM_CUDA_REDIST_URL at a reachable mirror") from None
    digest = hashlib.sha256(data).hexdigest()
    if request.manifest_sha256 and digest != request.manifest_sha256:
        raise ToolError(f"manifest {url} has sha256 {digest}, pinned {request.manifest_sha256}",
                        hint="the manifest changed or the download was tampered with; check the pin in _defaults.yml")
    return parse_manifest(data, url=url, sha256=digest)


def download(url: str, dest: Path, archive: Archive, component: str, *, progress: Say | None = None) -> None:
    """``url`` -> ``dest``, verified against the manifest's size and sha256; nothing is left on failure."""
    try:
        # A server that sends more than the manifest says never costs unbounded disk, nor one that
        # trickles unbounded time.
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


def check_budget(chosen: Sequence[tuple[ManifestComponent, Archive]], url: str) -> None:
    """Refuse, before a byte is downloaded, archives larger than any NVIDIA ships: the sizes come
    from the manifest, which an unpinned mirror writes as it likes."""
    for comp, archive in chosen:
        if archive.size > MAX_ARCHIVE:
            raise ToolError(f"{comp.key}: {url} lists its archive at {archive.size:,} bytes, more than the "
                            f"{MAX_ARCHIVE:,} farm downloads for one component; nothing was downloaded",
                            hint="the mirror is not serving NVIDIA's archives; check --redist-url / "
                                 "FARM_CUDA_REDIST_URL")
    total = sum(archive.size for _comp, archive in chosen)
    if total > MAX_DOWNLOAD:
        raise ToolError(f"{url}: the requested components add up to {total:,} bytes, more than the "
                        f"{MAX_DOWNLOAD:,} farm downloads for one toolkit; nothing was downloaded",
                        hint="request fewer components, or check the mirror (--redist-url / FARM_CUDA_REDIST_URL)")


def _check_member(name: str, stem: str, component: str, archive_name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ToolError(f"{component}: {archive_name} holds an unsafe member {name!r} (absolute or '..')",
                        hint="the archive is not NVIDIA's; nothing was unpacked")
    if not path.parts or path.parts[0] != stem:
        raise ToolError(f"{component}: {archive_name} member {name!r} is outside its top folder {stem}/",
                        hint="NVIDIA's archives unpack to one folder named like the archive")
    return path


def _final(path: PurePosixPath, component: str, is_dir: bool) -> PurePosixPath:
    """Where a member ends up in ``CUDA_HOME`` (:func:`_merge`): its top folder stripped, a file
    directly under it moved to ``licenses/<component>/``."""
    rest = path.parts[1:]
    if len(rest) == 1 and not is_dir:
        return PurePosixPath("licenses", component, rest[0])
    return PurePosixPath(*rest) if rest else PurePosixPath(".")


def _check_link(m: tarfile.TarInfo, p: PurePosixPath, stem: str, component: str, archive_name: str) -> None:
    """A link must stay inside ``CUDA_HOME`` where it will live, not only inside the archive: a
    target that climbs back into the top folder's name (``../../<top>/...``) passes against the
    archive but leaves ``CUDA_HOME`` once that folder is stripped."""
    target = PurePosixPath(m.linkname.replace("\\", "/"))
    if m.issym():
        inside = not target.is_absolute() and not os.path.normpath(
            str(_final(p, component, False).parent / target)).startswith("..")
    else:  # a hard link names another member of the archive
        resolved = os.path.normpath(str(target))
        inside = not target.is_absolute() and PurePosixPath(resolved).parts[:1] == (stem,)
    if not inside:
        raise ToolError(f"{component}: {archive_name} member {m.name!r} links outside the toolkit "
                        f"({m.linkname!r})", hint="nothing was unpacked")


def _bomb(component: str, path: Path, limit: int) -> ToolError:
    return ToolError(f"{component}: {path.name} unpacks to more than {limit:,} bytes ({UNPACK_RATIO}x its size): "
                     "not one of NVIDIA's archives", hint="nothing was unpacked; check the mirror")


def _unpack(path: Path, archive: Archive, component: str, dest: Path) -> Path:
    """Unpack into ``dest`` after checking every member; returns the top folder."""
    stem = archive.stem
    limit = max(UNPACK_FLOOR, UNPACK_RATIO * path.stat().st_size)
    if path.name.endswith(".zip"):
        try:
            with zipfile.ZipFile(path) as zf:
                total = 0
                for info in zf.infolist():
                    _check_member(info.filename, stem, component, path.name)
                    total += info.file_size
                    if total > limit:
                        raise _bomb(component, path, limit)
                zf.extractall(dest)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            raise ToolError(f"{component}: {path.name} is not a readable .zip: {exc}") from None
    else:
        try:
            with tarfile.open(path, "r:xz") as tf:
                members = []
                total = 0
                for m in tf:  # each header is checked before the data behind it is decompressed
                    p = _check_member(m.name, stem, component, path.name)
                    if m.issym() or m.islnk():
                        _check_link(m, p, stem, component, path.name)
                    elif not (m.isfile() or m.isdir()):
                        raise ToolError(f"{component}: {path.name} member {m.name!r} is a device or fifo",
                                        hint="nothing was unpacked")
                    total += m.size
                    if total > limit:
                        raise _bomb(component, path, limit)
                    members.append(m)
                tf.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
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
                    same = (src.is_symlink() and dst.is_symlink() and src.readlink() == dst.readlink()) or (
                        src.is_file() and dst.is_file() and not src.is_symlink()
                        and sha256_file(src) == sha256_file(dst))
                    if not same:
                        raise ToolError(f"{component} and {owners.get(str(rel), '?')} both ship {rel}, differently",
                                        hint="drop one of them from the components")
                    continue
                src.replace(dst)
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
    check_budget(chosen, manifest.url)
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
