"""One ``ledger.jsonl`` line: what the index keeps of it, how it is checked and how it is written.

A line is a :class:`~farm.provenance.buildinfo.LedgerEntry` (the ``_build_info.json`` object plus
``filename``, ``sha256``, ``size`` and ``published``). The index keeps a compact :class:`Record` of
each: the exists-key the matrix decides "already built" on, the file name and hash. A line is
checked for what the index reads (:func:`validate_entry`); the full entry is read, schema-checked,
only where it is used.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

import msgspec

from farm.errors import LedgerError
from farm.provenance.buildinfo import BuildInfo, LedgerEntry, NonEmpty
from farm.provenance.shape import projection

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



# The fields the index keeps, decoded from the definition's own types (buildinfo.py) made
# non-null: an asserted, well-formed line in one typed decode. The rest of each line (expected,
# found, run, source, toolchain: most of its bytes) is validated as JSON but never becomes Python
# objects: 3-4x faster than a full parse of a 30,000-line ledger. Anything it refuses (an inferred
# entry, a malformed one) goes through :func:`_validate_full`, which accepts it or says what is
# wrong. The spelling of filenames and sha256s (patterns) is checked apart: a regular expression
# per line costs more than the whole decode.
KeyFields: Any = projection((BuildInfo, LedgerEntry), "KeyFields", {
    "provenance": Literal["asserted"],
    "filename": ...,
    "sha256": ...,
    "size": ...,
    "schema_version": ...,
    "published": ...,
    "package": ...,
    "version": ...,
    "build_epoch": ...,
    "cell": {"cuda": ..., "torch": ..., "python": ..., "platform": ...},
    "arch_list": {"normalised": NonEmpty},  # the ledger asks more than the schema: a list it was built with
})
decode_key_fields: Callable[[bytes | memoryview], Any] = msgspec.json.Decoder(KeyFields).decode


def bare_wheel_name(filename: str) -> bool:
    """A file name the ledger may record: a ``.whl``, no directory, one line."""
    return filename.endswith(".whl") and "/" not in filename and "\\" not in filename and "\n" not in filename


def _fast_record(e: Any, line: int = 0, offset: int = 0) -> Record | None:
    """The common case, an asserted and well-formed entry, through the typed decoder of
    :data:`KeyFields`. ``None`` sends the entry to :func:`_validate_full`, which accepts it
    (inferred entries) or says what is wrong; everything accepted here also passes there
    (tests/test_ledger.py checks this property)."""
    try:
        k: Any = msgspec.convert(e, KeyFields)
    except msgspec.ValidationError:
        return None
    if not (bare_wheel_name(k.filename) and _SHA256.match(k.sha256)):
        return None
    c = k.cell
    return Record(line, offset, k.filename, k.sha256, Provenance.ASSERTED,
                  ExistsKey(k.package, k.version, c.cuda, c.torch, c.python, c.platform, k.build_epoch),
                  k.arch_list.normalised)


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
    if not bare_wheel_name(filename):
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


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    """One line parsed (any JSON value: :func:`validate_entry` refuses what is not an object)."""
    import orjson  # here: loading a well-formed ledger never needs it (see KeyFields)

    try:
        value: dict[str, Any] = orjson.loads(raw)  # 3x json's speed on a 50 MB ledger; stricter (no NaN)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = raw.strip()[:80].decode("utf-8", "replace")
        if not raw.strip():
            raise _fail(where, "empty line") from None
        raise _fail(where, f"not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}): {detail!r}") from None
    return value

