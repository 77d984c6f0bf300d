"""The native fatbin reader: ELF sections -> fatbins -> entries, nothing decompressed.

A CUDA binary carries its device code in the ELF sections ``.nv_fatbin`` (what the runtime
registers) and ``__nv_relfatbin`` (relocatable device code kept by ``-rdc`` builds); a Windows
``.pyd``/``.dll`` carries the same bytes in the PE section ``.nv_fatb`` (names cut to 8 bytes). Each
holds fatbins back to back, one per translation unit plus any device-link stub; each fatbin holds
entries (cubin, PTX or LTO-IR) whose headers are never compressed (docs/background.md, "The fatbin
container"). Reading only those headers with positioned reads keeps memory independent of the file
size and takes milliseconds on a 500 MB library. :mod:`farm.binary.fatbinscan` reads and checks
them; this module gives them their models.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO

import zstandard

from farm import __version__
from farm.binary import fatbinscan as _scan
from farm.binary.fatbinscan import (  # noqa: F401 - re-exported: the section names are part of this API
    EXECUTABLE_SECTION,
    FATBIN_MAGIC,
    FATBIN_SECTIONS,
    RELOCATABLE_SECTION,
)
from farm.errors import BinaryFormatError
from farm.model.arch import ArchList, Kind, Target, Variant

READER_VERSION = f"farm {__version__}"

_HINT_CORRUPT = _scan.HINT_CORRUPT


class EntryKind(enum.Enum):
    PTX = _scan.PTX
    CUBIN = _scan.CUBIN
    LTO_IR = _scan.LTO_IR


class Compression(enum.Enum):
    NONE = _scan.NONE
    LZ4 = _scan.LZ4
    ZSTD = _scan.ZSTD


@dataclass(frozen=True, slots=True)
class Entry:
    """One image of a fatbin. ``target`` is SASS for cubins, PTX for PTX and LTO-IR."""

    kind: EntryKind
    target: Target
    compressed: Compression
    offset: int = 0  # file offset of the entry header
    header_size: int = _scan.ENTRY_MIN
    payload_size: int = 0  # as stored (compressed, padded)
    uncompressed_size: int = 0  # 0 when stored uncompressed

    @property
    def name(self) -> str:
        """``sm_90a`` / ``compute_90`` / ``lto_90``."""
        return _scan.entry_name(self.kind.value, self.target.number, self.target.variant.value)

    @property
    def payload_offset(self) -> int:
        return self.offset + self.header_size


# (kind, target, compression) per distinct scanned description: a library has a few dozen
_Models = dict[_scan.Decoded, tuple[EntryKind, Target, Compression]]


class Fatbin:
    """One fatbin: the section it sits in, its file offset and its entries in file order.

    Made by :func:`read_fatbins` from the scanned headers. ``signature`` and ``targets`` are
    shared by every fatbin holding the same list of images; the :class:`Entry` models are built on
    first use of ``entries`` (a listing of a library's thousands of fatbins needs none).
    """

    __slots__ = ("_entries", "_models", "_raw", "offset", "section", "signature", "targets")
    section: str
    offset: int
    # per entry (kind, arch number, variant, compression, name), as plain values: equal lists of
    # images compare and hash cheaply, and render without touching the enums
    signature: tuple[_scan.Decoded, ...]
    # the images the driver can pick from: cubins and PTX (LTO-IR is not loadable)
    targets: ArchList

    def __init__(self, section: str, offset: int, signature: tuple[_scan.Decoded, ...], targets: ArchList,
                 raw: list[_scan.RawEntry], models: _Models) -> None:
        self.section, self.offset, self.signature, self.targets = section, offset, signature, targets
        self._raw, self._models = raw, models
        self._entries: tuple[Entry, ...] | None = None

    @property
    def entries(self) -> tuple[Entry, ...]:
        if self._entries is None:
            models = self._models
            self._entries = tuple(
                Entry(*models[decoded], pos, header_size, payload_size, uncompressed)
                for decoded, pos, header_size, payload_size, uncompressed in self._raw)
        return self._entries

    @property
    def raw(self) -> list[_scan.RawEntry]:
        """The scanned entries: (description, header offset, header size, payload size, uncompressed size)."""
        return self._raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fatbin):
            return NotImplemented
        return (self.section, self.offset, self._raw) == (other.section, other.offset, other._raw)

    def __hash__(self) -> int:
        return hash((self.section, self.offset))

    def __repr__(self) -> str:
        return f"Fatbin({self.section!r}, {self.offset:#x}, {' '.join(d[4] for d in self.signature)})"


_DESCRIPTION = itemgetter(0)  # of a scanned entry


def runnable(fatbins: Iterable[Fatbin]) -> tuple[Fatbin, ...]:
    """The fatbins the CUDA runtime registers: those of ``.nv_fatbin`` when there are any.

    ``-rdc`` builds keep each translation unit's relocatable fatbin in ``__nv_relfatbin`` and run
    the device-linked one in ``.nv_fatbin``; an object that was never device-linked has only the
    relocatable ones. cuobjdump's default listing makes the same choice.
    """
    fatbins = tuple(fatbins)
    executable = tuple([f for f in fatbins if f.section == EXECUTABLE_SECTION])
    return executable or fatbins


def union(fatbins: Iterable[Fatbin]) -> ArchList:
    # over the distinct target sets only: a library repeats a few dozen thousands of times
    return ArchList.of(frozenset().union(*{f.targets.targets for f in fatbins}))


def _model(decoded: _scan.Decoded) -> tuple[EntryKind, Target, Compression]:
    kind, number, variant, compression, _ = decoded
    target = Target(number // 10, number % 10, Variant(variant), Kind.SASS if kind == _scan.CUBIN else Kind.PTX)
    return EntryKind(kind), target, Compression(compression)


def read_fatbins(path: Path | str) -> list[Fatbin]:
    """Every fatbin of ``path`` (``.nv_fatbin`` and ``__nv_relfatbin``), in file order: what
    :func:`farm.binary.fatbinscan.scan` reads (headers only; malformed raises), as models."""
    models: _Models = {}
    # one signature tuple and one ArchList per distinct list of images: a few hundred in a library
    shared: dict[tuple[_scan.Decoded, ...], tuple[tuple[_scan.Decoded, ...], ArchList]] = {}
    fatbins: list[Fatbin] = []
    append = fatbins.append
    for section, offset, raw in _scan.scan(path):
        signature = tuple(map(_DESCRIPTION, raw))
        known = shared.get(signature)
        if known is None:  # a new list of images: model its entries once
            for decoded in signature:
                if decoded not in models:
                    models[decoded] = _model(decoded)
            known = shared[signature] = signature, ArchList.of(
                models[d][1] for d in signature if d[0] != _scan.LTO_IR)
        append(Fatbin(section, offset, known[0], known[1], raw, models))
    return fatbins


# --------------------------------------------------------------------------------------------
# payloads (only for telling device-link stubs apart; the listing never needs them)
# --------------------------------------------------------------------------------------------
_ZSTD_SIZE_UNKNOWN = (1 << 64) - 1  # ZSTD_CONTENTSIZE_UNKNOWN


def read_payload(path: Path | str, entry: Entry, *, fh: BinaryIO, limit: int = 256 << 20) -> bytes | None:
    """The entry's payload, decompressed; ``None`` when its codec is not available (LZ4).

    ``fh``: ``path`` open (a caller reads many payloads of one file)."""
    fh.seek(entry.payload_offset)
    data = fh.read(entry.payload_size)
    if len(data) != entry.payload_size:
        raise BinaryFormatError(f"truncated payload of the entry at {entry.offset:#x}", where=str(path),
                                hint=_HINT_CORRUPT)
    if entry.compressed is Compression.NONE:
        return data
    if entry.compressed is Compression.ZSTD:
        cap = min(entry.uncompressed_size, limit)
        try:
            # decompress() allocates whatever size the frame itself claims (max_output_size only
            # bounds frames that claim none), which a hostile file can set to gigabytes
            claimed = zstandard.get_frame_parameters(data).content_size
            if claimed != _ZSTD_SIZE_UNKNOWN and claimed > cap:
                raise BinaryFormatError(
                    f"zstd payload of the entry at {entry.offset:#x} claims {claimed} bytes; its entry header "
                    f"declares {entry.uncompressed_size} (read limit {limit})",
                    where=str(path), hint=_HINT_CORRUPT,
                )
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=cap)
        except zstandard.ZstdError as exc:
            raise BinaryFormatError(
                f"zstd payload of the entry at {entry.offset:#x} does not decompress: {exc}",
                where=str(path), hint=_HINT_CORRUPT,
            ) from None
    return None


# Sections that only a translation unit's own device code or data produce; the cubins of an nvcc
# device-link stub hold none of them (just symbol tables and notes).
_CONTENT_SECTIONS = (b".text.", b".nv.global", b".nv.constant", b".nv.shared.", b".nv.info")


def cubin_has_code(cubin: bytes) -> bool:
    """Whether a cubin holds any kernel, device function or device variable.

    The stub an nvcc device link adds is a cubin per link arch without any (docs/background.md,
    "cuobjdump's quirks"); a library TU holding only ``__device__`` data (cuBLASLt has hundreds) is
    not a stub.
    """
    if cubin[:4] != b"\x7fELF" or len(cubin) < 64 or cubin[4] != 2:
        return True  # not a cubin we can read: assume content, never call real code a stub
    try:
        shoff, = struct.unpack_from("<Q", cubin, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        str_off, = struct.unpack_from("<Q", cubin, shoff + shstrndx * shentsize + 0x18)
        for i in range(shnum):
            base = shoff + i * shentsize
            name_off, = struct.unpack_from("<I", cubin, base)
            size, = struct.unpack_from("<Q", cubin, base + 0x20)
            start = str_off + name_off
            name = cubin[start : cubin.index(b"\0", start)]
            if size > 0 and name.startswith(_CONTENT_SECTIONS):
                return True
    except (struct.error, ValueError):
        return True
    return False


_STUB_MAX = 16 << 10


def _may_be_stub(fatbin: Fatbin) -> bool:
    """Only cubins, all small: anything else is decided without reading a payload."""
    # from the scanned headers: a library's thousands of fatbins are decided without Entry models
    if not fatbin.signature or any(kind != _scan.CUBIN for kind, *_ in fatbin.signature):
        return False
    # an empty cubin is ~1.5 KB; never decompress real code just to look
    return all(max(payload, uncompressed) <= _STUB_MAX for _, _, _, payload, uncompressed in fatbin.raw)


def is_device_link_stub(path: Path | str, fatbin: Fatbin, *, fh: BinaryIO) -> bool | None:
    """True when every entry is a cubin without code (an nvcc device-link stub), False when not,
    None when a compressed payload cannot be checked (``fh``: ``path`` open)."""
    if not _may_be_stub(fatbin):
        return False
    for entry in fatbin.entries:
        data = read_payload(path, entry, fh=fh)
        if data is None:
            return None
        if cubin_has_code(data):
            return False
    return True


def find_stubs(path: Path | str, fatbins: Iterable[Fatbin]) -> frozenset[int]:
    """Offsets of the device-link stubs among ``fatbins``: the file is opened once, and only
    fatbins that could be one (all cubins, all small) have a payload read."""
    candidates = [f for f in fatbins if _may_be_stub(f)]
    if not candidates:
        return frozenset()
    with open(path, "rb") as fh:
        return frozenset(f.offset for f in candidates if is_device_link_stub(path, f, fh=fh))


def ptx_isa(path: Path | str, fatbins: Iterable[Fatbin], *, limit: int = 64 << 20) -> str | None:
    """The PTX ISA (``9.0``) of the newest PTX image among ``fatbins``, from its ``.version``
    line; ``None`` when there is no PTX or its codec is not available (LZ4)."""
    version_line = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
    best: tuple[int, int] | None = None
    entries = [e for f in fatbins for e in f.entries if e.kind is EntryKind.PTX]
    if not entries:
        return None
    with open(path, "rb") as fh:
        for entry in entries:
            payload = read_payload(path, entry, limit=limit, fh=fh)
            m = version_line.search(payload[:4096]) if payload else None
            if m:
                version = (int(m[1]), int(m[2]))
                best = version if best is None or version > best else best
    return f"{best[0]}.{best[1]}" if best else None
