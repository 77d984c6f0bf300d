"""The committed provenance ledger, one JSON object per published wheel, read.

The ledger is a folder of segments, one file per package and build epoch, or a single
``ledger.jsonl`` of before (farm/provenance/ledgerfiles.py says which files, in what order).
Reading streams each file and validates every line (:mod:`farm.provenance.ledgerline`): a malformed
line is a :class:`LedgerError` naming its file and line number, never skipped (a skipped line would make a
built wheel look unbuilt, or hide a conflicting one). What the matrix, postbuild and upload need is
kept in a compact :class:`LedgerIndex` (exists-key, filename and sha256 lookups in O(1)); full
entries are re-read on demand from their byte offset, so memory stays flat for a ledger of tens of
thousands of lines. An unchanged ledger's index comes from :mod:`farm.provenance.ledgercache`.
Writing is :mod:`farm.provenance.ledgerwrite`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
from msgspec.structs import replace

from farm.errors import LedgerError
from farm.filestamp import stamp
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledgercache import read_cache, write_cache
from farm.provenance.ledgerfiles import file_of, segments
from farm.provenance.ledgerline import (
    SHA256_HEX,
    ExistsKey,
    Provenance,
    Record,
    bare_wheel_name,
    decode_key_fields,
    entry_error,
    parse_line,
    validate_entry,
)


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise LedgerError(
            "no ledger file", where=str(path),
            hint="create an empty ledger.jsonl (nothing built yet) or pass the right --ledger",
        ) from None


# A line is one wheel's provenance (at most MAX_BUILD_INFO) plus the ledger's keys: a longer one is
# refused before it is held in memory whole.
MAX_LINE = 8 << 20


def _too_long(path: Path, number: int) -> LedgerError:
    return LedgerError(f"line {number} is longer than {MAX_LINE:,} bytes: not a ledger line", where=f"{path}:{number}",
                       hint="restore ledger.jsonl from git; a line holds one wheel's provenance (a few KiB)")


def numbered_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) for every line of the ledger file at ``path``, streaming."""
    with _open(path) as handle:
        yield from _lines(handle, path)


def _lines(handle: BinaryIO, path: Path, size: int = 1 << 22) -> Iterator[tuple[int, int, bytes]]:
    """:func:`numbered_lines` of an open file: read 4 MiB at a time, not line by line; a line split
    across reads is joined from its pieces, and one longer than :data:`MAX_LINE` is refused before
    it is held whole."""
    number = offset = 0
    pending = b""  # the start of a line that a read ended in
    while chunk := handle.read(size):
        start, find = 0, chunk.find
        while end := find(b"\n", start) + 1:
            number += 1
            line = pending + chunk[start:end] if pending else chunk[start:end]
            if len(line) > MAX_LINE:
                raise _too_long(path, number)
            yield number, offset, line
            offset += len(line)
            pending, start = b"", end
        pending += chunk[start:]
        if len(pending) > MAX_LINE:
            raise _too_long(path, number + 1)
    if pending:
        yield number + 1, offset, pending


def _line_at(path: Path, offset: int, number: int) -> bytes:
    """The line of the ledger file at ``path`` that starts at ``offset`` (line ``number``), under
    the same cap."""
    with path.open("rb") as handle:
        handle.seek(offset)
        line = handle.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise _too_long(path, number)
    return line


def iter_entries(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every entry of the ledger at ``path`` (a folder or a single file) with its line number in
    its file, each validated."""
    for _, file in segments(path):
        for number, _, raw in numbered_lines(file):
            where = f"{file}:{number}"
            entry = parse_line(raw, where)
            validate_entry(entry, where)
            yield number, entry


def _parse(path: Path, handle: BinaryIO, segment: str = "") -> list[Record]:
    """The validated record of every line of ``handle`` (the ledger file at ``path``, the
    ledger's ``segment``)."""
    records: list[Record] = []
    for number, offset, raw in _lines(handle, path):
        # Once per line (30,000 at the public farm's scale): decode and build the record, no
        # more. What the types cannot check (the spelling of filenames and sha256s) is checked
        # for all lines at once by _check_spelling.
        try:
            k = decode_key_fields(raw)
        except msgspec.MsgspecError:
            rec = replace(_slow_record(path, raw, number, offset, records), segment=segment)
        else:
            c, counts = k.cell, k.toolchain.compile_cache
            key = ExistsKey(k.package, k.version, c.cuda, c.torch, c.python, c.platform, k.build_epoch)
            rec = Record(number, offset, k.filename, k.sha256, Provenance.ASSERTED, key, k.arch_list.normalised,
                         segment, k.duration_s, None if counts is None else (counts.compiles, counts.hits))
        records.append(rec)
    _check_spelling(path, records)
    return records


def _slow_record(path: Path, raw: bytes, number: int, offset: int,
                 before: list[Record]) -> Record:
    """The record of a line the typed decoder refused (an inferred entry, or a bad one): parsed
    in full, accepted or explained. The lines ``before`` it are checked first, so the error
    raised is always the first bad line's."""
    where = f"{path}:{number}"
    try:
        entry = parse_line(raw, where)
        return validate_entry(entry, where, number, offset)
    except LedgerError:
        _check_spelling(path, before)
        raise


def _check_spelling(path: Path, records: list[Record]) -> None:
    """Every filename a bare ``.whl`` name and every sha256 64 lowercase hex digits, checked
    for all records at once: a per-line check costs more than decoding the line.
    On a failure the first bad line is parsed again and gets its own message."""
    count = len(records)
    shas = "".join([r.sha256 for r in records])
    names = "\n".join([r.filename for r in records]) + "\n"
    try:
        # fromhex skips whitespace: a count of bytes short of 32 per record means there was some
        hex_ok = len(shas) == 64 * count and shas == shas.lower() and len(bytes.fromhex(shas)) == 32 * count
    except ValueError:
        hex_ok = False
    names_ok = (names.count("\n") == count and names.count(".whl\n") == count
                and "/" not in names and "\\" not in names)
    if (hex_ok and names_ok) or not count:
        return
    for rec in records:
        sha, filename = rec.sha256, rec.filename
        if not (SHA256_HEX.match(sha) and bare_wheel_name(filename)):
            where = f"{path}:{rec.line}"
            validate_entry(parse_line(_line_at(path, rec.offset, rec.line), where), where)
            raise entry_error(where, f"{filename!r} (sha256 {sha!r}) is not a bare wheel name with a sha256")


def _raise_duplicate(path: Path, records: list[Record]) -> None:
    seen: dict[str, Record] = {}
    for rec in records:
        prior = seen.setdefault(rec.filename, rec)
        if prior is not rec:
            what = "another sha256" if prior.sha256 != rec.sha256 else "the same sha256 again"
            there = (f"line {prior.line}" if prior.segment == rec.segment
                     else f"{file_of(path, prior.segment)}:{prior.line}")
            raise entry_error(f"{file_of(path, rec.segment)}:{rec.line}",
                        f"{rec.filename} is already recorded at {there}, with {what}",
                        hint=f"keep one of {there} and line {rec.line}; a filename is published once")


def _by_key(records: list[Record]) -> dict[ExistsKey, Record]:
    """exists-key -> its record: the first line with that key, except that asserted provenance
    outranks an inferred guess for the same key."""
    # dict() keeps the last value of a repeated key: feeding it backwards keeps the first line.
    by_key: dict[Any, Record] = dict(zip([r.key for r in reversed(records)], reversed(records), strict=True))
    by_key.pop(None, None)  # inferred entries with unknown fields have no key
    if any(r.provenance is not Provenance.ASSERTED for r in records):
        for rec in records:
            prior = by_key.get(rec.key)
            if (prior is not None and prior.provenance is Provenance.INFERRED
                    and rec.provenance is Provenance.ASSERTED):
                by_key[rec.key] = rec
    return by_key


@dataclass(frozen=True)
class LedgerIndex:
    """O(1) lookups over a validated ledger: by exists-key, by filename, by sha256."""

    path: Path | None
    records: tuple[Record, ...]
    _by_key: Mapping[ExistsKey, Record]
    _by_filename: Mapping[str, Record]
    _by_sha256: dict[str, Record]  # filled on first use

    @classmethod
    def empty(cls) -> LedgerIndex:
        return cls(None, (), {}, {}, {})

    @classmethod
    def load(cls, path: Path, *, cache_dir: Path | None = None) -> LedgerIndex:
        """Read and validate every line of the ledger at ``path`` (a folder of segments, or a
        single file); raise :class:`LedgerError` on the first bad one, or on one wheel recorded
        twice.

        With ``cache_dir``, the index of a ledger none of whose files has changed since it was
        last read comes from the cache there (:mod:`farm.provenance.ledgercache`); else every
        file is read again."""
        path = Path(path)
        files = segments(path)
        if cache_dir is not None:
            cached = read_cache(cache_dir, path, files)
            if cached is not None:
                return cls._of(path, cached)
        records: list[Record] = []
        seen = []
        unchanged = True
        for name, file in files:
            with _open(file) as handle:
                before = stamp(os.fstat(handle.fileno()))
                records += _parse(file, handle, name)
                unchanged = unchanged and stamp(os.fstat(handle.fileno())) == before
            seen.append((name, before))
        index = cls._of(path, records)
        if cache_dir is not None and unchanged:
            write_cache(cache_dir, path, tuple(seen), records)
        return index

    @classmethod
    def _of(cls, path: Path, records: list[Record]) -> LedgerIndex:
        by_filename = dict(zip([r.filename for r in records], records, strict=True))
        if len(by_filename) != len(records):
            _raise_duplicate(path, records)
        return cls(path, tuple(records), _by_key(records), by_filename, {})

    def __len__(self) -> int:
        return len(self.records)

    def get(self, key: ExistsKey) -> Record | None:
        return self._by_key.get(key)

    def lookup(self) -> Callable[[ExistsKey], Record | None]:
        """:meth:`get` as the bound lookup itself, for loops over every cell of a matrix."""
        return self._by_key.get

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def by_filename(self, filename: str) -> Record | None:
        return self._by_filename.get(filename)

    def by_sha256(self, sha256: str) -> Record | None:
        if not self._by_sha256 and self.records:  # built on first use: the matrix never asks
            for rec in self.records:
                self._by_sha256.setdefault(rec.sha256, rec)
        return self._by_sha256.get(sha256)

    def file(self, record: Record) -> Path:
        """The file that holds ``record``'s line."""
        if self.path is None:
            raise LedgerError(f"{record.filename}: this index has no file to read from")
        return file_of(self.path, record.segment)

    def entry(self, record: Record) -> dict[str, Any]:
        """The full entry of ``record``, re-read from its line."""
        file = self.file(record)
        where = f"{file}:{record.line}"
        entry = parse_line(_line_at(file, record.offset, record.line), where)
        if validate_entry(entry, where).filename != record.filename:
            raise LedgerError("the ledger changed since it was indexed", where=where,
                              hint="load the index again")
        return entry

    def ledger_entry(self, record: Record) -> LedgerEntry:
        """The full entry of ``record`` as its typed, schema-validated object."""
        return LedgerEntry.from_json(self.entry(record), where=f"{self.file(record)}:{record.line}")

