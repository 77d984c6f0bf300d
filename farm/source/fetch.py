"""Fetching a recipe's source (git / sdist / path), cached by identity.

A :class:`SourceTree` is a directory on disk plus the identity the lint and the provenance key on:

- ``git``: a shallow clone at the pinned ref (submodules when the recipe says so); identity is the
  resolved commit. A tag is resolved once and the resolution is cached with the tree, so a re-run
  needs no network (recipes refuse floating refs, so a tag is a pin).
- ``sdist``: the file whose sha256 the recipe pins, found through the package index's JSON simple
  API (PEP 691; ``PIP_INDEX_URL`` or PyPI). ``pip download`` is not used: it builds the sdist's
  metadata, which runs the package's ``setup.py`` (arbitrary code, and it fails for every torch
  extension without torch installed). The download is verified against the pin before anything is
  unpacked, and unpacking refuses absolute paths, ``..`` and links that leave the tree. Identity is
  the sha256.
- ``path``: the directory as is; identity is a hash over its files (names, exec bits, contents).

A recipe's ``source.vendor`` entries (what upstream keeps in a git submodule the fetch does not
carry, or clones while it builds) are placed into a copy of that tree: each archive (a URL or an
sdist of the index, pinned by sha256) is verified before it is unpacked, bounded in size, unpacked
refusing absolute paths, ``..`` and links that leave the folder taken from it; a git entry is
fetched as a git source is, at its full commit (git checks each object's hash; the checkout must
be that commit), and copied without its ``.git``. Each is placed at its path, which must be
absent or an empty folder (a submodule's placeholder) and reached through no link. The composed
tree is cached by the base tree's identity and the entries; its identity is a hash of both, and
its description (the provenance ``source``) lists the entries under ``vendor``.

Everything lands under ``cache_dir`` in a temporary directory first and is renamed into place
when complete, so an interrupted fetch never leaves a tree that looks fetched. The cache may come
back from elsewhere (an Actions cache, an earlier job): a tree is used only while its sealed
marker verifies and every entry a build copies still hashes to the digest recorded at its install
(:func:`content_digest`); otherwise it is fetched again. A git fetch is stopped at
:data:`GIT_DEADLINE` or once it holds :data:`GIT_MAX_BYTES`, since git bounds neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from filelock import FileLock
from packaging.utils import InvalidSdistFilename, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from farm import cacheseal
from farm.errors import ConfigError, NetworkError, SourceError, TooLarge
from farm.fsutil import sha256_file, walk_files
from farm.model.config import ArchiveOrigin, GitSource, PathSource, SdistSource, VendorSource
from farm.netutil import download, project_url, read_page
from farm.progress import Say

DEFAULT_INDEX = "https://pypi.org/simple"
_COMPLETE = ".farm-source.json"  # marker written last: its presence means the tree is whole
_CHUNK = 1 << 20
MAX_SDIST_BYTES = 2 << 30  # no sdist farm builds comes near; a server streaming forever stops here
# One git source's fetch: its git data and checkout, submodules included, and every git command of
# it together. A package's source is far below (flash-attention with CUTLASS: 223 MB checked out).
GIT_MAX_BYTES = 4 << 30
GIT_DEADLINE = 1800.0
_POLL = 0.25  # seconds between two looks at a running git
# A vendored tree is a library's headers or sources (GLM: 3 MB packed, 6 MB unpacked): far below these.
MAX_VENDOR_BYTES = 256 << 20
MAX_VENDOR_UNPACKED = 1 << 30
MAX_VENDOR_MEMBERS = 100_000


@dataclass(frozen=True)
class SourceTree:
    """A fetched source: where it lies, what identifies it, and its provenance ``source`` object."""

    root: Path
    identity: str
    description: dict[str, Any] = field(hash=False, compare=False)

    @property
    def kind(self) -> str:
        return str(self.description["kind"])


def fetch(source: GitSource | SdistSource | PathSource, cache_dir: Path, *, package: str | None = None,
          progress: Say | None = None, vendor: tuple[VendorSource, ...] = ()) -> SourceTree:
    """Fetch ``source`` into ``cache_dir`` (or reuse what is there) and return its tree, with the
    recipe's ``vendor`` entries placed into it. ``progress`` hears of each network step (a clone,
    a download); a cached tree says nothing."""
    label = f"package {package!r}" if package else "the source"
    say = progress or (lambda _message: None)
    if isinstance(source, GitSource):
        base = _fetch_git(source, Path(cache_dir), label, say)
    elif isinstance(source, SdistSource):
        base = _fetch_sdist(source, Path(cache_dir), label, say)
    elif isinstance(source, PathSource):
        base = _fetch_path(source, label)
    else:
        raise SourceError(f"{label}: unknown source kind {type(source).__name__}")
    return _with_vendor(base, vendor, Path(cache_dir), label, say) if vendor else base


# ------------------------------------------------------------------------------------------------
# path
# ------------------------------------------------------------------------------------------------
def tree_sha256(root: Path) -> str:
    """A hash of a directory's content (every file in a stable order, VCS and tool directories
    left out): relative names, exec bits, file bytes, link targets."""
    digest = hashlib.sha256()
    for dirpath, name in walk_files(root):
        path = Path(dirpath, name)
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            entry = f"L {rel}\0{path.readlink()}\n"
        else:
            entry = f"{'X' if st.st_mode & 0o111 else 'F'} {rel}\0{sha256_file(path)}\n"
        digest.update(entry.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _fetch_path(source: PathSource, label: str) -> SourceTree:
    root = Path(source.path)
    if not root.is_dir():
        raise SourceError(f"{label}: source path {root} is not a directory",
                          hint="point the recipe's path at the package's source tree")
    identity = tree_sha256(root)
    display = getattr(source, "display", str(root))
    return SourceTree(root, identity, {"kind": "path", "path": display, "tree_sha256": identity})


# ------------------------------------------------------------------------------------------------
# git
# ------------------------------------------------------------------------------------------------
def _git(args: list[str], cwd: Path, label: str, what: str, deadline: float) -> str:
    """Run git in ``cwd``, stopped (its whole process group) at ``deadline`` (a ``time.monotonic``
    value) or once ``cwd`` holds more than :data:`GIT_MAX_BYTES`: git itself bounds neither, and a
    wrong repository or a server that never stops sending would otherwise cost unbounded time and
    disk. Output goes to files, of which only the tail is read."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        except FileNotFoundError:
            raise SourceError(f"{label}: git is not installed", hint="install git to fetch git sources") from None
        stopped = _watch(proc, cwd, deadline)
        if stopped is None and _disk_bytes(cwd) > GIT_MAX_BYTES:  # finished between two looks
            stopped = "bytes"
        if stopped == "time":
            raise SourceError(f"{label}: {what} did not finish within {GIT_DEADLINE:.0f} s (farm's limit on "
                              "fetching one git source); stopped, nothing was cached",
                              hint="check the network and that the repository answers, then run again")
        if stopped == "bytes":
            raise SourceError(f"{label}: {what} passed {GIT_MAX_BYTES >> 20} MiB of git data and checkout "
                              "(farm's limit on one git source); stopped, nothing was cached",
                              hint="check the recipe's repo and ref: a package's source is far smaller (for a "
                                   "repository that really is this large, raise farm.source.fetch.GIT_MAX_BYTES)")
        if proc.returncode != 0:
            size = err.seek(0, os.SEEK_END)
            err.seek(max(0, size - 4096))  # its last 4 KiB
            detail = (err.read().decode("utf-8", "replace").strip().splitlines() or ["(no output)"])[-1]
            raise SourceError(f"{label}: {what} failed: {detail}",
                              hint="check that the repository is reachable and the ref exists (a tag or a full commit)")
        out.seek(0)
        return out.read(1 << 20).decode("utf-8", "replace")


def git_fetch_url(url: str) -> str:
    """The URL git really fetches ``url`` from: the user's ``url.<base>.insteadOf`` rewrites applied
    (a mirror, a local clone), as ``git ls-remote --get-url`` reports them without connecting.
    ``url`` itself where git is not here or does not answer."""
    try:
        proc = subprocess.run(["git", "ls-remote", "--get-url", url], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return url
    rewritten = proc.stdout.strip()
    return rewritten if proc.returncode == 0 and rewritten and "\n" not in rewritten else url


def _watch(proc: subprocess.Popen[bytes], folder: Path, deadline: float) -> str | None:
    """Wait for ``proc``; kill its process group and say why ("time", "bytes") when it passes a bound."""
    try:
        while True:
            try:
                proc.wait(timeout=max(0.0, min(_POLL, deadline - time.monotonic())))
                return None
            except subprocess.TimeoutExpired:
                pass
            why = "time" if time.monotonic() >= deadline else "bytes" if _disk_bytes(folder) > GIT_MAX_BYTES else None
            if why is not None:
                _kill_group(proc)
                return why
    except BaseException:  # farm interrupted (SIGINT, SIGTERM), waiting or counting: git goes with it
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """``proc`` and every process of its group (git's helpers) killed, and ``proc`` reaped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _disk_bytes(folder: Path) -> int:
    """What ``folder`` holds: every file's size, each entry counted at least 512 bytes (a tree of a
    million empty files costs disk too)."""
    total = 0
    pending = [str(folder)]
    while pending:
        # listdir, not scandir: an interruption here (Ctrl-C while git runs) leaves no open iterator
        where = pending.pop()
        try:
            names = os.listdir(where)  # noqa: PTH208 (a list: nothing left open if interrupted)
        except OSError:  # a temporary folder git removed meanwhile
            continue
        for name in names:
            path = os.path.join(where, name)  # noqa: PTH118 (str paths, as listdir gives them)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            total += max(st.st_size, 512)
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
    return total


def _is_commit(ref: str) -> bool:
    return len(ref) == 40 and all(c in "0123456789abcdef" for c in ref.lower())


def _git_key(source: GitSource) -> tuple[str, str]:
    url = source.url if hasattr(source, "url") else source.repo
    return url, hashlib.sha256(f"{url}\0{source.ref}\0{int(source.submodules)}".encode()).hexdigest()[:24]


def git_pointer(source: GitSource, cache_dir: Path) -> Path:
    """The cached resolution of ``source``'s ref (``{"url", "ref", "commit"}``), present once fetched."""
    return Path(cache_dir) / "git" / f"ref-{_git_key(source)[1]}.json"


def is_cached(source: GitSource | SdistSource | PathSource, cache_dir: Path,
              vendor: tuple[VendorSource, ...] = ()) -> bool:
    """Whether :func:`fetch` would find ``source`` (with ``vendor`` placed) in ``cache_dir``
    without the network."""
    cache_dir = Path(cache_dir)
    if not vendor:
        return isinstance(source, PathSource) or _cached_base(source, cache_dir) is not None
    base = _fetch_path(source, "the source") if isinstance(source, PathSource) else _cached_base(source, cache_dir)
    return base is not None and _cached(cache_dir / "vendored" / _vendored_key(base, vendor)) is not None


def _cached_base(source: GitSource | SdistSource, cache_dir: Path) -> SourceTree | None:
    if isinstance(source, SdistSource):
        return _cached(cache_dir / "sdist" / source.sha256.lower())
    commit = pointed_commit(git_pointer(source, cache_dir))
    return None if commit is None else _cached(cache_dir / "git" / f"{commit}{'-sub' if source.submodules else ''}")


def pointed_commit(pointer: Path) -> str | None:
    """The commit a ref pointer (:func:`git_pointer`) resolves to, when this user's seal verifies."""
    commit = (cacheseal.read_object(pointer, f"source-ref:{pointer.name}") or {}).get("commit")
    return commit if isinstance(commit, str) and _is_commit(commit) else None


def _fetch_git(source: GitSource, cache_dir: Path, label: str, say: Say) -> SourceTree:
    url, key = _git_key(source)
    base = cache_dir / "git"
    pointer = git_pointer(source, cache_dir)
    suffix = "-sub" if source.submodules else ""

    def make(scratch: Path) -> SourceTree:
        work = scratch / "tree"
        work.mkdir()
        deadline = time.monotonic() + GIT_DEADLINE  # every git command of this fetch together
        where = f"{url} at {source.ref}"
        say(f"{label}: fetching {where}")
        _git(["init", "-q"], work, label, "git init", deadline)
        _git(["remote", "add", "origin", url], work, label, f"adding remote {url}", deadline)
        try:
            _git(["fetch", "-q", "--depth", "1", "origin", source.ref], work, label, f"git fetch of {where}",
                 deadline)
        except SourceError:
            if not _is_commit(source.ref):
                raise
            # Servers that refuse a bare commit in "want" still serve it from a full fetch.
            _git(["fetch", "-q", "origin"], work, label, f"git fetch of {url}", deadline)
        _git(["checkout", "-q", "--detach", "FETCH_HEAD" if not _is_commit(source.ref) else source.ref],
             work, label, f"checking out {where}", deadline)
        commit = _git(["rev-parse", "HEAD"], work, label, "git rev-parse", deadline).strip()
        if source.submodules:
            _git(["submodule", "update", "--init", "--recursive", "--depth", "1"], work, label,
                 f"fetching the submodules of {where}", deadline)
        description = {"kind": "git", "repo": source.repo, "ref": source.ref, "commit": commit}
        tree = _install(work, base / f"{commit}{suffix}", commit, description)
        _write_sealed(pointer, {"url": url, "ref": source.ref, "commit": tree.identity}, f"source-ref:{pointer.name}")
        return tree

    # a ref never resolved, or a pointer damaged or forged: the ref is resolved again
    return _locked_entry(base, key, lambda: _cached_base(source, cache_dir), make)


# ------------------------------------------------------------------------------------------------
# sdist
# ------------------------------------------------------------------------------------------------
def index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX).rstrip("/")


def _find_sdist_url(source: SdistSource, label: str) -> tuple[str, str]:
    """(url, filename) of the sdist the recipe pins, from the index's project page."""
    page = project_url(index_url(), source.name)
    try:
        listing = read_page(page)
    except NetworkError as exc:
        if exc.status == 404:
            raise SourceError(f"{label}: {source.name!r} is not on the index {index_url()}",
                              hint="check the recipe's sdist name") from None
        if exc.status is not None:
            raise SourceError(f"{label}: the index answered HTTP {exc.status} for {page}") from None
        raise SourceError(f"{label}: cannot read the index page {page}: {exc.message}",
                          hint="check the network or set PIP_INDEX_URL") from None
    except ValueError as exc:
        raise SourceError(f"{label}: cannot read the index page {page}: {exc}",
                          hint="check the network or set PIP_INDEX_URL") from None
    try:
        pinned = Version(source.version)
    except InvalidVersion:
        raise SourceError(f"{label}: {source.version!r} is not a version (PEP 440)",
                          hint="pin the sdist's version as its file name spells it") from None
    candidates = [f for f in listing.files if _sdist_version(f.filename) == pinned]
    for entry in candidates:
        if entry.sha256 == source.sha256.lower():
            return entry.url, entry.filename
    if candidates:
        listed = ", ".join(f"{e.filename} sha256={e.sha256}" for e in candidates)
        raise SourceError(f"{label}: no sdist of {source.name}=={source.version} has the pinned sha256 "
                          f"{source.sha256} (the index has {listed})",
                          hint="the file changed or the pin is wrong: verify and update the recipe's sha256")
    raise SourceError(f"{label}: the index has no sdist for {source.name}=={source.version}",
                      hint="check the version, or use a git source")


def _sdist_version(filename: str) -> Version | None:
    """The version of an sdist file name (packaging's parser), None for anything else."""
    if not filename.endswith((".tar.gz", ".zip")):
        return None
    try:
        return parse_sdist_filename(filename)[1]
    except (InvalidSdistFilename, InvalidVersion):
        return None


def _download(url: str, dest: Path, label: str, say: Say) -> str:
    try:
        return download(url, dest, max_bytes=MAX_SDIST_BYTES, progress=say, label=label).sha256
    except TooLarge:
        raise SourceError(f"{label}: {url} is larger than {MAX_SDIST_BYTES >> 30} GiB, not an sdist",
                          hint="check the recipe's sdist pin") from None
    except NetworkError as exc:
        raise SourceError(f"{label}: downloading {url} failed: {exc.message}", hint="check the network") from None


def _fetch_sdist(source: SdistSource, cache_dir: Path, label: str, say: Say) -> SourceTree:
    sha = source.sha256.lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise SourceError(f"{label}: {source.sha256!r} is not a sha256", hint="pin the sdist by its 64-hex sha256")
    base = cache_dir / "sdist"
    final = base / sha

    def make(scratch: Path) -> SourceTree:
        archive = next((path for path in base.glob(f"{sha}-*") if path.is_file()), None)
        if archive is None:
            url, filename = _find_sdist_url(source, label)
            part = scratch / filename
            got = _download(url, part, label, say)
            if got != sha:
                raise SourceError(f"{label}: {filename} has sha256 {got}, the recipe pins {sha}",
                                  hint="nothing was cached; verify the file and update the pin")
            archive = base / f"{sha}-{filename}"
            part.replace(archive)
        elif sha256_file(archive) != sha:
            archive.unlink()
            raise SourceError(f"{label}: the cached archive for {sha} was corrupt and has been removed",
                              hint="run again to download it afresh")
        work = scratch / "tree"
        work.mkdir()
        unpack(archive, work)
        entries = list(work.iterdir())
        # An sdist holds one top directory; the tree root is that directory.
        inner = entries[0] if len(entries) == 1 and entries[0].is_dir() else work
        description = {"kind": "sdist", "name": source.name, "version": source.version, "sha256": sha}
        return _install(inner, final, sha, description)

    return _locked_entry(base, sha, lambda: _cached(final), make)


def _check_member(name: str, archive: Path) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise SourceError(f"{archive.name}: member {name!r} escapes the archive",
                          hint="the archive is malformed or malicious; nothing was unpacked into the cache")
    return path


def _inside(base: Path, target: Path) -> bool:
    return target.resolve().is_relative_to(base.resolve())


def unpack(archive: Path, dest: Path, *, max_bytes: int | None = None, max_members: int | None = None) -> None:
    """Unpack a .tar(.gz/.bz2/.xz)/.zip archive into ``dest``, refusing anything that leaves
    ``dest``; ``max_bytes``/``max_members``: refused before anything is written when the members'
    declared sizes sum beyond, or there are more members."""
    name = archive.name.lower()
    bounds = (max_bytes, max_members)
    if name.endswith(".zip"):
        try:
            _unpack_zip(archive, dest, bounds)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
            raise SourceError(f"{archive.name}: not a readable zip archive: {exc}",
                              hint="the file is corrupt; nothing was cached") from None
        return
    try:
        _unpack_tar(archive, dest, bounds)
    except (EOFError, zlib.error, lzma.LZMAError) as exc:  # a truncated or corrupt compressed stream
        raise SourceError(f"{archive.name}: not a readable archive: {exc}",
                          hint="the file is corrupt; nothing was cached") from None


def _check_bounds(archive: Path, sizes: list[int], bounds: tuple[int | None, int | None]) -> None:
    max_bytes, max_members = bounds
    if max_members is not None and len(sizes) > max_members:
        raise SourceError(f"{archive.name}: more than {max_members:,} members",
                          hint="not the archive of a library's sources; nothing was unpacked")
    if max_bytes is not None and sum(sizes) > max_bytes:
        raise SourceError(f"{archive.name}: unpacks to {sum(sizes):,} bytes, more than {max_bytes:,}",
                          hint="not the archive of a library's sources; nothing was unpacked")


def _unpack_zip(archive: Path, dest: Path, bounds: tuple[int | None, int | None] = (None, None)) -> None:
    with zipfile.ZipFile(archive) as zf:
        _check_bounds(archive, [info.file_size for info in zf.infolist()], bounds)
        for info in zf.infolist():
            rel = _check_member(info.filename, archive)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise SourceError(f"{archive.name}: member {info.filename!r} is a link",
                                  hint="links in zip sdists are not supported")
            if not rel.parts:
                continue
            out = dest.joinpath(*rel.parts)
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
            if (info.external_attr >> 16) & 0o111:
                out.chmod(0o755)


def _unpack_tar(archive: Path, dest: Path, bounds: tuple[int | None, int | None] = (None, None)) -> None:
    try:
        tf = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed by the with below; open errors differ
    except tarfile.TarError as exc:
        raise SourceError(f"{archive.name}: not a readable archive: {exc}") from None
    with tf:
        members = []
        for member in tf:  # counted as read: a member bomb stops at the bound, not at its end
            members.append(member)
            if bounds[1] is not None and len(members) > bounds[1]:
                break
        _check_bounds(archive, [m.size for m in members], bounds)
        for member in members:
            rel = _check_member(member.name, archive)
            if member.isdev() or member.isfifo():
                raise SourceError(f"{archive.name}: member {member.name!r} is a device or fifo")
            if member.issym() or member.islnk():
                link = PurePosixPath(member.linkname)
                target = (dest.joinpath(*rel.parts[:-1]) if member.issym() else dest).joinpath(*link.parts)
                if link.is_absolute() or not _inside(dest, target):
                    raise SourceError(f"{archive.name}: link {member.name!r} -> {member.linkname!r} leaves the tree",
                                      hint="the archive is malformed or malicious; nothing was cached")
        try:
            tf.extractall(dest, members=members, filter="data")
        except TypeError:  # Python without extraction filters: the checks above are the guard
            tf.extractall(dest, members=members)
        except tarfile.TarError as exc:
            raise SourceError(f"{archive.name}: refused while unpacking: {exc}") from None


# ------------------------------------------------------------------------------------------------
# vendored trees (source.vendor)
# ------------------------------------------------------------------------------------------------
def vendor_description(entry: VendorSource) -> dict[str, Any]:
    """One vendored tree as provenance records it (the ``vendor`` list of the ``source`` object)."""
    origin = entry.origin
    if isinstance(origin, GitSource):
        return {"kind": "git", "path": entry.path, "repo": origin.repo, "commit": origin.ref, "subdir": entry.subdir}
    if isinstance(origin, ArchiveOrigin):
        return {"kind": "archive", "path": entry.path, "url": origin.url, "sha256": origin.sha256,
                "subdir": entry.subdir}
    return {"kind": "sdist", "path": entry.path, "name": origin.name, "version": origin.version,
            "sha256": origin.sha256, "subdir": entry.subdir}


def vendored_key(base_identity: str, vendor: list[dict[str, Any]]) -> str:
    """A composed tree's identity (and cache folder): the base tree's identity (commit, sdist
    sha256, path tree hash) and every entry's description, in the recipe's order. The prune
    computes it from a ledger entry's ``source`` alike."""
    text = json.dumps({"base": base_identity, "vendor": vendor}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _vendored_key(base: SourceTree, vendor: tuple[VendorSource, ...]) -> str:
    return vendored_key(base.identity, [vendor_description(e) for e in vendor])


def _with_vendor(base: SourceTree, vendor: tuple[VendorSource, ...], cache_dir: Path, label: str,
                 say: Say) -> SourceTree:
    key = _vendored_key(base, vendor)
    folder = cache_dir / "vendored"
    final = folder / key

    def make(scratch: Path) -> SourceTree:
        work = scratch / "tree"
        shutil.copytree(base.root, work, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        for entry in vendor:
            unpacked = scratch / "unpacked"
            where = f"{label}: source.vendor {entry.path!r} ({entry.where})"
            if isinstance(entry.origin, GitSource):
                checkout = _vendor_checkout(entry.origin, cache_dir, where, say)
                shutil.copytree(checkout.root, unpacked, symlinks=True, ignore=shutil.ignore_patterns(".git"))
                _place(entry, unpacked, work, f"{entry.origin.repo} at {entry.origin.ref}", label)
            else:
                archive = _vendor_archive(entry.origin, cache_dir / "vendor", where, say)
                unpacked.mkdir()
                unpack(archive, unpacked, max_bytes=MAX_VENDOR_UNPACKED, max_members=MAX_VENDOR_MEMBERS)
                # like an sdist, an archive of one top folder is that folder; else the archive's root
                entries = list(unpacked.iterdir())
                one = len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink()
                _place(entry, entries[0] if one else unpacked, work, archive.name, label)
            if unpacked.exists():  # gone when the whole of it was placed
                shutil.rmtree(unpacked)
        description = {**base.description, "vendor": [vendor_description(e) for e in vendor]}
        return _install(work, final, key, description)

    return _locked_entry(folder, key, lambda: _cached(final), make)


def _vendor_checkout(origin: GitSource, cache_dir: Path, where: str, say: Say) -> SourceTree:
    """A vendored entry's repository checked out at its commit, fetched (and cached) as a git source is;
    ``where`` names the entry."""
    checkout = _fetch_git(origin, cache_dir, where, say)
    if checkout.identity != origin.ref:  # a ref that is a commit checks out as itself: anything else is refused
        raise SourceError(f"{where}: {origin.url} checked out {checkout.identity}, the recipe pins {origin.ref}",
                          hint="nothing was placed; check the repository and the pinned commit")
    return checkout


def _vendor_archive(origin: ArchiveOrigin | SdistSource, store: Path, where: str, say: Say) -> Path:
    """A vendored entry's archive (``origin``; ``where`` names the entry), downloaded once and
    re-hashed on every use: a cached file is believed only when its bytes still have the pinned sha256."""
    sha = origin.sha256
    folder = store / sha  # one folder per archive: the prune removes folders
    store.mkdir(parents=True, exist_ok=True)
    with FileLock(str(store / f"{sha}.lock")):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()  # not farm's (a link is removed, never followed): made afresh below
        cached = next((p for p in folder.iterdir() if p.is_file() or p.is_symlink()), None) if folder.is_dir() else None
        if cached is not None:
            if not cached.is_symlink() and sha256_file(cached) == sha:
                return cached
            cached.unlink()  # damaged, replaced or a link (removed, never followed): fetched afresh below
        if isinstance(origin, ArchiveOrigin):
            url = origin.url
            filename = PurePosixPath(url.split("?")[0]).name
        else:
            url, filename = _find_sdist_url(origin, where)
        with tempfile.TemporaryDirectory(dir=store, prefix="tmp-") as tmp:
            part = Path(tmp) / filename
            try:
                got = download(url, part, max_bytes=MAX_VENDOR_BYTES, progress=say, label=where).sha256
            except TooLarge:
                raise SourceError(f"{where}: {url} is larger than {MAX_VENDOR_BYTES >> 20} MiB",
                                  hint="a vendored tree is a library's sources; check the URL") from None
            except NetworkError as exc:
                raise SourceError(f"{where}: downloading {url} failed: {exc.message}",
                                  hint="check the network, or that the URL still serves the pinned file") from None
            if got != sha:
                raise SourceError(f"{where}: {filename} has sha256 {got}, the recipe pins {sha}",
                                  hint="nothing was unpacked or cached; verify the file and update the pin")
            folder.mkdir(exist_ok=True)
            archive = folder / part.name
            part.replace(archive)
        return archive


def _place(entry: VendorSource, root: Path, tree: Path, archive: str, label: str) -> None:
    """Move the entry's folder of ``root`` (an unpacked archive's top, a checkout) to its path in
    ``tree``; ``archive`` names where ``root`` came from. A ``subdir`` it lacks or a ``path`` the
    pinned source holds already is the recipe's error (exit 2, naming its line); links that leave
    the folder are the source's (exit 3)."""
    where = f"{label}: source.vendor {entry.path!r} ({entry.where})"
    entry_at = f"{label}: source.vendor {entry.path!r}"
    taken = root.joinpath(*entry.subdir.split("/")) if entry.subdir else root
    if not _real_dir_below(root, taken):
        names = ", ".join(sorted(p.name for p in root.iterdir())[:8])
        raise ConfigError(f"{entry_at}: {archive} has no folder {entry.subdir!r} (it holds {names})",
                          where=entry.where,
                          hint="fix subdir to a folder of the archive (relative to its one top folder) or of "
                               "the repository")
    for link in (p for p in taken.rglob("*") if p.is_symlink()):
        target = link.readlink()
        resolved = PurePosixPath(os.path.normpath(link.parent / target))
        if target.is_absolute() or not resolved.is_relative_to(taken.as_posix()):
            rel = link.relative_to(taken).as_posix()
            raise SourceError(f"{where}: {archive}: link {rel!r} -> {target!r} leaves the vendored folder",
                              hint="vendor a folder whose links stay inside it; nothing was cached")
    dest = tree
    parts = entry.path.split("/")
    for part in parts[:-1]:  # never placed through a link of the upstream tree
        dest = dest / part
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise ConfigError(f"{entry_at}: {dest.relative_to(tree).as_posix()!r} is a link or a file in the source",
                              where=entry.where, hint="vendor into a real folder of the source")
    dest = tree.joinpath(*parts)
    if dest.is_symlink() or dest.is_file():
        raise ConfigError(f"{entry_at}: the source already has a file or link at {entry.path!r}",
                          where=entry.where, hint="vendor into a path that is absent or an empty folder")
    if dest.is_dir():
        held = sorted(p.name for p in dest.iterdir())
        if held:
            raise ConfigError(f"{entry_at}: the source already has {len(held)} entries at {entry.path!r} "
                              f"({', '.join(held[:5])}); the vendored tree would overwrite upstream files",
                              where=entry.where,
                              hint="vendor into a path that is absent or an empty folder (a submodule's placeholder)")
        dest.rmdir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    taken.replace(dest)


def _real_dir_below(root: Path, folder: Path) -> bool:
    """``folder`` is a directory reached from ``root`` through no link."""
    here = root
    for part in folder.relative_to(root).parts:
        here = here / part
        if here.is_symlink():
            return False
    return folder.is_dir()


# ------------------------------------------------------------------------------------------------
# cache
# ------------------------------------------------------------------------------------------------
# What a build copies of a tree (farm.builder.prepare.prepare_source leaves these names out) and so what a
# tree taken from the cache is checked for.
COPY_IGNORED = (".git", "__pycache__")


def content_digest(root: Path) -> str | None:
    """sha256 over every entry under ``root`` a build copies: each directory, file (bytes and exec
    bit) and link (its target) by relative name; None when the tree holds anything else (a fifo,
    a device) or cannot be read. Unlike :func:`tree_sha256` (a path source's identity) it covers
    empty directories, links to directories and tool folders (``.tox``, ``.venv``): a build
    copies them too."""
    digest = hashlib.sha256()
    pending = [root]
    try:
        while pending:
            folder = pending.pop()
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
            for entry in entries:
                if entry.name in COPY_IGNORED:
                    continue
                rel = Path(entry.path).relative_to(root).as_posix()
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    line = f"L {rel}\0{Path(entry.path).readlink()}"
                elif stat.S_ISDIR(mode):
                    line = f"D {rel}"
                    pending.append(Path(entry.path))
                elif stat.S_ISREG(mode):
                    line = f"{'X' if mode & 0o111 else 'F'} {rel}\0{sha256_file(Path(entry.path))}"
                else:
                    return None
                digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    except OSError:
        return None
    return digest.hexdigest()


# The ref pointers and completion markers are sealed (farm.cacheseal): CI may restore this folder
# from a cache anyone with push access could have filled, and a forged pointer (a tag resolved to
# another commit) or marker (another identity or root) would lint and build another tree.
def _write_sealed(path: Path, data: dict[str, Any], purpose: str) -> None:
    cacheseal.write(path, json.dumps(data).encode(), purpose)


def _locked_entry(base: Path, key: str, cached: Callable[[], SourceTree | None],
                  make: Callable[[Path], SourceTree]) -> SourceTree:
    """One cache entry under ``base``, made at most once at a time: under the lock
    ``base/<key>.lock``, the cached tree when it verifies (``cached``), otherwise the one ``make``
    fetches and installs, given a scratch folder under ``base`` (the install is a rename on one
    file system) that is removed afterwards, whatever happened."""
    base.mkdir(parents=True, exist_ok=True)
    with FileLock(str(base / f"{key}.lock")):
        tree = cached()
        if tree is not None:
            return tree
        with tempfile.TemporaryDirectory(dir=base, prefix="tmp-") as tmp:
            return make(Path(tmp))


def _cached(final: Path) -> SourceTree | None:
    """The tree installed at ``final``, when its sealed marker verifies and every file still has
    the bytes it was installed with; otherwise None (fetched afresh, the install replaces it)."""
    data = cacheseal.read_object(final / _COMPLETE, f"source-tree:{final.name}") or {}
    root, identity, description = data.get("root"), data.get("identity"), data.get("description")
    if root != "tree" or not isinstance(identity, str) or not isinstance(description, dict):
        return None  # absent, damaged or forged
    # The seal vouches for the marker, not for the files beside it: a restored cache could hold a
    # file changed after the install, and the build would compile it under this identity. A link
    # in place of the folder would point the build at files that can change after this check.
    content = None if final.is_symlink() or (final / root).is_symlink() else content_digest(final / root)
    if content is None or data.get("content") != content:
        return None
    return SourceTree(final / root, identity, description)


def _install(work: Path, final: Path, identity: str, description: dict[str, Any]) -> SourceTree:
    """Move a complete tree into place; the marker goes in last."""
    staging = final.with_name(final.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    work.replace(staging / "tree")
    marker = {"root": "tree", "identity": identity, "description": description,
              "content": content_digest(staging / "tree")}
    _write_sealed(staging / _COMPLETE, marker, f"source-tree:{final.name}")
    if final.is_symlink():  # a restored cache's, never followed
        final.unlink()
    elif final.exists():
        shutil.rmtree(final)
    staging.replace(final)
    # read back to register the marker by its final name: a key retired later reseals it there
    cacheseal.read_object(final / _COMPLETE, f"source-tree:{final.name}")
    return SourceTree(final / "tree", identity, description)
