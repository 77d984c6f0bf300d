"""The state of the files an answer was made from, and whether they are still in that state.

A stamp of a path is :func:`farm.filestamp.stamp` (size, mtime, ctime, inode, device), as the
ledger's index keys its source. :class:`Stamps` holds the stamps of some paths under one root,
taken *before* they were read; :meth:`Stamps.unchanged` stats them again.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from farm.filestamp import WIDTH, stamp
from farm.fsutil import walk_files

_MISSING = (-1,) * WIDTH  # a path that could not be stat'ed: its absence is part of the state too


class Stamps:
    """Paths relative to ``root`` (``"."`` for the root itself) and their stamps, flat in one list
    of ints (compared in one go, stored compactly). ``newest`` is the newest mtime seen."""

    def __init__(self, root: str, paths: list[str] | None = None, values: list[int] | None = None) -> None:
        self.root = root
        self.paths: list[str] = paths if paths is not None else []
        self.values: list[int] = values if values is not None else []
        self.newest = 0

    def add(self, rel: str, st: os.stat_result) -> None:
        """Record ``rel`` as ``st`` shows it (a stat taken before its content was read)."""
        self.paths.append(rel)
        self.values.extend(stamp(st))
        self.newest = max(self.newest, st.st_mtime_ns)

    def add_path(self, rel: str) -> None:
        """Record ``rel`` as it is now (following links, as reading it does)."""
        try:
            st = os.stat(os.path.join(self.root, rel))
        except OSError:
            self.paths.append(rel)
            self.values.extend(_MISSING)
            return
        self.add(rel, st)

    def add_tree(self, rel: str, *, only: str | None = None) -> None:
        """Record ``rel``: a file, or a directory with every directory and file below it (the
        lint's own walk: no version-control or tool state, no links to directories entered), each
        directory stat'ed before it is listed; with ``only`` (a name suffix), just the files named so."""
        top = os.path.join(self.root, rel)
        if not os.path.isdir(top):
            self.add_path(rel)
            return

        def listed(directory: str, st: os.stat_result) -> None:
            if only is None:
                self.add(os.path.relpath(directory, self.root), st)

        for directory, name in walk_files(top, on_dir=listed):
            if only is None or name.endswith(only):
                self.add_path(os.path.relpath(os.path.join(directory, name), self.root))

    def unchanged(self) -> bool:
        """Whether every path still has the stamp recorded (a path now missing, or present now
        but missing then, is a change). ``OSError`` when the root cannot be opened."""
        if os.stat not in os.supports_dir_fd:
            return self._now(lambda rel: os.stat(os.path.join(self.root, rel))) == self.values
        # relative to the opened root: the kernel resolves the root's path once, not once per path
        fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            return self._now(lambda rel: os.stat(rel, dir_fd=fd)) == self.values
        finally:
            os.close(fd)

    def _now(self, stat: Callable[[str], os.stat_result]) -> list[int]:
        now: list[int] = []
        extend = now.extend
        for rel in self.paths:
            try:
                st = stat(rel)
            except OSError:
                extend(_MISSING)
                continue
            extend(stamp(st))
        return now

    def to_record(self) -> list[object]:
        return [self.root, self.paths, self.values]

    @classmethod
    def from_record(cls, data: object) -> Stamps:
        """From :meth:`to_record`'s form; ``ValueError`` when it is not that."""
        if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], str)
                and isinstance(data[1], list) and isinstance(data[2], list)
                and len(data[2]) == WIDTH * len(data[1])):
            raise ValueError("not a stamps record")
        return cls(data[0], data[1], data[2])
