"""The native fatbin reader: ELF sections -> fatbins -> entry headers, nothing decompressed.

A CUDA binary carries its device code in the ELF sections ``.nv_fatbin`` (what the runtime
registers) and ``__nv_relfatbin`` (relocatable device code kept by ``-rdc`` builds). Each holds
fatbins back to back, one per translation unit plus any device-link stub; each fatbin holds
entries (cubin, PTX or LTO-IR) whose headers are never compressed (FACTS §3). Reading only those
headers with positioned reads keeps memory independent of the file size and takes milliseconds on a
500 MB library.

Every inconsistency is an error: cuobjdump silently skips unknown entry kinds and drops the rest
of a fatbin after an oversized entry (FACTS §2), so this reader refuses instead.
"""

from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import __version__
from .arch import ArchList, Kind, Target, Variant
from .errors import BinaryFormatError

if TYPE_CHECKING:  # kept out of the import path: the reader runs as a short-lived command
    from collections.abc import Iterable
    from pathlib import Path
    from typing import BinaryIO

READER_VERSION = f"farm {__version__}"

EXECUTABLE_SECTION = ".nv_fatbin"
RELOCATABLE_SECTION = "__nv_relfatbin"
FATBIN_SECTIONS = (EXECUTABLE_SECTION, RELOCATABLE_SECTION)

FATBIN_MAGIC = 0xBA55ED50
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY_MIN = 0x40

_FLAG_LZ4 = 0x2000
_FLAG_ZSTD = 0x8000
_FLAG_ARCH_SPECIFIC = 0x100000
_FLAG_FAMILY = 0x200000

_HINT_CORRUPT = "the file is corrupt or truncated: rebuild it (or re-download it) and inspect again"


class EntryKind(enum.Enum):
    PTX = "ptx"
    CUBIN = "cubin"
    LTO_IR = "lto-ir"


_KIND_CODES = {1: EntryKind.PTX, 2: EntryKind.CUBIN, 8: EntryKind.LTO_IR}


class Compression(enum.Enum):
    NONE = "none"
    LZ4 = "lz4"
    ZSTD = "zstd"


@dataclass(frozen=True)
class Entry:
    """One image of a fatbin. ``target`` is SASS for cubins, PTX for PTX and LTO-IR."""

    kind: EntryKind
    target: Target
    compressed: Compression
    offset: int = 0  # file offset of the entry header
    header_size: int = _ENTRY_MIN
    payload_size: int = 0  # as stored (compressed, padded)
    uncompressed_size: int = 0  # 0 when stored uncompressed

    @property
    def name(self) -> str:
        """``sm_90a`` / ``compute_90`` / ``lto_90``."""
        if self.kind is EntryKind.LTO_IR:
            return f"lto_{self.target.number}{self.target.variant.value}"
        return self.target.name

    @property
    def payload_offset(self) -> int:
        return self.offset + self.header_size


@dataclass(frozen=True)
class Fatbin:
    """One fatbin: the section it sits in, its file offset and its entries in file order."""

    section: str
    offset: int
    entries: tuple[Entry, ...]

    @property
    def targets(self) -> ArchList:
        """The images the driver can pick from: cubins and PTX (LTO-IR is not loadable)."""
        return ArchList.of(e.target for e in self.entries if e.kind is not EntryKind.LTO_IR)

    @property
    def executable(self) -> bool:
        return self.section == EXECUTABLE_SECTION


def runnable(fatbins: Iterable[Fatbin]) -> tuple[Fatbin, ...]:
    """The fatbins the CUDA runtime registers: those of ``.nv_fatbin`` when there are any.

    ``-rdc`` builds keep each translation unit's relocatable fatbin in ``__nv_relfatbin`` and run
    the device-linked one in ``.nv_fatbin``; an object that was never device-linked has only the
    relocatable ones. cuobjdump's default listing makes the same choice.
    """
    fatbins = tuple(fatbins)
    executable = tuple(f for f in fatbins if f.executable)
    return executable or fatbins


def union(fatbins: Iterable[Fatbin]) -> ArchList:
    targets: set[Target] = set()
    for f in fatbins:
        targets |= f.targets.targets
    return ArchList.of(targets)


# --------------------------------------------------------------------------------------------
# ELF
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int


_SHT_NOBITS = 8


class _Source:
    """Positioned reads of a file: only the bytes asked for enter the process.

    (An ``mmap`` costs more here: kernels map whole large page-cache folios on each fault, so
    touching the 8,300 headers of a 550 MB library took 120 MB of RSS, positioned reads none.)
    """

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh = fh
        self._fd = fh.fileno()
        self.size = size

    def read(self, offset: int, count: int) -> bytes:
        if _HAS_PREAD:
            return os.pread(self._fd, count, offset)
        self._fh.seek(offset)  # pragma: no cover - Windows has no os.pread
        return self._fh.read(count)  # pragma: no cover


_HAS_PREAD = hasattr(os, "pread")


def _need(src: _Source, offset: int, size: int, what: str, path: Path) -> None:
    if offset < 0 or offset + size > src.size:
        raise BinaryFormatError(
            f"truncated: {what} at offset {offset:#x} needs {size} bytes but the file has {src.size}",
            where=str(path),
            hint=_HINT_CORRUPT,
        )


def _elf_sections(src: _Source, path: Path) -> list[_Section]:
    head = src.read(0, 64)
    if head[:4] != b"\x7fELF":
        if head[:2] == b"MZ":
            raise BinaryFormatError(
                "a PE (Windows) binary: the native reader reads ELF only",
                where=str(path),
                hint="inspect Windows builds with --reader cuobjdump",
            )
        raise BinaryFormatError(
            f"not an ELF file (starts with {head[:16]!r})",
            where=str(path),
            hint="an extension module must be a shared library built for Linux; check how the wheel was built",
        )
    _need(src, 0, 64, "the ELF header", path)
    if head[4] != 2 or head[5] != 1:
        raise BinaryFormatError(
            f"ELF class {head[4]} / data encoding {head[5]}: only 64-bit little-endian ELF holds CUDA device "
            "code farm builds",
            where=str(path),
            hint="build for linux_x86_64 or linux_aarch64",
        )
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shoff == 0:
        return []  # no section table: nothing names a fatbin section
    if shentsize < 0x40:
        raise BinaryFormatError(f"ELF section header size {shentsize} < 64", where=str(path), hint=_HINT_CORRUPT)
    _need(src, shoff, shentsize, "the ELF section table", path)
    if shnum == 0 or shstrndx == 0xFFFF:  # SHN_XINDEX convention: the real values live in section 0
        first = src.read(shoff, 0x40)
        if shnum == 0:
            shnum, = struct.unpack_from("<Q", first, 0x20)
        if shstrndx == 0xFFFF:
            shstrndx, = struct.unpack_from("<I", first, 0x28)
    _need(src, shoff, shnum * shentsize, f"the ELF section table ({shnum} sections)", path)
    table = src.read(shoff, shnum * shentsize)
    raw = []
    for i in range(shnum):
        base = i * shentsize
        name, stype = struct.unpack_from("<II", table, base)
        offset, size = struct.unpack_from("<QQ", table, base + 0x18)
        raw.append((name, stype, offset, size))
    if shstrndx >= shnum:
        raise BinaryFormatError(
            f"ELF section name table index {shstrndx} >= section count {shnum}", where=str(path), hint=_HINT_CORRUPT
        )
    _, _, str_off, str_size = raw[shstrndx]
    _need(src, str_off, str_size, "the ELF section name table", path)
    names = src.read(str_off, str_size)
    sections = []
    for name_off, stype, offset, size in raw:
        if name_off >= str_size:
            raise BinaryFormatError(
                f"ELF section name offset {name_off} outside the name table", where=str(path), hint=_HINT_CORRUPT
            )
        end = names.find(b"\0", name_off)
        sections.append(_Section(names[name_off : end if end != -1 else None].decode("latin-1"), stype, offset, size))
    return sections


# --------------------------------------------------------------------------------------------
# fatbin
# --------------------------------------------------------------------------------------------
# One unpack per entry header: kind, (u16), header size, payload size, compressed size, (u32),
# minor, major, arch, (u64), flags, (u64), uncompressed size.
_ENTRY = struct.Struct("<HHIQIIHHIQQQQ")
assert _ENTRY.size == _ENTRY_MIN


def _target(arch: int, flags: int, kind: EntryKind, where: str, path: Path) -> Target:
    if arch < 10 or arch > 999:
        raise BinaryFormatError(f"{where}: implausible arch number {arch}", where=str(path), hint=_HINT_CORRUPT)
    a, f = bool(flags & _FLAG_ARCH_SPECIFIC), bool(flags & _FLAG_FAMILY)
    if a and f:
        raise BinaryFormatError(f"{where}: flags {flags:#x} mark the entry both 'a' and 'f'", where=str(path),
                                hint=_HINT_CORRUPT)
    variant = Variant.ARCH if a else Variant.FAMILY if f else Variant.NONE
    return Target(arch // 10, arch % 10, variant, Kind.SASS if kind is EntryKind.CUBIN else Kind.PTX)


def _compression(flags: int, where: str, path: Path) -> Compression:
    lz4, zstd = bool(flags & _FLAG_LZ4), bool(flags & _FLAG_ZSTD)
    if lz4 and zstd:
        raise BinaryFormatError(f"{where}: flags {flags:#x} mark the entry both LZ4 and zstd", where=str(path),
                                hint=_HINT_CORRUPT)
    return Compression.LZ4 if lz4 else Compression.ZSTD if zstd else Compression.NONE


_MEANING = _FLAG_ARCH_SPECIFIC | _FLAG_FAMILY | _FLAG_LZ4 | _FLAG_ZSTD


# (kind code, arch, meaningful flags) -> (kind, target, compression): a library repeats a few dozen
# combinations thousands of times, so each is validated and built once per read.
_Decoded = dict[tuple[int, int, int], tuple[EntryKind, Target, Compression]]


def _read_entries(src: _Source, start: int, end: int, label: str, path: Path, decoded: _Decoded) -> tuple[Entry, ...]:
    entries: list[Entry] = []
    pos = start
    while pos < end:
        if pos + _ENTRY_MIN > end:
            raise BinaryFormatError(
                f"{label}, entry {len(entries) + 1} at {pos:#x}: truncated entry header ({end - pos} bytes left "
                f"of the fatbin, a header needs {_ENTRY_MIN})",
                where=str(path), hint=_HINT_CORRUPT,
            )
        (code, _, header_size, payload_size, _, _, _, _, arch, _, flags, _,
         uncompressed) = _ENTRY.unpack(src.read(pos, _ENTRY_MIN))
        key = (code, arch, flags & _MEANING)
        known = decoded.get(key)
        if known is None:
            where = f"{label}, entry {len(entries) + 1} at {pos:#x}"
            kind = _KIND_CODES.get(code)
            if kind is None:
                raise BinaryFormatError(
                    f"{where}: unknown entry kind {code} (known: 1 PTX, 2 cubin, 8 LTO-IR)",
                    where=str(path),
                    hint=_HINT_CORRUPT + "; if it was built by a newer toolkit than farm knows, report it",
                )
            known = decoded[key] = (kind, _target(arch, flags, kind, where, path), _compression(flags, where, path))
        if header_size < _ENTRY_MIN or pos + header_size + payload_size > end:
            where = f"{label}, entry {len(entries) + 1} at {pos:#x}"
            if header_size < _ENTRY_MIN:
                raise BinaryFormatError(f"{where}: entry header size {header_size} < {_ENTRY_MIN}", where=str(path),
                                        hint=_HINT_CORRUPT)
            raise BinaryFormatError(
                f"{where}: entry of {header_size} + {payload_size} bytes runs past the end of its fatbin "
                f"at {end:#x}",
                where=str(path), hint=_HINT_CORRUPT,
            )
        entries.append(Entry(known[0], known[1], known[2], pos, header_size, payload_size, uncompressed))
        pos += header_size + payload_size
    return tuple(entries)


def _skip_padding(src: _Source, pos: int, end: int) -> int:
    """The first non-zero byte at or after ``pos`` (``end`` when there is none)."""
    while pos < end:
        chunk = src.read(pos, min(4096, end - pos))
        stripped = len(chunk) - len(chunk.lstrip(b"\0"))
        if stripped < len(chunk):
            return pos + stripped
        pos += len(chunk)
    return end


def _read_section(src: _Source, section: _Section, path: Path, decoded: _Decoded) -> list[Fatbin]:
    if section.type == _SHT_NOBITS:
        raise BinaryFormatError(
            f"section {section.name} has no data in the file (SHT_NOBITS)", where=str(path), hint=_HINT_CORRUPT
        )
    _need(src, section.offset, section.size, f"section {section.name}", path)
    fatbins: list[Fatbin] = []
    pos, end = section.offset, section.offset + section.size
    while pos < end:
        head = src.read(pos, min(_FATBIN_HEADER.size, end - pos))
        if not any(head):  # alignment padding between fatbins
            pos = _skip_padding(src, pos, end)
            continue
        label = f"{section.name} fatbin {len(fatbins) + 1} at {pos:#x}"
        if len(head) < _FATBIN_HEADER.size:
            raise BinaryFormatError(f"{label}: truncated fatbin header ({end - pos} bytes left)", where=str(path),
                                    hint=_HINT_CORRUPT)
        magic, version, header_size, size = _FATBIN_HEADER.unpack(head)
        if magic != FATBIN_MAGIC:
            if head[:1] == b"\0":  # padding, then the next header: realign on the first non-zero byte
                pos = _skip_padding(src, pos, end)
                continue
            raise BinaryFormatError(
                f"{label}: bad fatbin magic {magic:#010x} (expected {FATBIN_MAGIC:#010x})",
                where=str(path), hint=_HINT_CORRUPT,
            )
        if version != 1 or header_size < _FATBIN_HEADER.size:
            raise BinaryFormatError(
                f"{label}: unsupported fatbin header (version {version}, header size {header_size})",
                where=str(path), hint=_HINT_CORRUPT + "; if it was built by a newer toolkit than farm knows, report it",
            )
        body, body_end = pos + header_size, pos + header_size + size
        if body_end > end:
            raise BinaryFormatError(
                f"{label}: declares {size} bytes of entries but its section ends {end - body} bytes after the header",
                where=str(path), hint=_HINT_CORRUPT,
            )
        fatbins.append(Fatbin(section.name, pos, _read_entries(src, body, body_end, label, path, decoded)))
        pos = body_end
    return fatbins


def read_fatbins(path: Path) -> list[Fatbin]:
    """Every fatbin of ``path`` (``.nv_fatbin`` and ``__nv_relfatbin``), in file order.

    Reads only the ELF section table and the fatbin and entry headers, so time and memory do not
    grow with payload size. An ELF file without device code gives ``[]``; anything malformed raises
    :class:`~farm.errors.BinaryFormatError` naming the file, the offset and what is wrong.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise BinaryFormatError("empty file", where=str(path), hint=_HINT_CORRUPT)
            src = _Source(fh, size)
            fatbins: list[Fatbin] = []
            decoded: _Decoded = {}
            for section in sorted((s for s in _elf_sections(src, path) if s.name in FATBIN_SECTIONS),
                                  key=lambda s: s.offset):
                fatbins.extend(_read_section(src, section, path, decoded))
            return fatbins
    except FileNotFoundError:
        raise BinaryFormatError("no such file", where=str(path), hint="check the path") from None
    except IsADirectoryError:
        raise BinaryFormatError("is a directory, not a binary", where=str(path)) from None


# --------------------------------------------------------------------------------------------
# payloads (only for telling device-link stubs apart; the listing never needs them)
# --------------------------------------------------------------------------------------------
def read_payload(path: Path, entry: Entry, *, limit: int = 256 << 20) -> bytes | None:
    """The entry's payload, decompressed; ``None`` when its codec is not available (LZ4)."""
    with open(path, "rb") as fh:
        fh.seek(entry.payload_offset)
        data = fh.read(entry.payload_size)
    if len(data) != entry.payload_size:
        raise BinaryFormatError(f"truncated payload of the entry at {entry.offset:#x}", where=str(path),
                                hint=_HINT_CORRUPT)
    if entry.compressed is Compression.NONE:
        return data
    if entry.compressed is Compression.ZSTD:
        import zstandard  # only stub detection needs it

        try:
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=min(entry.uncompressed_size, limit))
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

    The stub an nvcc device link adds is a cubin per link arch without any (FACTS §2); a library TU
    holding only ``__device__`` data (cuBLASLt has hundreds) is not a stub.
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


def is_device_link_stub(path: Path, fatbin: Fatbin) -> bool | None:
    """True when every entry is a cubin without code (an nvcc device-link stub), False when not,
    None when a compressed payload cannot be checked."""
    if not fatbin.entries or any(e.kind is not EntryKind.CUBIN for e in fatbin.entries):
        return False
    if any(max(e.payload_size, e.uncompressed_size) > _STUB_MAX for e in fatbin.entries):
        return False  # an empty cubin is ~1.5 KB; never decompress real code just to look
    for entry in fatbin.entries:
        data = read_payload(path, entry)
        if data is None:
            return None
        if cubin_has_code(data):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m farm.fatbin FILE...``: one line per entry, for scripts and the benchmark."""
    import sys

    code = 0
    for name in sys.argv[1:] if argv is None else argv:
        try:
            lines = [f"{name}\t{f.section}\t{f.offset:#x}\t{e.kind.value}\t{e.name}\t{e.compressed.value}\n"
                     for f in read_fatbins(name) for e in f.entries]  # type: ignore[arg-type]
            sys.stdout.write("".join(lines))
        except BinaryFormatError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = exc.exit_code
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
