"""``farm lint``'s answers, remembered per command and per state of what they were made from.

A warm ``farm lint`` reads one small file and stats the files its answer was made from: no rules,
no YAML, no hashing. An entry is found by the command (target, arch list, build subdir, root,
cache folder); it holds the rendered answer and the stamps (:mod:`farm.lint.stamps`) of its inputs,
each taken before it was read:

- a linted tree: every directory the lint listed and every file it read
  (:attr:`farm.lint.compiled.TreeIndex.stamps`). An edit of a file the lint read, and an added,
  removed or renamed entry anywhere in the tree, is a miss; a file the lint never opened (a
  vendored library's tests) cannot change the verdict, and is not stat'ed again;
- a recipe: ``_defaults.yml``, everything under ``packages/``, a path source's tree;
- farm's own code, every module of the package: an upgrade, an edited rule or a bumped rules
  version is a miss, with no digest of the code computed on the warm path.

An entry is JSON, sealed (:mod:`farm.cacheseal`) for its file name: CI restores cache folders
anyone with write access to a branch could have filled, so an entry that does not verify is a
miss, and a verified one is read by the one bounded JSON reader (:mod:`farm.jsonread`). The answer
is given only when every stamp still matches. A stamp whose mtime is less than two seconds before
the command started is not trusted (a second edit could land in the same timestamp tick with the
same size): such an answer is not remembered.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zlib
from pathlib import Path

from farm import cacheseal
from farm.errors import FileSystemError
from farm.filestamp import RACY_NS
from farm.lint.stamps import Stamps

__all__ = ["RACY_NS", "Memo"]
_FORMAT = 4
_MAX_ENTRY = 256 << 20  # an answer's stamps: a few MB for the largest trees


class Memo:
    """One command's remembered answer: :meth:`answer` on a warm run; :meth:`depend` or
    :meth:`depend_on` for each input, then :meth:`remember`, on a cold one."""

    def __init__(self, cache_dir: str | os.PathLike[str], **command: str | None) -> None:
        self.started = time.time_ns()
        self.command: dict[str, str | int | None] = {"format": _FORMAT, **command}
        # a name, not a proof: the entry holds its command, compared on every read
        material = repr(sorted(self.command.items())).encode("utf-8", "surrogateescape")
        name = f"{zlib.crc32(material):08x}{zlib.adler32(material):08x}"
        self.path = os.path.join(cache_dir, "lint", f"cmd-{name}.bin")
        self._inputs: list[Stamps] = []

    def answer(self) -> tuple[int, str, str] | None:
        """The remembered (exit code, text, JSON text) when every input is as it was."""
        try:
            entry = cacheseal.read_object(self.path, self._purpose(), _MAX_ENTRY)
            if entry is None:
                return None  # missing, too large, written by someone else, or edited: a miss
            if entry["command"] != self.command:
                return None  # another command with the same name
            code, text, as_json = entry["code"], entry["text"], entry["json"]
            if not (isinstance(code, int) and isinstance(text, str) and isinstance(as_json, str)):
                return None
            inputs = [Stamps.from_record(item) for item in entry["inputs"]]
            if not inputs or not all(stamps.unchanged() for stamps in inputs):
                return None
        except (OSError, ValueError, KeyError, TypeError):  # unreadable or not ours: a miss
            return None
        return code, text, as_json

    def _purpose(self) -> str:
        return f"lint-answer:{os.path.basename(self.path)}"

    def depend(self, path: str | os.PathLike[str], *, only: str | None = None) -> None:
        """Record ``path`` (a file, or a directory with everything below it; with ``only``, the
        files below it whose names end so) as it is now, before it is read."""
        parent, name = os.path.split(os.path.abspath(path))
        stamps = Stamps(parent)
        stamps.add_tree(name, only=only)
        self._inputs.append(stamps)

    def depend_on(self, stamps: Stamps) -> None:
        """Record inputs stamped by their reader as it read them."""
        self._inputs.append(stamps)

    def remember(self, code: int, text: str, as_json: str) -> None:
        if not self._inputs or not all(s.paths for s in self._inputs):
            return  # an input with nothing to stat (farm installed without its sources) proves nothing
        if max(s.newest for s in self._inputs) >= self.started - RACY_NS:
            return  # a file too fresh to trust its timestamp: answer again next time
        entry = {"command": self.command, "inputs": [s.to_record() for s in self._inputs],
                 "code": code, "text": text, "json": as_json}
        # a read-only cache folder costs the next run time, not this one its answer
        with contextlib.suppress(OSError, FileSystemError):
            cacheseal.write(Path(self.path), json.dumps(entry).encode(), self._purpose())
