"""File-system primitives shared by every writer: chunked hashing and atomic replacement.

Writers never leave a half-written file under its final name: they write a temp file in the same
directory, fsync it, and ``os.replace`` it into place.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

CHUNK = 1 << 20

# Directories no source walk enters: version control and tool state, not the project's files.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".nox", ".tox", ".venv"})


def walk_files(root: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """(directory, file name) of every file under ``root`` in a stable order, outside SKIP_DIRS."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            yield dirpath, name


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
    import tempfile  # writers only: keeps read-only commands' startup lean

    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
