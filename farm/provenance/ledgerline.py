"""One ``ledger.jsonl`` line: what the index keeps of it, how it is checked and how it is written.

A line is a :class:`~farm.provenance.buildinfo.LedgerEntry` (the ``_build_info.json`` object plus
``filename``, ``sha256``, ``size`` and ``published``). The index keeps a compact :class:`Record` of
each: the exists-key the matrix decides "already built" on, the file name and hash, and the
build's duration and compiler-cache counts the matrix plans jobs with. A line is
checked for what the index reads (:func:`validate_entry`); the full entry is read, schema-checked,
only where it is used.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec
import orjson

from farm.errors import LedgerError
from farm.provenance.buildinfo import SCHEMA_VERSION, SHA256_PATTERN, BuildInfo, LedgerEntry, NonEmpty
from farm.provenance.shape import projection

SHA256_HEX = re.compile(SHA256_PATTERN)


class Provenance(str, enum.Enum):
    """``asserted``: stamped after the post-build assertion passed. ``inferred``: backfilled from
    inspection of an already-published wheel; never presented as fact."""

    ASSERTED = "asserted"
    INFERRED = "inferred"


# The index holds a record and a key per line (30,000 at the public farm's scale): frozen structs
# that the garbage collector does not track (they hold no cycle), whose passes over tuples cost more
# than reading the ledger. array_like: the index cache stores each as an array.
class ExistsKey(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A cell plus its effective build epoch: the ledger decides "already built" on this alone."""

    package: str
    version: str
    cuda: str
    torch: str
    python: str
    platform: str
    build_epoch: int


class Record(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """What the index keeps of one ledger line (the full entry is re-read from ``offset`` of its
    ``segment``: farm/provenance/ledgerfiles.py; "" for a single-file ledger)."""

    line: int
    offset: int
    filename: str
    sha256: str
    provenance: Provenance
    key: ExistsKey | None
    arch: str | None  # the normalised arch list it was built with; None when unknown (inferred)
    segment: str = ""
    # what the matrix plans the cell's jobs with (farm/schedule/durations.py); None: not recorded
    duration: float | None = None  # the build's seconds (``duration_s``)
    compile_cache: tuple[int, int] | None = None  # its compiler cache's (compile steps, hits)


# --------------------------------------------------------------------------------------------
# Validation (pure)
# --------------------------------------------------------------------------------------------
def entry_error(where: str, message: str, hint: str | None = None) -> LedgerError:
    """The error for a bad ledger line at ``where``."""
    return LedgerError(
        message,
        where=where,
        hint=hint or "fix or remove that entry; ledger entries are never skipped",
    )


# The fields the index keeps, decoded with the definition's own types (buildinfo.py): for an
# asserted entry made non-null (KeyFields); an inferred one (InferredKeyFields) may hold null
# wherever the build info's value is unknown. A well-formed asserted line is one typed decode; the
# rest of each line (expected, found, run, source, toolchain: most of its bytes) is validated as
# JSON but never becomes Python objects: 3-4x faster than a full parse of a 30,000-line ledger.
# The spelling of filenames and sha256s (patterns) is checked apart: a regular expression per line
# costs more than the whole decode.
_INDEXED = {
    "filename": ...,
    "sha256": ...,
    "size": ...,
    "schema_version": ...,
    "published": ...,
    "package": ...,
    "version": ...,
    "build_epoch": ...,
    "cell": {"cuda": ..., "torch": ..., "python": ..., "platform": ...},
    "arch_list": {"normalised": NonEmpty | None},  # the ledger asks more than the schema: a list it was built with
}
KeyFields: Any = projection((BuildInfo, LedgerEntry), "KeyFields", {"provenance": Literal["asserted"], **_INDEXED})
InferredKeyFields: Any = projection((BuildInfo, LedgerEntry), "InferredKeyFields",
                                    {"provenance": Literal["inferred"], **_INDEXED},
                                    nulls=("package", "version", "build_epoch", "cell", "arch_list"))
# The index reads a line once: the fields the matrix plans a build's cost with are decoded in the
# same pass. A line whose cost fields do not decode is indexed the long way, without them.
_COSTED = {"duration_s": ..., "toolchain": {"compile_cache": ...}}
CostedKeyFields: Any = projection((BuildInfo, LedgerEntry), "CostedKeyFields",
                                  {"provenance": Literal["asserted"], **_INDEXED, **_COSTED},
                                  missing=tuple(_COSTED))
decode_key_fields: Callable[[bytes], Any] = msgspec.json.Decoder(CostedKeyFields).decode


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
    if not (bare_wheel_name(k.filename) and SHA256_HEX.match(k.sha256)):
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
    """:func:`validate_entry` the long way, through the same typed fields, with a message for each
    thing that can be wrong."""
    if not isinstance(entry, dict):
        raise entry_error(where, f"a ledger entry must be a JSON object, got {type(entry).__name__}")
    prov_raw = entry.get("provenance")
    try:
        provenance = Provenance(prov_raw)
    except ValueError:
        raise entry_error(where, f"'provenance' must be 'asserted' or 'inferred', got {prov_raw!r}") from None
    inferred = provenance is Provenance.INFERRED
    version = entry.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise entry_error(where, f"schema version {version}: this farm reads version {SCHEMA_VERSION}",
                    hint="it was written by a newer farm: upgrade farm to read this ledger")
    try:
        k: Any = msgspec.convert(entry, InferredKeyFields if inferred else KeyFields)
    except msgspec.ValidationError as exc:
        raise entry_error(where, _explain(str(exc))) from None
    if not bare_wheel_name(k.filename):
        raise entry_error(where, f"'filename' must be a bare wheel file name, got {k.filename!r}")
    if not SHA256_HEX.match(k.sha256):
        raise entry_error(where, f"'sha256' must be 64 lowercase hex digits, got {k.sha256!r}")
    c = k.cell
    key: ExistsKey | None = None
    if k.package and k.version and c and c.cuda and c.torch and c.python and c.platform:
        # An inferred entry counts as epoch 0 whatever it says: its epoch is a guess.
        key = ExistsKey(k.package, k.version, c.cuda, c.torch, c.python, c.platform, 0 if inferred else k.build_epoch)
    arch = k.arch_list.normalised if k.arch_list is not None else None
    return Record(line, offset, k.filename, k.sha256, provenance, key, arch)


def _explain(message: str) -> str:
    """msgspec's message (``Expected `int` >= 0, got `int` - at `$.build_epoch` ``) naming the key
    first, as the ledger's messages do: ``'build_epoch': expected ...``, ``'cell' > 'cuda': ...``."""
    text, _, at = message.partition(" - at `")
    parts = re.findall(r"\.(\w+)", at)
    missing = re.match(r"Object missing required field `(\w+)`", text)
    if missing:
        parts.append(missing.group(1))
    return f"{' > '.join(map(repr, parts)) or '(top level)'}: {text[:1].lower()}{text[1:]}"


def dumps_entry(entry: LedgerEntry | Mapping[str, Any]) -> str:
    """One ledger line (no newline): compact and key-sorted, so diffs of the ledger stay small."""
    if not isinstance(entry, Mapping):  # a LedgerEntry
        entry = entry.to_dict()
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    """One line parsed (any JSON value: :func:`validate_entry` refuses what is not an object)."""
    try:
        value: dict[str, Any] = orjson.loads(raw)  # 3x json's speed on a 50 MB ledger; stricter (no NaN)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = raw.strip()[:80].decode("utf-8", "replace")
        if not raw.strip():
            raise entry_error(where, "empty line") from None
        raise entry_error(where, f"not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}): {detail!r}") from None
    return value

