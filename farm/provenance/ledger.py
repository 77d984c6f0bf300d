"""``ledger.jsonl``: the committed provenance ledger, one JSON object per published wheel.

Reading streams the file and validates every line: a malformed line is a :class:`LedgerError`
naming its line number, never skipped (a skipped line would make a built wheel look unbuilt, or
hide a conflicting one). What the matrix, postbuild and upload need is kept in a compact
:class:`LedgerIndex` (exists-key, filename and sha256 lookups in O(1)); full entries are re-read
on demand from their byte offset, so memory stays flat for a ledger of tens of thousands of lines.

Writing: parallel CI jobs each write one fragment per wheel (:func:`write_fragment`); the upload
job merges them (:func:`merge_fragments`) and records where each wheel went
(:func:`record_published`). Both take the same file lock and replace the ledger through a
fsynced temp file and a rename, so two writers never interleave and a crash never leaves half a
line.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Literal, NamedTuple

import msgspec

from farm import cacheseal, jsonread
from farm.errors import FileSystemError, LedgerError
from farm.filestamp import RACY_NS, Stamp, stamp
from farm.fsutil import atomic_write, read_chunks, sweep_leftovers

if TYPE_CHECKING:  # the typed entry is imported where it is used: the matrix reads the index only
    from farm.provenance.buildinfo import LedgerEntry

FRAGMENT_SUFFIX = ".ledger.json"
LOCK_SUFFIX = ".lock"
# A merge waits this long for another writer before failing: CI merges are seconds long.
LOCK_TIMEOUT_S = 300.0

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CELL_KEYS = ("cuda", "torch", "python", "platform")


class Provenance(str, enum.Enum):
    """``asserted``: stamped after the post-build assertion passed. ``inferred``: backfilled from
    inspection of an already-published wheel; never presented as fact."""

    ASSERTED = "asserted"
    INFERRED = "inferred"


class ExistsKey(NamedTuple):
    """A cell plus its effective build epoch: the ledger decides "already built" on this alone."""

    package: str
    version: str
    cuda: str
    torch: str
    python: str
    platform: str
    build_epoch: int


class Record(NamedTuple):
    """What the index keeps of one ledger line (the full entry is re-read from ``offset``)."""

    line: int
    offset: int
    filename: str
    sha256: str
    provenance: Provenance
    key: ExistsKey | None
    arch: str | None  # the normalised arch list it was built with; None when unknown (inferred)


# --------------------------------------------------------------------------------------------
# Validation (pure)
# --------------------------------------------------------------------------------------------
def _fail(where: str, message: str, hint: str | None = None) -> LedgerError:
    return LedgerError(
        message,
        where=where,
        hint=hint or "fix or remove that entry; ledger entries are never skipped",
    )


def _str(entry: Mapping[str, Any], key: str, where: str, *, nullable: bool) -> str | None:
    value = entry.get(key, ...)
    if value is ...:
        raise _fail(where, f"missing key {key!r}")
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value:
        kind = "a non-empty string" + (" or null" if nullable else "")
        raise _fail(where, f"{key!r} must be {kind}, got {value!r}")
    return value


def _fast_record(e: Any, line: int = 0, offset: int = 0) -> Record | None:
    """The common case, an asserted and well-formed entry, in a few checks: ~3x faster than the
    full validation, which matters for a ledger of tens of thousands of lines. ``None`` sends the
    entry to :func:`_validate_full`, which accepts it (inferred entries) or says what is wrong;
    everything accepted here also passes there (tests/test_ledger.py checks this property)."""
    try:
        if e["provenance"] != "asserted":
            return None
        filename, sha, size, schema = e["filename"], e["sha256"], e["size"], e["schema_version"]
        published, package, version, epoch = e["published"], e["package"], e["version"], e["build_epoch"]
        cell, arch_list = e["cell"], e["arch_list"]
        if type(cell) is not dict or type(arch_list) is not dict:
            return None
        arch = arch_list["normalised"]
        cuda, torch, python, platform = cell["cuda"], cell["torch"], cell["python"], cell["platform"]
    except (KeyError, TypeError):
        return None
    if not (
        type(filename) is str and filename.endswith(".whl") and "/" not in filename and "\\" not in filename
        and "\n" not in filename
        and type(sha) is str and _SHA256.match(sha) is not None
        and type(size) is int and size >= 0 and type(schema) is int and schema >= 1
        and type(epoch) is int and epoch >= 0 and type(published) is list
        and type(package) is str and package and type(version) is str and version
        and type(cuda) is str and cuda and type(torch) is str and torch
        and type(python) is str and python and type(platform) is str and platform
        and type(arch) is str and arch
    ):
        return None
    for item in published:
        if type(item) is not dict or type(item.get("target")) is not str or type(item.get("url")) is not str:
            return None
    return Record(line, offset, filename, sha, Provenance.ASSERTED,
                  ExistsKey(package, version, cuda, torch, python, platform, epoch), arch)


# The fastest path, for loading a whole ledger: decode only the fields the index keeps, with the
# checks of _fast_record declared on the types, so the rest of each line (expected, found, run,
# source, toolchain: most of its bytes) is validated as JSON but never becomes Python objects.
# 3-4x faster than a full parse of a 30,000-line ledger. Anything it refuses (an inferred entry, a
# malformed one) goes through orjson and the checks above, which accept it or say what is wrong.
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]


class _KeyCell(msgspec.Struct):
    cuda: _NonEmpty
    torch: _NonEmpty
    python: _NonEmpty
    platform: _NonEmpty


class _KeyArch(msgspec.Struct):
    normalised: _NonEmpty


class _KeyPublished(msgspec.Struct):
    target: str
    url: str


class _KeyFields(msgspec.Struct):
    provenance: Literal["asserted"]
    filename: str  # spelling checked by _check_spelling: a pattern here costs more than the whole decode
    sha256: Annotated[str, msgspec.Meta(min_length=64, max_length=64)]  # hex: _check_spelling
    size: _Count
    schema_version: Annotated[int, msgspec.Meta(ge=1)]
    published: list[_KeyPublished]
    package: _NonEmpty
    version: _NonEmpty
    build_epoch: _Count
    cell: _KeyCell
    arch_list: _KeyArch


_decode_key_fields = msgspec.json.Decoder(_KeyFields).decode


_tuple_new = tuple.__new__  # the named tuples' own __new__ is a Python function, ~2x slower
_ASSERTED = Provenance.ASSERTED


def validate_entry(entry: object, where: str, line: int = 0, offset: int = 0) -> Record:
    """Check one ledger object and return its index record (``line``/``offset`` left 0).

    Required on every entry: ``filename`` (a ``.whl``), ``sha256``, ``size``, ``published``,
    ``provenance``, ``schema_version``, ``package``, ``version``, ``cell``, ``build_epoch`` and
    ``arch_list``. Inferred entries may hold ``null`` where a value is unknown; asserted ones
    may not, for the fields the exists-key and the stale check read.
    """
    return _fast_record(entry, line, offset) or _validate_full(entry, where, line, offset)


def _validate_full(entry: object, where: str, line: int = 0, offset: int = 0) -> Record:
    """:func:`validate_entry` the long way, with a message for each thing that can be wrong."""
    if not isinstance(entry, dict):
        raise _fail(where, f"a ledger entry must be a JSON object, got {type(entry).__name__}")
    prov_raw = entry.get("provenance")
    try:
        provenance = Provenance(prov_raw)
    except ValueError:
        raise _fail(where, f"'provenance' must be 'asserted' or 'inferred', got {prov_raw!r}") from None
    inferred = provenance is Provenance.INFERRED

    filename = _str(entry, "filename", where, nullable=False)
    assert filename is not None
    if not filename.endswith(".whl") or "/" in filename or "\\" in filename or "\n" in filename:
        raise _fail(where, f"'filename' must be a bare wheel file name, got {filename!r}")
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise _fail(where, f"'sha256' must be 64 lowercase hex digits, got {sha!r}")
    size = entry.get("size", ...)
    if size is ... or not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise _fail(where, f"'size' must be a non-negative integer, got {None if size is ... else size!r}")
    schema = entry.get("schema_version")
    if not (isinstance(schema, int) and not isinstance(schema, bool) and schema >= 1):
        raise _fail(where, f"'schema_version' must be an integer >= 1, got {schema!r}")
    published = entry.get("published", ...)
    if not isinstance(published, list):
        raise _fail(where, f"'published' must be a list of {{target, url}}, got {published!r}")
    for item in published:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("target"), str)
            and isinstance(item.get("url"), str)
        ):
            raise _fail(where, f"'published' items must be {{\"target\": str, \"url\": str}}, got {item!r}")

    package = _str(entry, "package", where, nullable=inferred)
    version = _str(entry, "version", where, nullable=inferred)
    cell_raw = entry.get("cell", ...)
    cell: dict[str, str | None] | None
    if cell_raw is None and inferred:
        cell = None
    elif isinstance(cell_raw, dict):
        cell = {k: _str(cell_raw, k, f"{where}: cell", nullable=inferred) for k in _CELL_KEYS}
    else:
        raise _fail(where, f"'cell' must be an object with {', '.join(_CELL_KEYS)}, got {cell_raw!r}")

    epoch_raw = entry.get("build_epoch", ...)
    if epoch_raw is None and inferred:
        epoch = 0
    elif isinstance(epoch_raw, int) and not isinstance(epoch_raw, bool) and epoch_raw >= 0:
        # An inferred entry counts as epoch 0 whatever it says: its epoch is a guess.
        epoch = 0 if inferred else epoch_raw
    else:
        raise _fail(where, f"'build_epoch' must be a non-negative integer, got "
                           f"{None if epoch_raw is ... else epoch_raw!r}")

    arch_raw = entry.get("arch_list", ...)
    arch: str | None
    if arch_raw is None and inferred:
        arch = None
    elif isinstance(arch_raw, dict):
        arch = _str(arch_raw, "normalised", f"{where}: arch_list", nullable=inferred)
    else:
        raise _fail(where, f"'arch_list' must be an object with 'requested' and 'normalised', got "
                           f"{None if arch_raw is ... else arch_raw!r}")

    key: ExistsKey | None = None
    if package and version and cell and all(cell.values()):
        key = ExistsKey(package, version, cell["cuda"], cell["torch"], cell["python"],  # type: ignore[arg-type]
                        cell["platform"], epoch)  # type: ignore[arg-type]
    return Record(line, offset, filename, sha, provenance, key, arch)


def dumps_entry(entry: LedgerEntry | Mapping[str, Any]) -> str:
    """One ledger line (no newline): compact and key-sorted, so diffs of the ledger stay small."""
    if not isinstance(entry, Mapping):  # a LedgerEntry
        entry = entry.to_dict()
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
def _parse_line(raw: bytes, where: str) -> dict[str, Any]:
    import orjson  # here: loading a well-formed ledger never needs it (see _KeyFields)

    try:
        value = orjson.loads(raw)  # 3x json's speed on a 50 MB ledger; stricter (no NaN)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = raw.strip()[:80].decode("utf-8", "replace")
        if not raw.strip():
            raise _fail(where, "empty line") from None
        raise _fail(where, f"not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}): {detail!r}") from None
    return value


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise LedgerError(
            "no ledger file", where=str(path),
            hint="create an empty ledger.jsonl (nothing built yet) or pass the right --ledger",
        ) from None


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) for every line, streaming."""
    with _open(path) as handle:
        offset = 0
        for number, raw in enumerate(handle, start=1):
            yield number, offset, raw
            offset += len(raw)


def _read_lines(handle: BinaryIO, size: int = 1 << 22) -> Iterator[bytes | memoryview]:
    """The lines of ``handle`` (each with its newline), read 4 MiB at a time and handed out as
    views into the read: no copy per line, and no line-by-line buffering. A line longer than a
    read is joined once from its pieces (linear, however long)."""
    pending: list[bytes] = []
    while chunk := handle.read(size):
        first = chunk.find(b"\n") + 1
        if not first:
            pending.append(chunk)
            continue
        start = 0
        if pending:
            pending.append(chunk[:first])
            yield b"".join(pending)
            pending, start = [], first
        view, find = memoryview(chunk), chunk.find
        while end := find(b"\n", start) + 1:
            yield view[start:end]
            start = end
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)


def iter_entries(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every entry of the ledger at ``path`` with its line number, each validated."""
    for number, _, raw in _lines(path):
        where = f"{path}:{number}"
        entry = _parse_line(raw, where)
        validate_entry(entry, where)
        yield number, entry


def _parse(path: Path, handle: BinaryIO) -> list[Record]:
    """The validated record of every line of ``handle`` (the ledger at ``path``)."""
    records: list[Record] = []
    decode, new, asserted = _decode_key_fields, _tuple_new, _ASSERTED
    offset = 0
    for number, raw in enumerate(_read_lines(handle), 1):
        # Once per line (30,000 at the public farm's scale): decode and build the record, no
        # more. What the types cannot check (the spelling of filenames and sha256s) is checked
        # for all lines at once by _check_spelling.
        try:
            k = decode(raw)
        except msgspec.MsgspecError:
            rec = _slow_record(path, raw, number, offset, records)
        else:
            c = k.cell
            key = new(ExistsKey, (k.package, k.version, c.cuda, c.torch, c.python, c.platform, k.build_epoch))
            rec = new(Record, (number, offset, k.filename, k.sha256, asserted, key, k.arch_list.normalised))
        records.append(rec)
        offset += len(raw)
    _check_spelling(path, records)
    return records


def _slow_record(path: Path, raw: bytes | memoryview, number: int, offset: int,
                 before: list[Record]) -> Record:
    """The record of a line the typed decoder refused (an inferred entry, or a bad one): parsed
    in full, accepted or explained. The lines ``before`` it are checked first, so the error
    raised is always the first bad line's."""
    where = f"{path}:{number}"
    try:
        entry = _parse_line(bytes(raw), where)
        return _fast_record(entry, number, offset) or _validate_full(entry, where, number, offset)
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
        if not (_SHA256.match(sha) and filename.endswith(".whl") and "/" not in filename
                and "\\" not in filename and "\n" not in filename):
            where = f"{path}:{rec.line}"
            with path.open("rb") as handle:
                handle.seek(rec.offset)
                _validate_full(_parse_line(handle.readline(), where), where)
            raise _fail(where, f"{filename!r} (sha256 {sha!r}) is not a bare wheel name with a sha256")


def _raise_duplicate(path: Path, records: list[Record]) -> None:
    seen: dict[str, Record] = {}
    for rec in records:
        prior = seen.setdefault(rec.filename, rec)
        if prior is not rec:
            what = "another sha256" if prior.sha256 != rec.sha256 else "the same sha256 again"
            raise _fail(f"{path}:{rec.line}",
                        f"{rec.filename} is already recorded at line {prior.line}, with {what}",
                        hint=f"keep one of lines {prior.line} and {rec.line}; a filename is published once")


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


# --------------------------------------------------------------------------------------------
# The index cache: a ledger that has not changed is not parsed again
# --------------------------------------------------------------------------------------------
# Parsing is most of `farm matrix`'s time at the public farm's scale (52 MB of JSON). The cache
# keeps the validated records, keyed by the file's stamp (farm.filestamp; farm's own writers
# replace the file, a new inode) and the code that validated them. A ledger written in the last
# RACY_NS is not cached. The cache is only ever an optimisation: one that cannot be read or
# written is ignored, and one that is not sealed with this user's key (farm.cacheseal; a CI cache
# restore may bring back anything) is never believed.
_CACHE_FORMAT = 1
_MAX_CACHE_BYTES = 1 << 30  # ~100 bytes a record: ten million records
_RACY_NS = RACY_NS  # module-level, so a test can close the window


class _Cache(msgspec.Struct, array_like=True):
    format: int
    code: str  # digest of this module: changed validation rules invalidate every cache
    stamp: Stamp
    records: list[Record]


def _cache_file(cache_dir: Path, path: Path) -> Path:
    import hashlib

    name = hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:32]
    return Path(cache_dir) / "ledger-index" / f"{name}.msgpack"


def _code_digest() -> str:
    import hashlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _read_cache(cache_dir: Path, path: Path) -> list[Record] | None:
    try:
        current = stamp(path.stat())
        file = _cache_file(cache_dir, path)
        raw = cacheseal.unseal(jsonread.read_bounded(file, _MAX_CACHE_BYTES), f"ledger-index:{file.name}")
        if raw is None:  # written by someone else (a restored CI cache) or edited: read the ledger
            return None
        cache = msgspec.msgpack.decode(raw, type=_Cache)
        if cache.format != _CACHE_FORMAT or cache.stamp != current or cache.code != _code_digest():
            return None
    except (OSError, ValueError, msgspec.MsgspecError):  # unreadable, too large: read the ledger
        return None
    return cache.records


def _write_cache(cache_dir: Path, path: Path, read_as: Stamp, records: list[Record]) -> None:
    import time

    if time.time_ns() - max(read_as[1], read_as[2]) < _RACY_NS:
        return
    # not durable: a cache lost to a crash is rebuilt by the next run
    with contextlib.suppress(OSError, FileSystemError):
        cache = _Cache(_CACHE_FORMAT, _code_digest(), read_as, records)
        file = _cache_file(cache_dir, path)
        atomic_write(file, [cacheseal.seal(msgspec.msgpack.encode(cache), f"ledger-index:{file.name}")], durable=False)


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
        """Read and validate every line of ``path``; raise :class:`LedgerError` on the first bad
        one, or on one wheel recorded twice.

        With ``cache_dir``, the index of a ledger file that has not changed since it was last
        read comes from the cache there (see :func:`_read_cache`); a changed file is read again."""
        path = Path(path)
        if cache_dir is not None:
            cached = _read_cache(cache_dir, path)
            if cached is not None:
                return cls._of(path, cached)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # tens of thousands of records that all survive: collections only cost time
        try:
            with _open(path) as handle:
                before = stamp(os.fstat(handle.fileno()))
                records = _parse(path, handle)
                unchanged = stamp(os.fstat(handle.fileno())) == before
            index = cls._of(path, records)
        finally:
            if gc_was_enabled:
                gc.enable()
        if cache_dir is not None and unchanged:
            _write_cache(cache_dir, path, before, records)
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

    def entry(self, record: Record) -> dict[str, Any]:
        """The full entry of ``record``, re-read from its line."""
        if self.path is None:
            raise LedgerError(f"{record.filename}: this index has no file to read from")
        with self.path.open("rb") as handle:
            handle.seek(record.offset)
            raw = handle.readline()
        where = f"{self.path}:{record.line}"
        entry = _parse_line(raw, where)
        if validate_entry(entry, where).filename != record.filename:
            raise LedgerError("the ledger changed since it was indexed", where=where,
                              hint="load the index again")
        return entry

    def ledger_entry(self, record: Record) -> LedgerEntry:
        """The full entry of ``record`` as its typed, schema-validated object."""
        from farm.provenance.buildinfo import LedgerEntry

        return LedgerEntry.from_json(self.entry(record), where=f"{self.path}:{record.line}")


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _lock(ledger: Path) -> Iterator[None]:
    from filelock import FileLock  # only writers pay for the import

    with FileLock(str(ledger) + LOCK_SUFFIX, timeout=LOCK_TIMEOUT_S):
        sweep_leftovers(ledger.parent, prefix=f".{ledger.name}.")  # a killed writer's temp copy
        yield


def fragment_path(fragments_dir: Path, filename: str) -> Path:
    return Path(fragments_dir) / f"{filename}{FRAGMENT_SUFFIX}"


def read_fragment(path: Path) -> tuple[LedgerEntry, Record]:
    """A fragment as its typed entry (schema-validated) and its index record."""
    where = str(path)
    raw = _parse_line(path.read_bytes(), where)
    rec = validate_entry(raw, where)
    from farm.provenance.buildinfo import LedgerEntry

    entry = LedgerEntry.from_json(raw, where=where)
    if path.name != rec.filename + FRAGMENT_SUFFIX:
        raise _fail(where, f"fragment file name does not match its wheel {rec.filename!r}",
                    hint=f"fragments are named <wheel>{FRAGMENT_SUFFIX}; write them with write_fragment")
    return entry, rec


def write_fragment(entry: LedgerEntry | Mapping[str, Any], fragments_dir: Path) -> Path:
    """Write ``entry`` as its wheel's fragment (one file per wheel, atomic).

    A plain mapping is read as a :class:`LedgerEntry` first (schema-validated), so no fragment is
    written that the gate would refuse to read. Writing the same wheel again is a no-op; a
    fragment for the same filename with another sha256 is refused (the earlier wheel would be
    lost silently)."""
    from farm.provenance.buildinfo import LedgerEntry

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


def _existing(ledger: Path) -> tuple[dict[str, str], bool]:
    """filename -> sha256 of every ledger line, validated; and whether the file ends mid-line."""
    if not ledger.exists():
        return {}, False
    index = LedgerIndex.load(ledger)
    with ledger.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return {}, False
        handle.seek(-1, os.SEEK_END)
        needs_newline = handle.read(1) != b"\n"
    return {r.filename: r.sha256 for r in index.records}, needs_newline


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
    with _lock(ledger):
        known, needs_newline = _existing(ledger)
        added: list[str] = []
        already: list[str] = []
        lines: list[bytes] = []
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
            lines.append((dumps_entry(entry) + "\n").encode())
        if lines:
            # Old bytes + new lines through a temp file and a rename, not an append: a crash
            # mid-write would leave half a line, which every later read refuses.
            def chunks() -> Iterator[bytes]:
                if ledger.exists():
                    yield from read_chunks(ledger)
                    if needs_newline:  # a last line without its newline is complete (it validated)
                        yield b"\n"
                yield from lines

            atomic_write(ledger, chunks())
    return MergeResult(ledger, tuple(added), tuple(already))


def record_published(ledger: Path, filename: str, sha256: str, target: str, url: str) -> bool:
    """Add ``{"target", "url"}`` to the ``published`` list of ``filename``'s entry.

    Returns False when that target/url was already recorded (nothing written)."""
    return record_published_many(ledger, [(filename, sha256, target, url)]) == 1


def record_published_many(ledger: Path, items: Iterable[tuple[str, str, str, str]]) -> int:
    """Record where each wheel of a batch now lives: ``(filename, sha256, target, url)`` items.

    One rewrite for the whole batch (a temp file + rename under the lock); every line not
    changed is copied byte for byte. Every item is checked before anything is written. Returns how
    many publications were new."""
    ledger = Path(ledger)
    items = list(items)
    if not items:
        return 0
    with _lock(ledger):
        index = LedgerIndex.load(ledger)
        changed: dict[int, LedgerEntry] = {}
        added = 0
        for filename, sha256, target, url in items:
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
            entry = changed.get(rec.line) or index.ledger_entry(rec)
            if any(p.target == target and p.url == url for p in entry.published):
                continue
            changed[rec.line] = entry.with_published(target, url)
            added += 1
        if not added:
            return 0
        replacements = {line: (dumps_entry(entry) + "\n").encode() for line, entry in changed.items()}

        def chunks() -> Iterator[bytes]:
            for number, _, raw in _lines(ledger):
                if number in replacements:
                    yield replacements[number]
                else:
                    yield raw if raw.endswith(b"\n") else raw + b"\n"

        atomic_write(ledger, chunks())
    return added
