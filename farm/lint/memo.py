"""``farm lint``'s answers, remembered per command and per state of every file they depend on.

A warm ``farm lint`` costs one stat per file and the read of one small file: no rules, no YAML.
An entry is found by the command (target, arch list, build subdir, root, cache folder) and the
lint version; it holds the rendered answer and a stamp of every path it depends on (each linted
tree, or the recipe files): a digest of (path, size, mtime_ns, ctime_ns, inode, mode) of every
file under it, taken *before* the lint reads them. The answer is given only when every stamp
still matches, so an edited, added, removed, renamed or replaced file is a miss, never a stale
verdict. A file modified less than two seconds before the stamp is not trusted (a second edit
could land in the same timestamp tick with the same size): such an answer is not remembered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time

from farm.fsutil import SKIP_DIRS
from farm.lint.version import LINT_VERSION

RACY_NS = 2_000_000_000
_FORMAT = 1


def stamp(path: str) -> tuple[str, int]:
    """The digest of every file's (name, size, mtime_ns, ctime_ns, inode, mode) under ``path`` (or
    of ``path`` itself, a file), and the newest mtime seen. The walk is the lint's own (sorted,
    SKIP_DIRS left out, directory links not entered), in one scandir pass: this is most of the
    time a warm run takes."""
    rows: list[tuple[str, int, int, int, int, int] | tuple[str]] = []
    if os.path.isdir(path):
        _scan(path, rows)
    else:
        _stat(path, rows)
    newest = max((r[2] for r in rows if len(r) > 2), default=0)
    return hashlib.sha256(repr(rows).encode("utf-8", "surrogateescape")).hexdigest(), newest


def _stat(path: str, rows: list[tuple[str, int, int, int, int, int] | tuple[str]]) -> None:
    try:
        st = os.stat(path)
    except OSError:  # a dangling link, a file removed meanwhile: part of the state too
        rows.append((path,))
        return
    rows.append((path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode))


def _scan(directory: str, rows: list[tuple[str, int, int, int, int, int] | tuple[str]]) -> None:
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in SKIP_DIRS:
                _scan(entry.path, rows)
        else:
            _stat(entry.path, rows)


class Memo:
    """One command's remembered answer: :meth:`answer` on a warm run, :meth:`depend` then
    :meth:`remember` on a cold one."""

    def __init__(self, cache_dir: str | os.PathLike[str], **command: str | None) -> None:
        material = json.dumps({"lint_version": LINT_VERSION, "format": _FORMAT, **command}, sort_keys=True)
        self.path = os.path.join(cache_dir, "lint", "cmd-" + hashlib.sha256(material.encode()).hexdigest() + ".json")
        self._stamps: dict[str, str] = {}
        self._racy = False

    def answer(self) -> dict[str, object] | None:
        """The remembered answer (``code``, ``text``, ``json``) when every stamp still matches."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                entry = json.load(fh)
            stamps, code, text, as_json = entry["stamps"], entry["code"], entry["text"], entry["json"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(stamps, dict) or not stamps:
            return None
        for path, digest in stamps.items():
            if stamp(path)[0] != digest:
                return None
        return {"code": code, "text": text, "json": as_json}

    def depend(self, path: str | os.PathLike[str]) -> None:
        """Record the state of ``path`` now, before the lint reads it."""
        path = os.path.abspath(path)
        started = time.time_ns()
        digest, newest = stamp(path)
        self._stamps[path] = digest
        self._racy |= newest >= started - RACY_NS

    def remember(self, code: int, text: str, as_json: str) -> None:
        if self._racy or not self._stamps:
            return  # a file too fresh to trust its timestamp: answer again next time
        from pathlib import Path

        from farm.fsutil import atomic_write  # a cache: atomic (never torn), not durable

        data = json.dumps({"stamps": self._stamps, "code": code, "text": text, "json": as_json})
        # a read-only cache folder costs the next run time, not this one its answer
        with contextlib.suppress(OSError):
            atomic_write(Path(self.path), [data.encode()], durable=False)
