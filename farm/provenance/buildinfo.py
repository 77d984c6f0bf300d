"""``_build_info.json``: the provenance a wheel carries in its ``.dist-info/``, and a ledger line.

The format is defined once, here, as a tree of frozen dataclasses (:class:`BuildInfo` and the
records it holds; :class:`LedgerEntry` for a ``ledger.jsonl`` line). Everything else is derived
from that definition by :mod:`farm.provenance.shape`: the JSON schema (:func:`schema`, committed
as ``farm/schemas/build_info.schema.json``), the validating reader (:meth:`BuildInfo.from_json`:
schema-checked, and a key this farm does not know fails closed, as it would be lost on writing
back), the writer (:meth:`BuildInfo.to_json`, the exact bytes earlier farms wrote) and the ledger
index's fast decoder (:mod:`farm.provenance.ledgerline`). A new key is one field here.

After changing the definition, regenerate the committed schema::

    python -c "from farm.provenance.buildinfo import write_schema; write_schema()"

Probing the environment for these values (the CI run, the toolchain's versions) is
:mod:`farm.provenance.probe`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, Self, TypeVar

from packaging.version import InvalidVersion, Version

from farm import jsonread
from farm.errors import ArchError, FarmError, LedgerError, WheelError
from farm.fsutil import sha256_file as sha256_file  # re-exported: the hash every provenance records
from farm.model import label
from farm.model.arch import ArchList
from farm.provenance.shape import ABSENT as ABSENT  # re-exported: readers test a field against it
from farm.provenance.shape import (
    KNOWN,
    Rule,
    ShapeError,
    UnknownKeyError,
    asserted_schema,
    decode,
    encode,
    fields_of,
    object_schema,
)
from farm.provenance.shape import Absent as Absent

if TYPE_CHECKING:
    from farm.binary.wheelfile import SafeWheel

SCHEMA_VERSION: Final = 1
BUILD_INFO_NAME = "_build_info.json"
ASSERTED: Final = "asserted"
INFERRED: Final = "inferred"
SCHEMA_FILE = Path(__file__).parent.parent / "schemas" / "build_info.schema.json"

JSON = dict[str, object]
_T = TypeVar("_T")

# -- the value types (their constraints are the schema's) -------------------------------------
SHA256_PATTERN: Final = "^[0-9a-f]{64}$"
Sha256 = Annotated[str, Rule(pattern=SHA256_PATTERN)]
NonEmpty = Annotated[str, Rule(min_length=1)]
Count = Annotated[int, Rule(minimum=0)]
ArchsByExtension = Annotated[
    Mapping[str, str],
    Rule(description="archive path of each extension .so -> canonical arch list (may be empty for a .so "
                     "without device code)"),
]


def _frozen(pairs: Mapping[str, _T]) -> Mapping[str, _T]:
    """A read-only copy, its keys in the order the file holds them (sorted)."""
    return MappingProxyType(dict(sorted(pairs.items())))


class _Record:
    """What every record of the format can do: be read from, and written as, its JSON object."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Self:
        """The record of ``data`` (trusted: made by farm, or already schema-checked)."""
        return decode(cls, data)  # type: ignore[no-any-return]

    def to_dict(self) -> JSON:
        """The JSON object, keys in the file's order."""
        return encode(self)  # type: ignore[no-any-return]


# -- the definition ---------------------------------------------------------------------------
# Each class lists its fields in the file's key order, so writing gives back the very bytes
# postbuild wrote. ``| Absent`` (default ABSENT) marks a key older files lack: absent stays
# absent, which is not the same as a recorded null. ``OPEN_SCHEMA``: the published schema lets
# other readers take keys a later farm adds; farm itself refuses them (it would lose them).
@dataclass(frozen=True)
class CellInfo(_Record):
    """The cell a wheel was built for (``None``: unknown, only in inferred provenance)."""

    cuda: Annotated[str, Rule(min_length=1, pattern=r"^[0-9]+\.[0-9]+$")] | None
    torch: Annotated[str, Rule(min_length=1, pattern=r"^([0-9]+\.[0-9]+|none)$")] | None
    python: NonEmpty | None
    platform: NonEmpty | None


@dataclass(frozen=True)
class ArchListRecord(_Record):
    """The arch list as the configuration wrote it, and as farm normalised it."""

    requested: Annotated[str | None, Rule(asserted=KNOWN)]
    normalised: Annotated[str | None, Rule(asserted=KNOWN)]


@dataclass(frozen=True)
class Assertion(_Record):
    """The post-build assertion: its result and the readers that ran (their versions)."""

    OPEN_SCHEMA: ClassVar[bool] = True
    result: Annotated[Literal["passed", "failed"], Rule(asserted="passed")]
    native_reader: str | None
    cuobjdump: str | None


@dataclass(frozen=True)
class Run(_Record):
    """The CI run that built the wheel (``provider`` ``local`` off CI)."""

    OPEN_SCHEMA: ClassVar[bool] = True
    provider: NonEmpty
    repository: str | None = None
    commit: str | None = None
    run_id: str | None = None
    attempt: str | None = None
    url: str | Absent | None = ABSENT


@dataclass(frozen=True)
class ArchiveVendorRecord(_Record):
    """A tree placed into the source from an archive at a URL (the recipe's ``source.vendor``)."""

    kind: ClassVar[str] = "archive"
    path: Annotated[NonEmpty, Rule(description="where the tree was placed, relative to the source root")]
    url: NonEmpty
    sha256: Annotated[Sha256, Rule(description="the archive, verified before it was unpacked")]
    subdir: Annotated[str | None, Rule(description="the archive's folder placed (null: its one top folder)")]


@dataclass(frozen=True)
class SdistVendorRecord(_Record):
    """A tree placed into the source from an sdist of the package index (``source.vendor``)."""

    kind: ClassVar[str] = "sdist"
    path: Annotated[NonEmpty, Rule(description="where the tree was placed, relative to the source root")]
    name: NonEmpty
    version: NonEmpty
    sha256: Annotated[Sha256, Rule(description="the sdist, verified before it was unpacked")]
    subdir: Annotated[str | None, Rule(description="the sdist's folder placed (null: its one top folder)")]


@dataclass(frozen=True)
class GitVendorRecord(_Record):
    """A tree placed into the source from a git repository at a commit (``source.vendor``)."""

    kind: ClassVar[str] = "git"
    path: Annotated[NonEmpty, Rule(description="where the tree was placed, relative to the source root")]
    repo: NonEmpty
    commit: Annotated[str, Rule(pattern="^[0-9a-f]{40}$",
                                description="the commit checked out, every object's hash checked by git")]
    subdir: Annotated[str | None, Rule(description="the repository's folder placed (null: the whole checkout)")]


VendorRecord = ArchiveVendorRecord | SdistVendorRecord | GitVendorRecord
Vendor = Annotated[
    tuple[VendorRecord, ...] | Absent,
    Rule(description="trees placed into the source before it was built (what upstream keeps in a git "
                     "submodule), in the recipe's order"),
]


@dataclass(frozen=True)
class GitSourceRecord(_Record):
    """A git checkout the wheel was built from."""

    kind: ClassVar[str] = "git"
    repo: str
    ref: str | None
    commit: str | None
    vendor: Vendor = ABSENT


@dataclass(frozen=True)
class SdistSourceRecord(_Record):
    """An sdist the wheel was built from."""

    kind: ClassVar[str] = "sdist"
    name: str
    version: str | None
    sha256: Sha256 | None
    vendor: Vendor = ABSENT


@dataclass(frozen=True)
class PathSourceRecord(_Record):
    """A local tree the wheel was built from."""

    kind: ClassVar[str] = "path"
    path: str
    tree_sha256: Sha256 | None
    vendor: Vendor = ABSENT


SourceRecord = GitSourceRecord | SdistSourceRecord | PathSourceRecord


@dataclass(frozen=True)
class ToolkitComponent(_Record):
    """One component of the toolkit (``cuda_nvcc``), with its archive's sha256."""

    name: Annotated[str, Rule(pattern="^[a-z][a-z0-9_]*$")]
    version: NonEmpty
    sha256: Sha256 | None


@dataclass(frozen=True, kw_only=True)
class ToolkitRecord(_Record):
    """Which exact CUDA toolkit built the wheel."""

    OPEN_SCHEMA: ClassVar[bool] = True
    source: Literal["redist", "pypi", "installed"]
    release: str | None
    manifest_url: str | Absent | None = ABSENT
    manifest_sha256: Sha256 | Absent | None = ABSENT
    components: tuple[ToolkitComponent, ...] = ()
    libcuda_stub: Annotated[
        Sha256 | Absent | None,
        Rule(description="sha256 of the toolkit's link-time lib/stubs/libcuda.so (made from its cuda.h, or NVIDIA's "
                         "own from the archives), as its ready stamp records it; null: none (an installed toolkit, "
                         "a Windows one); absent: a farm before this key"),
    ] = ABSENT


@dataclass(frozen=True)
class CompileCacheRecord(_Record):
    """A compiler cache's counts for the build (``ccache``, ``sccache``)."""

    tool: NonEmpty
    compiles: Count
    hits: Count
    misses: Count
    not_cacheable: Annotated[
        Mapping[str, Count] | Absent,
        Rule(description="compiler calls the cache refused, per its reason (sccache's: 'multiple input files'; "
                         "farm's: 'nvcc option sccache 0.16.0 reads as its output: -optf'); "
                         "they ran uncached and are in none of the counts above. {}: none refused; absent: not "
                         "counted (a farm before this key)"),
    ] = ABSENT


@dataclass(frozen=True)
class FarmDepRecord(_Record):
    """A farm wheel the build was made against (``build.extra_deps``: spconv against farm's cumm)."""

    requirement: NonEmpty
    filename: Annotated[str, Rule(pattern=r"\.whl$")]
    sha256: Sha256


@dataclass(frozen=True, kw_only=True)
class Toolchain(_Record):
    """Versions of the tools that made the wheel (``None``: unknown, never guessed)."""

    OPEN_SCHEMA: ClassVar[bool] = True
    nvcc: str | None
    torch: str | None
    torch_cuda: Annotated[
        str | Absent | None,
        Rule(description="the CUDA version of the torch built against (torch.version.cuda)"),
    ] = ABSENT
    python: str | None
    builder: str | None
    cibuildwheel: str | None
    toolkit: Annotated[
        ToolkitRecord | Absent | None,
        Rule(description="the CUDA toolkit that built the wheel: its source, NVIDIA release, manifest and "
                         "components"),
    ] = ABSENT
    compile_cache: Annotated[
        CompileCacheRecord | Absent | None,
        Rule(description="the compiler cache's counts for this build; null: no cache, or not counted"),
    ] = ABSENT
    farm_deps: Annotated[
        tuple[FarmDepRecord, ...] | Absent,
        Rule(description="farm wheels installed in the build environment to build against (the recipe's "
                         "extra_deps that pin another recipe's wheel of the same cell)"),
    ] = ABSENT
    image: Annotated[
        str | Absent | None,
        Rule(description="the container image a cibuildwheel build ran in, as it was named (a rebuild needs the "
                         "same image: name it by digest); null: cibuildwheel's own for its version"),
    ] = ABSENT


@dataclass(frozen=True)
class Bundled(_Record):
    """A bundled library (``*.libs/``): the targets found in it and the recipe's expectation
    (its own list, ``""`` for host-only, or ``None`` with the exemption's reason)."""

    found: str
    expected: str | None
    exempt: str | None


@dataclass(frozen=True)
class FamilyRecord(_Record):
    """A kernel family as the cell built it: the exact targets each of its translation units
    holds, its ``.cu`` sources, the extensions holding its TUs, and the globs of the sources the
    build generated (absent: none)."""

    targets: str
    sources: tuple[NonEmpty, ...]
    extensions: tuple[NonEmpty, ...]
    patterns: Annotated[
        tuple[NonEmpty, ...] | Absent,
        Rule(description="globs (from the source root) of the family's sources the build generates "
                         "(file(GLOB) in its SRCS); its translation units named by one are the family's"),
    ] = ABSENT


@dataclass(frozen=True)
class MadeByRecord(_Record):
    """What one extension's device code records about the toolkit that compiled it."""

    cubin: Annotated[Mapping[str, Count], Rule(description="CUDA version in each cubin's .note.nv.cuinfo -> "
                                                           "number of cubins")]
    ptx_isa: Annotated[Mapping[str, Count], Rule(description="PTX ISA version -> number of PTX entries")]
    unread: Annotated[Count, Rule(description="entries that record no version farm reads (LTO-IR, LZ4 cubins)")]


@dataclass(frozen=True, kw_only=True)
class BuildInfo(_Record):
    """One wheel's ``_build_info.json``, parsed and validated.

    ``expected`` / ``found``: archive path of each extension -> canonical arch list;
    ``extensions``: archive path -> sha256. ``None`` where an inferred provenance cannot say."""

    OPEN_SCHEMA: ClassVar[bool] = True
    schema_version: Literal[1] = SCHEMA_VERSION
    package: Annotated[NonEmpty | None, Rule(asserted=KNOWN)]
    dist: NonEmpty
    version: Annotated[NonEmpty, Rule(description="public version, without the local label")]
    cell: CellInfo
    build_epoch: Annotated[Count | None, Rule(asserted=KNOWN)]
    arch_list: ArchListRecord
    expected: Annotated[ArchsByExtension | None, Rule(asserted=KNOWN)]
    found: Annotated[ArchsByExtension | None, Rule(asserted=KNOWN)]
    assertion: Annotated[Assertion | None, Rule(asserted=KNOWN)]
    defaults_sha256: Sha256 | None
    recipe_sha256: Sha256 | None
    run: Annotated[
        Run | Absent | None,
        Rule(description="the CI run that built the wheel; a ledger entry's, absent from a wheel farm stamps "
                         "(a rebuild in another run is the same file)"),
    ] = ABSENT
    source: SourceRecord | None
    toolchain: Annotated[Toolchain | None, Rule(asserted=KNOWN)]
    extensions: Annotated[Mapping[str, Sha256] | None, Rule(asserted=KNOWN)]
    provenance: Literal["asserted", "inferred"]
    vendored: Annotated[
        Mapping[str, Bundled] | Absent | None,
        Rule(description="bundled libraries (*.libs/ members): archive path -> the targets found in it and the "
                         "recipe's expectation for it (its own list, '' for host-only, or null with the "
                         "exemption's reason)"),
    ] = ABSENT
    duration_s: Annotated[
        float | Absent | None,
        Rule(minimum=0, description="wall seconds the build of this cell took (a ledger entry's); null or absent: "
                                    "unknown"),
    ] = ABSENT
    made_by: Annotated[
        Mapping[str, MadeByRecord] | Absent | None,
        Rule(description="archive path of each extension with device code -> the CUDA toolkit its device code "
                         "records (read from the binary at postbuild; it is the cell's CUDA line)"),
    ] = ABSENT
    families: Annotated[
        Mapping[str, FamilyRecord] | Absent | None,
        Rule(description="kernel families (sources the build compiles for their own targets): name -> the exact "
                         "targets of each of its translation units, its sources and the extensions holding them; "
                         "an extension's expected list is then its families' targets plus, for its other "
                         "translation units, the normalised list"),
    ] = ABSENT

    # -- reading --
    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], *, where: str | None = None,
                  error: type[FarmError] = WheelError) -> BuildInfo:
        """Parse and validate ``_build_info.json`` (its bytes, or the object already parsed).

        Raises ``error`` (:class:`WheelError` unless told) naming ``where`` and the first thing
        wrong: not JSON, a newer schema, a schema violation, a key this farm does not know."""
        obj = _load(data, where=where, error=error)
        if any(k in obj for k in LEDGER_KEYS):
            raise error(f"a ledger entry (it has {', '.join(k for k in LEDGER_KEYS if k in obj)}), not a "
                        f"{BUILD_INFO_NAME}", where=where,
                        hint="a wheel's provenance never holds the ledger's keys: the file was not written by "
                             "farm postbuild; rebuild the wheel with farm")
        return _decode(cls, obj, where=where, error=error)

    # -- writing --
    def to_json(self) -> bytes:
        """The bytes stored in the wheel: the file's key order, indented, one trailing newline."""
        return (json.dumps(self.to_dict(), indent=2) + "\n").encode()

    def ledger_entry(self, *, filename: str, sha256: str, size: int,
                     published: tuple[Published, ...] = ()) -> LedgerEntry:
        """The ledger line of the wheel this provenance describes (the one place entries are made)."""
        return LedgerEntry(self, filename, sha256, size, published)

    def for_wheel(self) -> BuildInfo:
        """What the wheel embeds: all but the record of the one build that made it (``run``,
        ``duration_s``, ``toolchain.compile_cache``), which the ledger keeps. A wheel's bytes are
        then what its inputs make, and a rebuild of the cell is the same file (docs/reproducible.md)."""
        toolchain = self.toolchain
        if toolchain is not None and not isinstance(toolchain.compile_cache, Absent):
            toolchain = replace(toolchain, compile_cache=ABSENT)
        return replace(self, run=ABSENT, duration_s=ABSENT, toolchain=toolchain)

    # -- what readers ask --
    @property
    def asserted(self) -> bool:
        """Asserted at build time and the assertion passed: the only provenance published."""
        return self.provenance == ASSERTED and self.assertion is not None and self.assertion.result == "passed"

    @property
    def bundled(self) -> Mapping[str, Bundled]:
        """The bundled libraries recorded (empty when none, or not recorded)."""
        return self.vendored if isinstance(self.vendored, Mapping) else {}

    @cached_property
    def archs(self) -> RecordedArchs:
        """Every arch list it records, decoded once, on first use (as packaging's ``Metadata``
        decodes ``RawMetadata``): a reader compares targets, never strings."""
        families = self.families if isinstance(self.families, Mapping) else {}
        return RecordedArchs(
            decode_list(self.arch_list.requested), decode_list(self.arch_list.normalised),
            {so: decode_list(text) for so, text in (self.expected or {}).items()},
            {so: decode_list(text) for so, text in (self.found or {}).items()},
            {path: decode_list(record.found) for path, record in self.bundled.items()},
            {name: decode_list(record.targets) for name, record in families.items()})


# A recorded arch list decoded: its targets, or the text as written where it does not parse (a
# forged record, then equal only to the same text); None where the record holds null.
Recorded = ArchList | str | None


def decode_list(text: str | None) -> Recorded:
    """A recorded list's targets (none for ``""``: an extension without device code)."""
    if text is None or text == "":
        return None if text is None else ArchList(frozenset())
    try:
        return ArchList.parse(text)
    except ArchError:
        return text


@dataclass(frozen=True)
class RecordedArchs:
    """The arch lists of a :class:`BuildInfo`, decoded (:func:`decode_list`); a map is empty where
    the record holds null."""

    requested: Recorded
    normalised: Recorded
    expected: Mapping[str, Recorded]  # per extension
    found: Mapping[str, Recorded]  # per extension
    bundled: Mapping[str, Recorded]  # the targets found in each bundled library
    families: Mapping[str, Recorded]  # each kernel family's targets


@dataclass(frozen=True)
class Published(_Record):
    """Where a wheel was published: the target's name and the file's URL there."""

    OPEN_SCHEMA: ClassVar[bool] = True
    target: str
    url: str


@dataclass(frozen=True)
class Attestation(_Record):
    """A signed statement of where a wheel was built: GitHub's artifact attestation (an in-toto
    Statement v1 with a SLSA provenance v1 predicate, signed through Sigstore) naming the wheel's
    sha256 and its ``_build_info.json``'s (docs/attestations.md)."""

    OPEN_SCHEMA: ClassVar[bool] = True
    url: Annotated[str, Rule(description="the attestation's page (https://github.com/OWNER/REPO/attestations/ID)")]
    repository: Annotated[NonEmpty, Rule(description="OWNER/REPO: gh attestation verify WHEEL --repo OWNER/REPO")]
    workflow: Annotated[NonEmpty, Rule(description="the workflow that signed it (--signer-workflow)")]


@dataclass(frozen=True)
class LedgerEntry:
    """One ``ledger.jsonl`` line: a wheel's provenance plus its file name, bytes and publications
    (the fields after ``info`` are the keys a line adds to the ``_build_info.json`` object)."""

    info: BuildInfo
    filename: Annotated[str, Rule(pattern=r"\.whl$", description="ledger entries only")]
    sha256: Annotated[Sha256, Rule(description="ledger entries only: the wheel file")]
    size: Annotated[Count, Rule(description="ledger entries only")]
    published: Annotated[tuple[Published, ...], Rule(description="ledger entries only")] = ()
    attestation: Annotated[
        Attestation | Absent,
        Rule(description="ledger entries only: the wheel's signed build provenance; absent: not attested"),
    ] = ABSENT

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], *, where: str | None = None,
                  error: type[FarmError] = LedgerError) -> LedgerEntry:
        """Parse and validate a ledger line (or fragment); raises ``error`` (:class:`LedgerError`)."""
        obj = _load(data, where=where, error=error)
        missing = [k for k in LEDGER_KEYS if k not in obj and k not in _OPTIONAL_LEDGER_KEYS]
        if missing:
            raise error(f"not a ledger entry: no {', '.join(missing)}", where=where,
                        hint="a ledger entry is a _build_info.json plus filename, sha256, size and published")
        info = _decode(BuildInfo, obj, where=where, error=error, skip=LEDGER_KEYS)
        return _decode(cls, obj, where=where, error=error, skip=_BUILD_INFO_KEYS, given={"info": info})

    def to_dict(self) -> JSON:
        out = self.info.to_dict()
        out.update((k, encode(getattr(self, k))) for k in LEDGER_KEYS if not isinstance(getattr(self, k), Absent))
        return out

    def with_published(self, target: str, url: str) -> LedgerEntry:
        return replace(self, published=(*self.published, Published(target, url)))


#: Keys a ledger line adds to the ``_build_info.json`` object.
LEDGER_KEYS = tuple(name for name, _ in fields_of(LedgerEntry) if name != "info")
_OPTIONAL_LEDGER_KEYS = ("attestation",)  # absent from a line until the wheel is attested
_BUILD_INFO_KEYS = tuple(name for name, _ in fields_of(BuildInfo))


def source_from(data: Mapping[str, Any] | None) -> SourceRecord | None:
    """A source description (a fetched tree's, or the file's ``source``) as its typed object."""
    if data is None:
        return None
    for cls in (GitSourceRecord, SdistSourceRecord, PathSourceRecord):
        if data["kind"] == cls.kind:
            return cls.from_mapping(data)
    raise ValueError(f"unknown source kind {data['kind']!r}")


def _decode(cls: type[_T], obj: Mapping[str, Any], *, where: str | None, error: type[FarmError],
            skip: tuple[str, ...] = (), given: Mapping[str, Any] | None = None) -> _T:
    """``obj`` (schema-checked) as its typed object; a key the definition lacks is refused."""
    try:
        return decode(cls, obj, skip=skip, given=given)  # type: ignore[no-any-return]
    except UnknownKeyError as exc:
        what = ".".join(exc.path) or BUILD_INFO_NAME
        if exc.path[:1] == ("published",):
            what = "published item"
        raise error(f"invalid build info: {what} has key(s) {exc.message} this farm does not know", where=where,
                    hint="it was written by another tool or a newer farm: upgrade farm, or rebuild the "
                         "wheel with this one") from None
    except ShapeError as exc:
        raise error(f"invalid build info at {exc.where or '(top level)'}: {exc.message}", where=where,
                    hint=f"the provenance must follow farm/schemas/{SCHEMA_FILE.name}") from None


def _load(data: bytes | str | Mapping[str, Any], *, where: str | None, error: type[FarmError]) -> Mapping[str, Any]:
    """Parse (when bytes) and schema-check; a newer schema is named as such."""
    if isinstance(data, (bytes, str)):
        if len(data) > MAX_BUILD_INFO:
            raise error(f"{BUILD_INFO_NAME} is {len(data):,} bytes (at most {MAX_BUILD_INFO:,})", where=where,
                        hint="a real provenance is a few KiB: the file is malformed or hostile")
        try:
            obj: object = jsonread.loads(data)  # bounded: depth, numbers, UTF-8 (it comes from a wheel)
        except ValueError as exc:
            raise error(f"{BUILD_INFO_NAME} is not JSON farm reads: {exc}", where=where) from None
    else:
        obj = data
    if isinstance(obj, Mapping):
        version = obj.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise error(f"schema version {version}: this farm reads version {SCHEMA_VERSION}", where=where,
                        hint="it was written by a newer farm: upgrade farm to read it")
    validate(obj, where=where, error=error)
    assert isinstance(obj, Mapping)  # the schema's top level is an object
    return obj


# -- making one -------------------------------------------------------------------------------
def make_build_info(
    *,
    package: str,
    dist: str,
    version: str,
    cell: Mapping[str, str],
    build_epoch: int,
    requested: str,
    normalised: str,
    expected: Mapping[str, str],
    found: Mapping[str, str],
    tools: Mapping[str, str | None],
    defaults_sha256: str | None,
    recipe_sha256: str | None,
    run: Run,
    source: SourceRecord | None,
    toolchain: Toolchain,
    extensions: Mapping[str, str],
    vendored: Mapping[str, Mapping[str, Any]] | None = None,
    duration_s: float | Absent | None = ABSENT,
    made_by: Mapping[str, Mapping[str, Any]] | None = None,
    families: Mapping[str, Mapping[str, Any]] | None = None,
) -> BuildInfo:
    """An asserted provenance; every value is given, nothing is guessed.

    ``vendored``: each bundled library's found targets and expectation (recorded only when the
    wheel bundles any). ``duration_s``: the build's wall seconds, when it was measured. ``made_by``:
    per extension with device code, what it records of its toolkit (the assertion's reading).
    ``families``: the kernel families the assertion judged (recorded only when the cell has any)."""
    return BuildInfo(
        package=package,
        dist=dist,
        version=version,
        cell=CellInfo.from_mapping(cell),
        build_epoch=int(build_epoch),
        arch_list=ArchListRecord(requested, normalised),
        expected=_frozen(expected),
        found=_frozen(found),
        assertion=Assertion("passed", tools.get("native_reader"), tools.get("cuobjdump")),
        defaults_sha256=defaults_sha256,
        recipe_sha256=recipe_sha256,
        run=run,
        source=source,
        toolchain=toolchain,
        extensions=_frozen(extensions),
        provenance=ASSERTED,
        vendored=_frozen({p: Bundled.from_mapping(v) for p, v in vendored.items()}) if vendored else ABSENT,
        duration_s=duration_s,
        made_by=_frozen({p: MadeByRecord.from_mapping(m) for p, m in made_by.items()})
        if made_by is not None else ABSENT,
        families=_frozen({n: FamilyRecord(f["targets"], tuple(f["sources"]), tuple(f["extensions"]),
                                          tuple(f["patterns"]) if "patterns" in f else ABSENT)
                          for n, f in families.items()}) if families else ABSENT,
    )


def inferred_build_info(
    *,
    dist: str,
    version: str,
    cell: Mapping[str, str | None],
    found: Mapping[str, str],
    extensions: Mapping[str, str],
    package: str | None = None,
) -> BuildInfo:
    """What inspection alone can say about a wheel: the rest is ``null``, never guessed."""
    return BuildInfo(
        package=package, dist=dist, version=version,
        cell=CellInfo(cell.get("cuda"), cell.get("torch"), cell.get("python"), cell.get("platform")),
        build_epoch=None, arch_list=ArchListRecord(None, None), expected=None,
        found=_frozen(found), assertion=None, defaults_sha256=None,
        recipe_sha256=None, run=None, source=None, toolchain=None,
        extensions=_frozen(extensions), provenance=INFERRED,
    )


# -- the file name a provenance implies (the upload gate and audit both check it) ---------------
def local_label(cell: CellInfo) -> str:
    """``cu128torch2.8``, or ``cu128`` for a package that does not link torch."""
    return label.local_label(cell.cuda or "", cell.torch or label.NO_TORCH)


def _platform_matches(cell_platform: str, wheel_platform: str) -> bool:
    # linux_x86_64 is published as manylinux_2_28_x86_64 / musllinux_1_2_x86_64 after repair.
    return wheel_platform == cell_platform or (
        cell_platform.startswith("linux_") and wheel_platform.startswith(("manylinux", "musllinux"))
        and wheel_platform.endswith(cell_platform.removeprefix("linux")))  # "_x86_64"


def _public(version: Any) -> str | None:
    try:
        return Version(str(version)).public
    except InvalidVersion:
        return None


_VARIANT_LABEL = re.compile(r"[0-9a-z_.]{1,16}")


def split_variant_label(filename: str) -> tuple[str, str | None]:
    """A wheel file name without its PEP 825 variant label, and the label (None: not a variant).

    ``{dist}-{version}(-{build})?-{python}-{abi}-{platform}(-{label})?.whl``: seven parts carry
    both; of six, the third is a build tag when it starts with a digit (a Python tag never does),
    else the last is a label."""
    parts = filename.removesuffix(".whl").split("-")
    if filename.endswith(".whl") and (len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit())) \
            and _VARIANT_LABEL.fullmatch(parts[-1]):
        return "-".join(parts[:-1]) + ".whl", parts[-1]
    return filename, None


def name_problems(filename: str, info: BuildInfo) -> list[str]:
    """Where the file name disagrees with the cell its provenance describes (empty: agrees); a
    wheel variant's label (PEP 825) names no part of the cell."""
    # imported here: packaging.utils brings its platform-tag code, which the matrix never needs
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename  # noqa: PLC0415

    try:
        name, version, build, tags = parse_wheel_filename(split_variant_label(filename)[0])
    except InvalidWheelFilename as exc:
        return [f"not a valid wheel file name ({exc})"]
    cell = info.cell
    problems: list[str] = []
    if canonicalize_name(info.dist) != name:
        problems.append(f"project {name} but provenance says {info.dist!r}")
    if version.public != _public(info.version):  # both spelled as PEP 440 normalises them
        problems.append(f"version {version.public} but provenance says {info.version!r}")
    want = local_label(cell)
    if (version.local or "") != want:
        problems.append(f"local label {version.local or '(none)'} but the cell is {want}")
    epoch = info.build_epoch or 0
    have = build[0] if build else 0
    if have != epoch:
        problems.append(f"build tag {have or '(none)'} but build_epoch is {epoch}")
    python = cell.python
    if python == "abi3":
        if not any(t.abi == "abi3" for t in tags):
            problems.append("no abi3 tag but the cell is abi3")
    elif python and not any(t.interpreter == python for t in tags):
        problems.append(f"python tag {'.'.join(sorted({t.interpreter for t in tags}))} but the cell is {python}")
    plat = cell.platform
    if plat and not any(_platform_matches(plat, t.platform) for t in tags):
        problems.append(f"platform {'.'.join(sorted({t.platform for t in tags}))} but the cell is {plat}")
    return problems


# -- the schema, derived from the definition --------------------------------------------------
@cache
def schema() -> dict[str, Any]:
    """The JSON schema of ``_build_info.json`` and of a ledger line, derived from the definition
    (the committed ``farm/schemas/build_info.schema.json`` is this, written by :func:`write_schema`)."""
    body = object_schema(BuildInfo)
    ledger = object_schema(LedgerEntry)["properties"]
    body["properties"].update((k, ledger[k]) for k in LEDGER_KEYS)
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://farm.invalid/schemas/build_info.schema.json",
        "title": f"farm _build_info.json (schema version {SCHEMA_VERSION})",
        "description": "Provenance of one wheel, stored in its .dist-info/_build_info.json. A ledger.jsonl line is "
                       "the same object plus filename, sha256, size and published. Inferred entries (backfill) have "
                       "the same keys with unknown values null. Generated from farm/provenance/buildinfo.py.",
        **body,
    }
    promised = asserted_schema(BuildInfo)
    if promised is not None:
        out["allOf"] = [{"if": {"properties": {"provenance": {"const": ASSERTED}}}, "then": promised}]
    return out


def schema_text() -> str:
    """The committed schema file's text."""
    return json.dumps(schema(), indent=2) + "\n"


def write_schema(path: Path = SCHEMA_FILE) -> None:
    """Write the schema derived from the definition to ``path`` (the committed file)."""
    Path(path).write_text(schema_text())


@cache
def _validator() -> Any:
    # SPEED: jsonschema imported only to validate. Importing it costs `farm doctor` ~35 ms, over a
    # fifth of its time when no farm wheel is installed (benchmarks/bench_startup.py measures it).
    import jsonschema  # noqa: PLC0415

    return jsonschema.Draft202012Validator(schema())  # made once: every read of a provenance checks


def validate(info: Any, *, where: str | None = None, error: type[FarmError] = WheelError) -> None:
    """Raise ``error`` naming the first schema violation of ``info``."""
    problems = sorted(_validator().iter_errors(info), key=lambda e: list(e.absolute_path))
    if problems:
        first = problems[0]
        at = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise error(
            f"invalid build info at {at}: {first.message}{more}",
            where=where,
            hint=f"the provenance must follow farm/schemas/{SCHEMA_FILE.name}",
        )


# A real _build_info.json is a few KiB; a hostile one must not cost gigabytes to parse.
MAX_BUILD_INFO = 4 << 20


def read_embedded(wheel: SafeWheel, *, where: str) -> BuildInfo | None:
    """The ``_build_info.json`` of an open wheel (None: it has none), size-checked before it is
    read, parsed and validated; ``where`` names the wheel in messages."""
    dist_info = wheel.dist_info()
    member = f"{dist_info}/{BUILD_INFO_NAME}"
    if not dist_info or member not in wheel.names():
        return None
    where = f"{where}!{member}"
    size = wheel.zip.getinfo(member).file_size
    if size > MAX_BUILD_INFO:
        raise WheelError(f"{BUILD_INFO_NAME} is {size:,} bytes (at most {MAX_BUILD_INFO:,})", where=where,
                         hint="a real provenance is a few KiB: the wheel is malformed or hostile")
    return BuildInfo.from_json(wheel.read(member), where=where)


def read_wheel(wheel: Path) -> BuildInfo | None:
    """The ``_build_info.json`` of the wheel at ``wheel`` (None: not stamped)."""
    # imported here: the zip reader is for wheels; the ledger's readers (farm matrix) never open one
    from farm.binary.wheelfile import SafeWheel  # noqa: PLC0415

    with SafeWheel(wheel) as zf:
        return read_embedded(zf, where=str(wheel))
