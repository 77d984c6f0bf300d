"""File-system primitives shared by every writer: chunked hashing and atomic replacement.

Writers never leave a half-written file under its final name: they write a temp file in the same
directory, fsync it, and ``os.replace`` it into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.errors import FileSystemError, os_error

CHUNK = 1 << 20

# Directories no source walk enters: version control and tool state, not the project's files.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".nox", ".tox", ".venv"})


def walk_files(root: str | os.PathLike[str],
               on_dir: Callable[[str, os.stat_result], None] | None = None) -> Iterator[tuple[str, str]]:
    """(directory, file name) of every file under ``root`` in a stable order (sorted, a directory's
    files before its subdirectories), outside SKIP_DIRS, not entering links to directories.
    ``on_dir(directory, stat)`` sees each directory's stat taken before it is listed: a cache
    keyed on it misses when an entry is added, removed or renamed later."""
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        try:
            if on_dir is not None:
                on_dir(top, os.stat(top))
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:  # unreadable or gone: as os.walk, skipped
            continue
        files, dirs = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                files.append(entry.name)
            elif entry.name not in SKIP_DIRS and not entry.is_symlink():
                dirs.append(entry.name)
        for name in sorted(files):
            yield top, name
        stack.extend(os.path.join(top, d) for d in sorted(dirs, reverse=True))


SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a sha256 as sha256_file writes it (use fullmatch)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (memory does not grow with the file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def open_plain(path: Path) -> BinaryIO:
    """``path`` opened for reading, only if it is a regular file and not a link: a file another
    job handed over (an artifact, a shard's output) is never followed elsewhere, and a FIFO never
    blocks the reader. Raises OSError (ELOOP for a link) or ValueError (not a regular file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("not a regular file")
    return os.fdopen(fd, "rb")


def remove(path: Path) -> None:
    """``path`` gone, whatever is there: a link or a file unlinked (what a link names is never
    touched), a folder removed with everything in it (the links inside are removed, not followed).
    Every cleanup of a folder farm owns goes through this: one left a link there by a build, or a
    user, never empties the folder it points to."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


# -- bytes held, with hard links ----------------------------------------------------------------
Inode = tuple[int, int]  # (st_dev, st_ino): one file, however many names it has


@dataclass(frozen=True)
class TreeBytes:
    """The regular files under a folder, each file counted once however many hard links it has.
    A file's bytes are freed only when its last link goes, so what removing the folder frees is
    its single-link files plus the linked ones whose every link is inside it."""

    single: int  # bytes of the files with one link
    linked: Mapping[Inode, tuple[int, int, int]]  # the others: (bytes, links anywhere, links here)

    @property
    def held(self) -> int:
        return self.single + sum(size for size, _, _ in self.linked.values())

    @property
    def only_here(self) -> int:
        return self.single + sum(size for size, nlink, here in self.linked.values() if here >= nlink)


def tree_bytes(path: Path) -> TreeBytes:
    """:class:`TreeBytes` of ``path`` (a folder, or one file); symbolic links are neither followed
    nor counted, and a file removed while we walk is left out."""
    single = 0
    linked: dict[Inode, tuple[int, int, int]] = {}
    if path.is_symlink() or not path.is_dir():
        files: Iterable[str] = [str(path)]
    else:
        files = (os.path.join(top, name) for top, _, names in os.walk(path) for name in names)
    for name in files:
        try:
            info = os.lstat(name)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if info.st_nlink <= 1:
            single += info.st_size
            continue
        key = (info.st_dev, info.st_ino)
        size, nlink, here = linked.get(key, (info.st_size, info.st_nlink, 0))
        linked[key] = (size, nlink, here + 1)
    return TreeBytes(single, linked)


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, chunks: Iterable[bytes], *, mode: int | None = None, durable: bool = True) -> None:
    """Write ``chunks`` to ``path`` through a temp file in the same directory + fsync + rename.

    ``mode`` defaults to the existing file's mode, else 0644 (mkstemp creates 0600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    with writing(path):
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp", dir=path.parent)
        try:
            os.chmod(tmp, mode)
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                out.flush()
                if durable:
                    os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if durable:
            fsync_dir(path.parent)


@contextlib.contextmanager
def writing(path: Path, doing: str = "write") -> Iterator[None]:
    """Turn a full disk or a permission error while writing ``path`` into a message that names
    the path and the remedy (exit 3), instead of a bare ``[Errno 28]``."""
    try:
        yield
    except FileSystemError:
        raise
    except OSError as exc:
        if exc.errno is None or isinstance(exc, (FileNotFoundError, FileExistsError, IsADirectoryError)):
            raise
        raise os_error(exc, path, doing) from None


# -- leftovers of killed runs -------------------------------------------------------------------
# Temp files carry their writer's pid (``.<name>.<pid>.<random>.tmp`` / ``.part``): the next run
# of a command removes those whose writer is gone, and never one a live writer still fills.
_LEFTOVER = re.compile(r"^\..+\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.(?:tmp|part)$")


def temp_prefix(name: str) -> str:
    return f".{name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def temp_dir_prefix(name: str) -> str:
    """``mkdtemp`` prefix for a private work folder a later run may sweep (:func:`sweep_dead_dirs`)."""
    return f"{name}-{os.getpid()}-"


def sweep_dead_dirs(parent: Path, name: str) -> list[Path]:
    """Remove ``parent/<name>-<pid>-*`` work folders whose process is gone (a killed run's)."""
    removed = _dead_entries(parent, re.compile(rf"^{re.escape(name)}-(?P<pid>\d+)-[A-Za-z0-9_]+$"))
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def sweep_leftovers(directory: Path, prefix: str = ".") -> list[Path]:
    """Remove the temp files of killed writers in ``directory`` (not recursive; only names that
    start with ``prefix``); returns them."""
    removed: list[Path] = []
    for path in _dead_entries(directory, _LEFTOVER, prefix):
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _dead_entries(directory: Path, pattern: re.Pattern[str], prefix: str = "") -> list[Path]:
    """The entries of ``directory`` whose name starts with ``prefix`` and that ``pattern`` matches
    with the ``pid`` of a process that is gone (none when the folder cannot be listed)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [Path(directory) / name for name in names
            if name.startswith(prefix) and (m := pattern.match(name)) and not _alive(int(m["pid"]))]


# -- farm's cache folders ------------------------------------------------------------------------
# The cache directory tag (bford.info/cachedir: backup tools skip a folder holding it), with a
# line naming farm: what `farm cache prune` takes as a farm cache.
CACHE_TAG = "CACHEDIR.TAG"
_TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
             "# This file is a cache directory tag created by farm: its build caches (toolkits, build\n"
             "# environments, sources, work folders). See https://bford.info/cachedir/\n")
# What farm keeps in a cache folder: one made before the tag holds only these.
CACHE_ENTRIES = frozenset({CACHE_TAG, "toolkit", "envs", "sources", "build", "images", "compile-cache",
                           "ledger-index", "lint", "shards", "pip"})


def mark_cache(root: Path) -> None:
    """Tag ``root`` as a farm cache (once; a folder farm cannot write is left as it is)."""
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        if not (root / CACHE_TAG).exists():
            atomic_write(root / CACHE_TAG, [_TAG_TEXT.encode()], durable=False)


def is_farm_cache(root: Path) -> bool:
    """Whether ``root`` is a farm cache: tagged by :func:`mark_cache`, or (made before the tag)
    holding nothing but what farm keeps there."""
    try:
        with open_plain(root / CACHE_TAG) as fh:
            return fh.read(len(_TAG_TEXT) + 1).decode("utf-8", "replace").split("\n")[1:2] == [_TAG_TEXT.split("\n")[1]]
    except (OSError, ValueError):
        pass
    try:
        names = set(os.listdir(root))
    except OSError:
        return False
    return bool(names) and all(n in CACHE_ENTRIES or n.endswith(".lock") for n in names)
