"""One normalised answer per ``.so`` from either reader or both.

The native reader gives the fatbins with their section, entries, variants and compression; cuobjdump
gives its listing. "Found" is the set of images the runtime can pick from: the union over the
runnable fatbins (:func:`farm.binary.fatbin.runnable`). With both readers the two listings must hold the
same entries, SASS compared without ``f`` (which cuobjdump cannot show), or the inspection records
the disagreement.
"""

from __future__ import annotations

import enum
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from farm.binary.cuobjdump import (
    ListedEntry,
    cuobjdump_version,
    dump_made_by,
    find_cuobjdump,
    list_targets,
    variant_free,
)
from farm.binary.fatbin import (
    READER_VERSION,
    EntryKind,
    Fatbin,
    find_stubs,
    read_fatbins,
    runnable,
    union,
)
from farm.binary.madeby import MadeBy, read_made_by
from farm.binary.tusources import tu_sources
from farm.binary.wheelfile import SafeWheel
from farm.errors import FarmError, UsageError
from farm.model.arch import ArchList, Target


class Reader(str, enum.Enum):
    NATIVE = "native"
    CUOBJDUMP = "cuobjdump"
    BOTH = "both"

    @classmethod
    def parse(cls, value: str | Reader) -> Reader:
        try:
            return cls(value)
        except ValueError:
            raise UsageError(f"unknown reader {value!r}", hint="use native, cuobjdump or both") from None


@dataclass(frozen=True, slots=True)
class Tools:
    """The readers that produced an answer, for provenance."""

    native: str | None = None
    cuobjdump: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"native_reader": self.native, "cuobjdump": self.cuobjdump}


@dataclass(frozen=True, slots=True)
class SoInspection:
    """What one shared object holds.

    ``fatbins`` come from the native reader (also in cuobjdump mode, where only their headers are
    validated, because cuobjdump silently skips what it cannot parse); ``listing`` is cuobjdump's,
    ``None`` when it did not run.
    """

    path: str
    reader: Reader
    fatbins: tuple[Fatbin, ...]
    listing: tuple[ListedEntry, ...] | None = None
    disagreement: str | None = None
    stubs: frozenset[int] = frozenset()  # offsets of fatbins that are nvcc device-link stubs
    stubs_checked: bool = True  # False: stubs were not looked for (a listing, which no verdict reads)
    made_by: MadeBy | None = None  # the toolkit the device code records (None: not read)
    # fatbin offset -> the stem of the .cu file its TU was compiled from (None: not read, or no
    # symbol table to read it from): how kernel families find their TUs
    sources: Mapping[int, str] | None = None

    @property
    def has_device_code(self) -> bool:
        if self.reader is Reader.CUOBJDUMP and self.listing is not None:
            return bool(self.listing)
        return bool(self.fatbins)

    @property
    def found(self) -> ArchList:
        """The images the runtime can pick from (union over the runnable fatbins)."""
        if self.reader is Reader.CUOBJDUMP and self.listing is not None:
            return ArchList.of(e.target for e in self.listing)
        return union(runnable(self.fatbins))

    @property
    def runnable(self) -> tuple[Fatbin, ...]:
        return runnable(self.fatbins)

    @property
    def units(self) -> tuple[ArchList, ...]:
        """What each translation unit's fatbin holds, a device-link stub left out: its cubins hold
        no code, so its arches run nothing (the sm_75 of an nvcc link without -gencode)."""
        units = tuple(f.targets for f in self.runnable if f.offset not in self.stubs)
        return units or (self.found,)

    @property
    def agrees(self) -> bool:
        return self.disagreement is None

    def to_json(self) -> dict[str, object]:
        """The inspection as JSON values."""
        found = self.found
        out: dict[str, object] = {
            "path": self.path,
            "reader": self.reader.value,
            "found": found.canonical(),
            "found_targets": found.names(),
        }
        if self.reader is not Reader.CUOBJDUMP:
            out["fatbins"] = self.fatbins_json()
        if self.listing is not None:
            out["cuobjdump"] = [{"kind": e.kind.value, "target": e.name} for e in self.listing]
        if self.reader is Reader.BOTH:
            out["readers_agree"] = self.agrees
            out["disagreement"] = self.disagreement
        return out

    def fatbins_json(self) -> list[dict[str, object]]:
        """Per fatbin: section, offset, runnable, device-link stub (``None``: not looked for), entries."""
        loaded = {f.offset for f in self.runnable}
        # from the scanned headers, not the Entry models: a library has thousands of entries
        return [
            {
                "section": f.section,
                "offset": f.offset,
                "runnable": f.offset in loaded,
                "device_link_stub": f.offset in self.stubs if self.stubs_checked else None,
                "entries": [
                    {"kind": kind, "target": name, "compression": compression, "offset": offset, "size": size}
                    for (kind, _, _, compression, name), offset, _, size, _ in f.raw
                ],
            }
            for f in self.fatbins
        ]


@dataclass(frozen=True, slots=True)
class WheelInspection:
    path: str
    extensions: tuple[SoInspection, ...]
    vendored: tuple[SoInspection, ...] = ()
    tools: Tools = Tools()

    @property
    def agrees(self) -> bool:
        return all(s.agrees for s in self.extensions + self.vendored)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "extensions": [s.to_json() for s in self.extensions],
            "vendored": [s.to_json() for s in self.vendored],
            "tools": self.tools.to_json(),
        }


def _counts(items: Iterable[tuple[EntryKind, Target]]) -> Counter[tuple[EntryKind, Target]]:
    return Counter((kind, variant_free(t)) for kind, t in items)


def compare(fatbins: Sequence[Fatbin], listing: Sequence[ListedEntry]) -> str | None:
    """``None`` when cuobjdump lists exactly the runnable entries (one line per TU per arch),
    else what differs."""
    native = _counts((e.kind, e.target) for f in runnable(fatbins) for e in f.entries if e.kind is not EntryKind.LTO_IR)
    listed = _counts((e.kind, e.target) for e in listing)
    if native == listed:
        return None

    def show(c: Counter[tuple[EntryKind, Target]]) -> str:
        return ", ".join(f"{t.name}" + (f" x{n}" if n > 1 else "") for (_, t), n in
                         sorted(c.items(), key=lambda kv: kv[0][1].sort_key())) or "nothing"

    return (f"the native reader found {show(native - listed)} that cuobjdump does not list; "
            f"cuobjdump lists {show(listed - native)} that the native reader does not find")


def _resolve_tool(reader: Reader, cuobjdump: Path | None) -> Path | None:
    if reader is Reader.NATIVE:
        return None
    return cuobjdump or find_cuobjdump()


def inspect_file(
    path: Path | str, reader: Reader | str = Reader.NATIVE, *, cuobjdump: Path | None = None,
    label: str | None = None, stubs: bool = True, made_by: bool = False, sources: bool = False,
) -> SoInspection:
    """Inspect one shared object with the chosen reader(s).

    ``stubs=False`` skips telling device-link stubs apart (it reads payloads: on libcublasLt,
    2,000 of them): a listing does not need it; the assertion and ``explain``, whose verdicts
    it changes, keep the default. ``made_by``: also read the toolkit version the device code
    records (every payload is read; with both readers, cuobjdump's ``-elf`` dump must agree).
    ``sources``: also read which source file each TU's fatbin came from (the symbol table).
    Broken files raise :class:`~farm.errors.BinaryFormatError` in every mode (the header check
    runs in cuobjdump mode too); a missing cuobjdump raises :class:`~farm.errors.ToolError`.
    """
    reader = Reader.parse(reader)
    tool = _resolve_tool(reader, cuobjdump)
    fatbins = tuple(read_fatbins(path))
    found_stubs = find_stubs(path, runnable(fatbins)) if stubs else frozenset()
    name = label or os.fspath(path)
    records = read_made_by(path, runnable(fatbins)) if made_by and fatbins else None
    tus = tu_sources(path) if sources and fatbins else None
    listing = None if tool is None else tuple(list_targets(Path(path), tool))
    if listing is None or reader is Reader.CUOBJDUMP:
        return SoInspection(name, reader, fatbins, listing, stubs=found_stubs, stubs_checked=stubs, made_by=records,
                            sources=tus)
    disagreement = compare(fatbins, listing)
    device_bytes = sum(e.payload_size for f in runnable(fatbins) for e in f.entries)
    if records is not None and device_bytes <= DUMP_CROSS_CHECK_MAX:
        other = compare_made_by(records, dump_made_by(Path(path), tool))
        disagreement = "; ".join(d for d in (disagreement, other) if d) or None
    return SoInspection(name, reader, fatbins, listing, disagreement, found_stubs, stubs, records, tus)


# cuobjdump prints a cubin's toolkit only in its full `-elf` dump of every section, which takes
# minutes on a large library (over 300 s for libcusparse's 160 MB here): the toolkit records are
# cross-checked with it up to this much device code; above it the native reading stands alone,
# beside cuobjdump's listing of the entries.
DUMP_CROSS_CHECK_MAX = 8 << 20


def compare_made_by(native: MadeBy, dumped: MadeBy) -> str | None:
    """Where the two readers' toolkit records differ. Every PTX ISA must match; cubins must match
    where the native reader read them all (it cannot open LZ4 payloads, cuobjdump can)."""
    cubins_differ = (native.cubins != dumped.cubins if native.unread == 0 else
                     any(dumped.cubins.get(v, 0) < n for v, n in native.cubins.items()))
    if native.ptx != dumped.ptx or cubins_differ:
        return (f"the toolkit records differ: native reader {native.describe()}; cuobjdump -elf "
                f"{dumped.describe()}")
    return None


def inspect_wheel(path: Path, reader: Reader | str = Reader.NATIVE, *, cuobjdump: Path | None = None,
                  stubs: bool = True, vendored_stubs: bool | None = None, made_by: bool = False,
                  sources: bool = False) -> WheelInspection:
    """Every extension of a wheel (and, listed apart, every vendored library under ``*.libs/``).

    ``stubs``: tell device-link stubs apart in the extensions; ``vendored_stubs``: in the vendored
    libraries too (default: as ``stubs``). A vendored library is judged by its found set alone,
    which stubs do not change, and a bundled cuBLAS has 2,000 small cubins to decompress: the
    assertion leaves them unread. ``sources``: read each extension TU's source (kernel families)."""

    reader = Reader.parse(reader)
    tool = _resolve_tool(reader, cuobjdump)
    tools = Tools(READER_VERSION if reader is not Reader.CUOBJDUMP else None, cuobjdump_version(tool) if tool else None)
    with SafeWheel(path) as wheel:
        def one(name: str, stubs: bool, made_by: bool = False) -> SoInspection:
            with wheel.extracted(name) as tmp:
                try:
                    return inspect_file(tmp, reader, cuobjdump=tool, label=name, stubs=stubs, made_by=made_by,
                                        sources=made_by and sources)
                except FarmError as exc:  # name the wheel member, not the temporary file
                    raise type(exc)(exc.message.replace(str(tmp), name), where=f"{path}!{name}",
                                    hint=exc.hint) from None

        # the toolkit records and TU sources of the extensions only: a bundled library may come from elsewhere
        extensions = tuple(one(n, stubs, made_by) for n in sorted(wheel.extension_members()))
        vendored = tuple(one(n, stubs if vendored_stubs is None else vendored_stubs)
                         for n in sorted(wheel.vendored_members()))
    return WheelInspection(str(path), extensions, vendored, tools)
