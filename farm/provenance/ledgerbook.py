"""The ledger held open by one publishing process: each wheel's record appended in O(1).

A publish job records thousands of wheels one at a time into a ledger of tens of thousands of
lines. Rewriting a file per wheel (:mod:`farm.provenance.ledgerwrite`) costs the whole file
each time; a :class:`LedgerBook` reads and validates the ledger once, then records a wheel not yet
in it by appending its one line (the entry with its publication) to its segment (the file of its
package and epoch: farm/provenance/ledgerfiles.py), under the ledger's file lock, fsynced. The
files stay the format every reader knows: one line per wheel, keyed by file name.

What the book believes is only what it read and checked itself: before each record it compares
the stamps of the ledger's files (:mod:`farm.filestamp`) with the ones it left; a file changed by
anyone else (a rebase of the ledger commit, another writer) makes it read and validate the
ledger again. A record for a wheel
already in the ledger (a second target of the same wheel) changes that wheel's line, which is a
rewrite of the file (:func:`~farm.provenance.ledgerwrite.record_published_many`): the book holds
those publications and writes them all in one rewrite at :meth:`LedgerBook.flush` (the end of a
target's pass), not one rewrite per wheel. A process that dies before the flush loses only
publications of wheels the ledger already vouches for: the next publish finds each such asset
under its name with the recorded sha256 and records it then (``PRESENT``), nothing re-sent.

A process killed in the middle of an append leaves an incomplete last line, which every reader
refuses with its line number: the record is lost, never half-believed. The next book to open the
ledger (the next publish) removes that torn last line, under the lock and saying so, so that the
asset it described is found unrecorded and re-asserted (:mod:`farm.publish.adopt`); only a last
line without its newline that does not parse is taken for torn, any other bad line still stops it.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from farm.errors import LedgerError
from farm.filestamp import Stamp, stamp
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import MAX_LINE, LedgerIndex
from farm.provenance.ledgerfiles import segment_file, segment_for, segments, stamps
from farm.provenance.ledgerline import Record, dumps_entry, parse_line, validate_entry
from farm.provenance.ledgerwrite import ends_mid_line, ledger_lock, record_published_many


@dataclass(frozen=True)
class Recorded:
    """``added``: the wheel's line was new; ``published``: its publication was new."""

    added: bool
    published: bool


@dataclass
class LedgerBook:
    """The ledger at ``path`` as this process last read and wrote it."""

    path: Path
    index: LedgerIndex
    seen: dict[str, Stamp] | None  # the files' stamps after this book's last read or write (None: no ledger)
    added: dict[str, Record] = field(default_factory=dict)  # lines appended since ``index`` was read
    _by_sha256: dict[str, Record] = field(default_factory=dict)
    reloads: int = 0  # times the file had changed under the book and was read again
    # publications of wheels already in the ledger, written at flush(): (filename, sha256, target, url)
    pending: list[tuple[str, str, str, str]] = field(default_factory=list)
    rewrites: int = 0  # times the file was rewritten for pending publications
    _lines: dict[str, int] = field(default_factory=dict)  # lines per segment

    def __post_init__(self) -> None:
        self._count()

    def _count(self) -> None:
        self._lines = dict(Counter(rec.segment for rec in self.index.records))

    @classmethod
    def open(cls, path: Path) -> LedgerBook:
        """The ledger at ``path`` read and validated (an absent file is an empty ledger)."""
        path = Path(path)
        with ledger_lock(path):
            drop_torn_tails(path)
            index, seen = _load(path)
        return cls(path, index, seen)

    # -- reading (the gate's vouchers read through these) --------------------------------------
    def by_filename(self, filename: str) -> Record | None:
        return self.added.get(filename) or self.index.by_filename(filename)

    def by_sha256(self, sha256: str) -> Record | None:
        return self.index.by_sha256(sha256) or self._by_sha256.get(sha256)

    def ledger_entry(self, record: Record) -> LedgerEntry:
        """The full entry of ``record``, read again from its line and validated."""
        return self.index.ledger_entry(record)

    def __len__(self) -> int:
        return len(self.index) + len(self.added)

    # -- writing ----------------------------------------------------------------------------------
    def record(self, entry: LedgerEntry, target: str, url: str) -> Recorded:
        """Record that ``entry``'s wheel is published on ``target`` at ``url``: a new wheel's line
        appended now (O(1)); an already recorded wheel's new publication held until :meth:`flush`.
        The same file name with another sha256 is a :class:`LedgerError`, nothing written."""
        with ledger_lock(self.path):
            self._fresh()
            return self._record(entry, target, url)

    def record_many(self, items: Sequence[tuple[LedgerEntry, str, str]]) -> list[Recorded]:
        """:meth:`record` for each ``(entry, target, url)`` of a target's batch, then :meth:`flush`:
        the new wheels appended one by one, the lines that change rewritten once."""
        with ledger_lock(self.path):
            self._fresh()
            out = [self._record(entry, target, url) for entry, target, url in items]
        self.flush()
        return out

    def flush(self) -> int:
        """Write the held publications in one rewrite (none: nothing written); how many were new."""
        if not self.pending:
            return 0
        pending, self.pending = self.pending, []
        added = record_published_many(self.path, pending)
        self.rewrites += 1
        with ledger_lock(self.path):
            self._reload()
        return added

    def _record(self, entry: LedgerEntry, target: str, url: str) -> Recorded:
        rec = self.by_filename(entry.filename)
        if rec is None:
            placed = any(p.target == target and p.url == url for p in entry.published)
            self._append(entry if placed else entry.with_published(target, url))
            return Recorded(True, True)
        if rec.sha256 != entry.sha256:
            raise LedgerError(f"{entry.filename} is recorded with sha256 {rec.sha256}, not {entry.sha256}",
                              where=f"{self.path}:{rec.line}",
                              hint="the file being published is not the wheel the ledger describes")
        change = (entry.filename, entry.sha256, target, url)
        new = change not in self.pending and not any(
            p.target == target and p.url == url for p in self.ledger_entry(rec).published)
        if new:
            self.pending.append(change)
        return Recorded(False, new)

    def refresh(self) -> None:
        """Read the file again when anyone but this book changed it since."""
        with ledger_lock(self.path):
            self._fresh()

    def _fresh(self) -> None:
        if stamps(self.path) != self.seen:
            drop_torn_tails(self.path)
            self._reload()

    def _reload(self) -> None:
        self.index, self.seen = _load(self.path)
        self.added.clear()
        self._by_sha256.clear()
        self._count()
        self.reloads += 1

    def _append(self, entry: LedgerEntry) -> None:
        line = dumps_entry(entry).encode() + b"\n"
        where = f"{self.path}: the record of {entry.filename}"
        data = entry.to_dict()
        rec = validate_entry(data, where)
        segment, file = segment_file(self.path, *segment_for(data))
        file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            offset = os.lseek(fd, 0, os.SEEK_END)
            if ends_mid_line(file):
                # the last line is complete (it was validated) but has no newline of its own
                os.write(fd, b"\n")
                offset += 1
            _write_all(fd, line)
            os.fsync(fd)
            seen = stamp(os.fstat(fd))
        finally:
            os.close(fd)
        number = self._lines[segment] = self._lines.get(segment, 0) + 1
        rec = replace(rec, line=number, offset=offset, segment=segment)
        self.added[rec.filename] = rec
        self._by_sha256.setdefault(rec.sha256, rec)
        self.seen = {**(self.seen or {}), segment: seen}


def _load(path: Path) -> tuple[LedgerIndex, dict[str, Stamp] | None]:
    """The index and the stamps it was read at (read until the two agree: a writer between the
    stamps and the read would otherwise go unnoticed)."""
    while True:
        before = stamps(path)
        index = LedgerIndex.load(path) if before is not None else LedgerIndex(path, (), {}, {}, {})
        if stamps(path) == before:
            return index, before


def drop_torn_tails(ledger: Path) -> None:
    """:func:`drop_torn_tail` on each file of the ledger (a folder's segments, or its one file)."""
    if Path(ledger).exists():
        for _, file in segments(ledger):
            drop_torn_tail(file)


def drop_torn_tail(path: Path) -> bool:
    """Remove the ledger's last line when a writer died appending it: it has no newline and does
    not parse as a ledger line. Said on stderr; whether anything was removed. Call under the lock."""
    try:
        with path.open("r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if not size:
                return False
            fh.seek(max(0, size - MAX_LINE))
            tail = fh.read()
            if tail.endswith(b"\n"):
                return False
            base = size - len(tail)
            cut = tail.rfind(b"\n") + 1  # 0: the tail holds no newline
            if base and not cut:
                return False  # a last line longer than any ledger line: the readers say so
            start = base + cut
            try:
                validate_entry(parse_line(tail[cut:], str(path)), str(path))
                return False  # complete, only without its newline: the next append adds it
            except LedgerError:
                pass
            fh.truncate(start)
            fh.flush()
            os.fsync(fh.fileno())
    except FileNotFoundError:
        return False
    print(f"farm: {path}: removed an incomplete last line ({size - start} bytes at offset {start}): a writer "
          "died appending it; its wheel is found unrecorded and re-asserted by this publish", file=sys.stderr)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view: Any = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
