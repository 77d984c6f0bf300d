"""Writing the ledger: fragments, the locked merge, and where each wheel was published.

Parallel CI jobs each write one fragment per wheel (:func:`write_fragment`); backfill and the
tests merge them (:func:`merge_fragments`), :func:`record_published_many` records where wheels
already in the ledger went and :func:`record_attestations` their signed statements. They take the
ledger's lock (:func:`ledger_lock`) and replace each file they change (a record's segment:
farm/provenance/ledgerfiles.py) through a fsynced temp file and a rename, so two writers never
interleave and a crash never leaves half a line. A publish records its wheels through
:mod:`farm.provenance.ledgerbook`, which appends a new wheel's line under the same lock instead
of rewriting the file.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from farm.errors import LedgerError
from farm.fsutil import atomic_write, read_chunks, sweep_leftovers
from farm.provenance.buildinfo import Attestation, LedgerEntry
from farm.provenance.ledger import LedgerIndex, numbered_lines
from farm.provenance.ledgerfiles import README, file_of, segment_file, segment_for, segment_of, segments
from farm.provenance.ledgerline import Record, dumps_entry, entry_error, parse_line, validate_entry

FRAGMENT_SUFFIX = ".ledger.json"
LOCK_SUFFIX = ".lock"
# A merge waits this long for another writer before failing: CI merges are seconds long.
LOCK_TIMEOUT_S = 300.0


@contextlib.contextmanager
def ledger_lock(ledger: Path) -> Iterator[None]:
    """The lock every writer of ``ledger`` (a folder, or a single file) holds; a killed writer's
    temp copy is swept here."""
    with FileLock(str(ledger) + LOCK_SUFFIX, timeout=LOCK_TIMEOUT_S):
        sweep_leftovers(ledger.parent, prefix=f".{ledger.name}.")
        if ledger.is_dir():
            for folder in ledger.iterdir():
                if folder.is_dir() and not folder.is_symlink():
                    sweep_leftovers(folder)
        yield


def fragment_path(fragments_dir: Path, filename: str) -> Path:
    return Path(fragments_dir) / f"{filename}{FRAGMENT_SUFFIX}"


def read_fragment(path: Path) -> tuple[LedgerEntry, Record]:
    """A fragment as its typed entry (schema-validated) and its index record."""
    where = str(path)
    raw = parse_line(path.read_bytes(), where)
    rec = validate_entry(raw, where)
    entry = LedgerEntry.from_json(raw, where=where)
    if path.name != rec.filename + FRAGMENT_SUFFIX:
        raise entry_error(where, f"fragment file name does not match its wheel {rec.filename!r}",
                    hint=f"fragments are named <wheel>{FRAGMENT_SUFFIX}; write them with write_fragment")
    return entry, rec


def write_fragment(entry: LedgerEntry | Mapping[str, Any], fragments_dir: Path) -> Path:
    """Write ``entry`` as its wheel's fragment (one file per wheel, atomic).

    A plain mapping is read as a :class:`LedgerEntry` first (schema-validated), so no fragment is
    written that the gate would refuse to read. Writing the same wheel again is a no-op; a
    fragment for the same filename with another sha256 is refused (the earlier wheel would be
    lost silently)."""
    if not isinstance(entry, LedgerEntry):
        where = f"fragment for {entry.get('filename')!r}"
        validate_entry(dict(entry), where)  # the ledger's own message for its own keys first
        entry = LedgerEntry.from_json(entry, where=where)
    rec = validate_entry(entry.to_dict(), f"fragment for {entry.filename!r}")
    fragments_dir = Path(fragments_dir)
    fragments_dir.mkdir(parents=True, exist_ok=True)
    path = fragment_path(fragments_dir, rec.filename)
    if path.exists():
        _, old = read_fragment(path)
        if old.sha256 != rec.sha256:
            raise LedgerError(
                f"a fragment for {rec.filename} already exists with sha256 {old.sha256}, "
                f"this wheel has {rec.sha256}",
                where=str(path),
                hint="a filename is published once: bump build_epoch to rebuild, or remove the stale fragment",
            )
    atomic_write(path, [(dumps_entry(entry) + "\n").encode()])
    return path


@dataclass(frozen=True)
class MergeResult:
    """``added``: filenames appended, in order; ``already``: already in the ledger, same sha256."""

    ledger: Path
    added: tuple[str, ...]
    already: tuple[str, ...]


def ends_mid_line(file: Path) -> bool:
    """Whether ``file`` has a last line without its newline."""
    if not file.is_file():
        return False
    with file.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _extend(file: Path, lines: list[bytes]) -> None:
    """``file``'s bytes and then ``lines``, through a temp file and a rename, not an append: a
    crash mid-write would leave half a line, which every later read refuses."""
    needs_newline = ends_mid_line(file)

    def chunks() -> Iterator[bytes]:
        if file.exists():
            yield from read_chunks(file)
            if needs_newline:  # a last line without its newline is complete (it validated)
                yield b"\n"
        yield from lines

    atomic_write(file, chunks())


def merge_fragments(ledger: Path, fragments_dir: Path) -> MergeResult:
    """Append every fragment under ``fragments_dir`` to ``ledger``, under the ledger's lock.

    Idempotent: a wheel already recorded with the same sha256 is skipped. A wheel recorded with
    another sha256 refuses the whole merge before anything is written."""
    ledger = Path(ledger)
    fragments_dir = Path(fragments_dir)
    if not fragments_dir.is_dir():
        raise LedgerError("no fragments directory", where=str(fragments_dir),
                          hint="pass the directory postbuild wrote fragments to")
    fragments = [read_fragment(p) for p in sorted(fragments_dir.glob(f"*{FRAGMENT_SUFFIX}"))]
    with ledger_lock(ledger):
        # filename -> sha256 of every ledger line, validated
        known = {r.filename: r.sha256 for r in LedgerIndex.load(ledger).records} if ledger.exists() else {}
        added: list[str] = []
        already: list[str] = []
        lines: dict[Path, list[bytes]] = {}  # segment file -> its new lines
        for entry, rec in fragments:
            sha = known.get(rec.filename)
            if sha == rec.sha256:
                already.append(rec.filename)
                continue
            if sha is not None:
                raise LedgerError(
                    f"{rec.filename} is already in the ledger with sha256 {sha}; the fragment has "
                    f"{rec.sha256}. Nothing was merged.",
                    where=str(fragment_path(fragments_dir, rec.filename)),
                    hint="publishing never overwrites a wheel: bump build_epoch to rebuild under a new name",
                )
            known[rec.filename] = rec.sha256
            added.append(rec.filename)
            _, file = segment_file(ledger, *segment_for(entry.to_dict()))
            lines.setdefault(file, []).append((dumps_entry(entry) + "\n").encode())
        for file, new in lines.items():
            _extend(file, new)
    return MergeResult(ledger, tuple(added), tuple(already))


def record_published_many(ledger: Path, items: Iterable[tuple[str, str, str, str]]) -> int:
    """Record where each wheel of a batch now lives: ``(filename, sha256, target, url)`` items.

    One rewrite for the whole batch (a temp file + rename under the lock); every line not
    changed is copied byte for byte. Every item is checked before anything is written. Returns how
    many publications were new."""
    return _change_lines(ledger, [(filename, sha256, functools.partial(_publish, target=target, url=url))
                                  for filename, sha256, target, url in items])


def _publish(entry: LedgerEntry, *, target: str, url: str) -> LedgerEntry | None:
    if any(p.target == target and p.url == url for p in entry.published):
        return None
    return entry.with_published(target, url)


def record_attestations(ledger: Path, items: Iterable[tuple[str, str, Attestation]]) -> int:
    """Record the signed statement of each wheel of a batch: ``(filename, sha256, attestation)``
    items, one rewrite as :func:`record_published_many`. Returns how many lines changed."""
    return _change_lines(ledger, [(filename, sha256, functools.partial(_attest, attestation=attestation))
                                  for filename, sha256, attestation in items])


def _attest(entry: LedgerEntry, *, attestation: Attestation) -> LedgerEntry | None:
    return None if entry.attestation == attestation else replace(entry, attestation=attestation)


def _change_lines(ledger: Path, items: Sequence[tuple[str, str, Callable[[LedgerEntry], LedgerEntry | None]]]) -> int:
    """Apply each ``(filename, sha256, change)`` to the line of that wheel (``change`` returns
    the new entry, or None when the line already says it): one rewrite under the lock, every
    wheel checked first (recorded, with these bytes); returns how many changes were made."""
    ledger = Path(ledger)
    if not items:
        return 0
    with ledger_lock(ledger):
        index = LedgerIndex.load(ledger)
        changed: dict[tuple[str, int], LedgerEntry] = {}  # (segment, line) -> its new entry
        added = 0
        for filename, sha256, change in items:
            rec = index.by_filename(filename)
            if rec is None:
                raise LedgerError(f"{filename} is not in the ledger", where=str(ledger),
                                  hint="merge its fragment first (merge_fragments)")
            if rec.sha256 != sha256:
                raise LedgerError(
                    f"{filename} is recorded with sha256 {rec.sha256}, not {sha256}",
                    where=f"{ledger}:{rec.line}",
                    hint="the file being published is not the wheel the ledger describes",
                )
            new = change(changed.get((rec.segment, rec.line)) or index.ledger_entry(rec))
            if new is None:
                continue
            changed[(rec.segment, rec.line)] = new
            added += 1
        by_segment: dict[str, dict[int, bytes]] = {}
        for (segment, line), entry in changed.items():
            by_segment.setdefault(segment, {})[line] = (dumps_entry(entry) + "\n").encode()
        for segment, replacements in by_segment.items():
            _rewrite(file_of(ledger, segment), replacements)
    return added


def _rewrite(file: Path, replacements: dict[int, bytes]) -> None:
    """``file`` with the lines numbered in ``replacements`` replaced, every other line copied
    byte for byte (one rewrite: a temp file and a rename)."""
    def chunks() -> Iterator[bytes]:
        for number, _, raw in numbered_lines(file):
            if number in replacements:
                yield replacements[number]
            else:
                yield raw if raw.endswith(b"\n") else raw + b"\n"

    atomic_write(file, chunks())


@dataclass(frozen=True)
class Migration:
    """A single-file ledger moved into a folder: ``records`` lines into ``files`` (segment ->
    its records)."""

    records: int
    files: dict[str, int]


README_TEXT = """# The ledger

One JSON line per published wheel: its provenance (the wheel's `_build_info.json`), file name,
sha256, size and where it was published. One file per package and build epoch,
`<package>/e<epoch>.jsonl`, so no file outgrows what git and GitHub hold (docs/upload.md).
farm writes these files; read them with `farm audit`, `farm matrix` or any JSON-lines reader.
"""


def migrate(single: Path, folder: Path) -> Migration:
    """Move every record of the single-file ledger ``single`` into the segments of the ledger
    folder ``folder`` (which holds none yet): each line byte for byte, in its order. The
    folder is read back and compared line for line before ``single`` is removed; on any
    difference nothing is removed."""
    index = LedgerIndex.load(single)  # every line validated; no wheel recorded twice
    if folder.exists() and segments(folder):
        raise LedgerError(f"{folder} already holds records", where=str(folder),
                          hint=f"merge the two ledgers by hand (`cat` the records of {single.name} into their "
                               "segments), then remove it")
    with ledger_lock(single), ledger_lock(folder):
        lines: dict[str, list[bytes]] = {}
        for number, _, raw in numbered_lines(single):
            entry = parse_line(raw, f"{single}:{number}")
            lines.setdefault(segment_of(*segment_for(entry)), []).append(raw if raw.endswith(b"\n") else raw + b"\n")
        for name, chunk in lines.items():
            atomic_write(folder / name, chunk)
        if not (folder / README).exists():
            atomic_write(folder / README, [README_TEXT.encode()])
        moved = LedgerIndex.load(folder)
        before = sorted(raw.rstrip(b"\n") for _, _, raw in numbered_lines(single))
        after = sorted(raw.rstrip(b"\n") for _, file in segments(folder) for _, _, raw in numbered_lines(file))
        if before != after or len(moved) != len(index):
            raise LedgerError(f"the folder does not hold exactly the {len(index)} records of {single.name}; "
                              "it was kept", where=str(folder), hint="remove the folder's new files and run again")
        single.unlink()
    return Migration(len(index), {name: len(chunk) for name, chunk in lines.items()})
