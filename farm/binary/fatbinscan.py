"""The header scanner under :mod:`farm.binary.fatbin`: ELF or PE sections -> fatbins -> entry headers.

Standard library only and plain tuples out: ``python -m farm.binary.fatbinscan FILE...`` lists the
entries of any file with no dependency installed. :func:`farm.binary.fatbin.read_fatbins` wraps
the records in the arch models. Every check lives here, once, for both.

Every inconsistency is an error: cuobjdump silently skips unknown entry kinds and drops the rest
of a fatbin after an oversized entry (docs/background.md, "The fatbin container"), so this scanner
refuses instead.
"""

from __future__ import annotations

import os
import stat
import struct
import sys

from farm.errors import BinaryFormatError

EXECUTABLE_SECTION = ".nv_fatbin"
RELOCATABLE_SECTION = "__nv_relfatbin"
FATBIN_SECTIONS = (EXECUTABLE_SECTION, RELOCATABLE_SECTION)

FATBIN_MAGIC = 0xBA55ED50
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
ENTRY_MIN = 0x40
# One unpack per entry header, of the fields read: kind @0, header size @4, payload size @8, arch @28,
# flags @40, uncompressed size @56 (skipped: compressed size, minor and major, and three reserved).
_ENTRY = struct.Struct("<H2xIQ12xI8xQ8xQ")
assert _ENTRY.size == ENTRY_MIN

# entry kinds and codecs, spelled as farm.binary.fatbin's EntryKind and Compression values
PTX, CUBIN, LTO_IR = "ptx", "cubin", "lto-ir"
NONE, LZ4, ZSTD = "none", "lz4", "zstd"
_KIND_CODES = {1: PTX, 2: CUBIN, 8: LTO_IR}
_PREFIX = {PTX: "compute", CUBIN: "sm", LTO_IR: "lto"}

_FLAG_LZ4 = 0x2000
_FLAG_ZSTD = 0x8000
_FLAG_ARCH_SPECIFIC = 0x100000
_FLAG_FAMILY = 0x200000

_SHT_NOBITS = 8
# Headers closer than _WINDOW share one read: a fatbin's header and its first entry, the entries
# of a small fatbin. After a payload of _LARGE bytes or more the next header stands alone, and a read
# of _ALONE bytes (a fatbin header and its first entry header fit) is all it needs: copying a
# window nobody reads costs as much as the syscall. On libcublasLt (8,300 headers) that is 1,730
# reads of 5 MB, against 2,300 of 9 MB with one 4 KiB window: 2 ms instead of 4.
_WINDOW = 8192
_ALONE = 128
_LARGE = 2048

HINT_CORRUPT = "the file is corrupt or truncated: rebuild it (or re-download it) and inspect again"
_HINT_NEWER = HINT_CORRUPT + "; if it was built by a newer toolkit than farm knows, report it"

# A validated entry description: (kind, arch number, variant "" / "a" / "f", compression, name).
Decoded = tuple[str, int, str, str, str]
# One entry: (decoded, header offset, header size, payload size, uncompressed size or 0).
RawEntry = tuple[Decoded, int, int, int, int]
# One fatbin: (section name, offset, entries in file order).
RawFatbin = tuple[str, int, list[RawEntry]]


def entry_name(kind: str, number: int, variant: str) -> str:
    """``sm_90a`` / ``compute_90`` / ``lto_90``: the name of an image in listings."""
    return f"{_PREFIX[kind]}_{number}{variant}"


class _Window:
    """Positioned reads through one small buffer: only the bytes near a header enter the process.

    (A whole-file ``mmap`` costs more here: kernels map whole large page-cache folios on each
    fault, so touching the 8,300 headers of a 550 MB library took 120 MB of RSS, reads none.)
    """

    __slots__ = ("buf", "fd", "path", "size", "start")

    def __init__(self, fd: int, size: int, path: str) -> None:
        self.fd, self.size, self.path = fd, size, path
        self.start, self.buf = 0, b""

    def get(self, offset: int, count: int) -> tuple[bytes, int]:
        """A buffer holding ``count`` bytes at ``offset``, and where they start in it."""
        i = offset - self.start
        if i < 0 or i + count > len(self.buf):
            self.buf = _pread(self.fd, max(count, _WINDOW), offset)
            self.start, i = offset, 0
            if len(self.buf) < count:  # bounds were checked against the size: the file shrank
                raise self.truncated(offset, count)
        return self.buf, i

    def truncated(self, offset: int, count: int) -> BinaryFormatError:
        return self.error(f"truncated while reading {count} bytes at offset {offset:#x}")

    def need(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or offset + size > self.size:
            raise self.error(f"truncated: {what} at offset {offset:#x} needs {size} bytes but the file has {self.size}")

    def error(self, message: str, hint: str = HINT_CORRUPT) -> BinaryFormatError:
        return BinaryFormatError(message, where=self.path, hint=hint)


if hasattr(os, "pread"):
    _pread = os.pread
else:  # pragma: no cover - Windows has no os.pread

    def _pread(fd: int, count: int, offset: int) -> bytes:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, count)


# --------------------------------------------------------------------------------------------
# ELF
# --------------------------------------------------------------------------------------------
def _sections(src: _Window) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) of every section of an ELF or PE (Windows) binary."""
    head = _pread(src.fd, 64, 0)
    if head[:2] == b"MZ":
        return _pe_sections(src, head)
    if head[:4] != b"\x7fELF":
        raise src.error(f"neither an ELF nor a PE file (starts with {head[:16]!r})",
                        "an extension module must be a shared library (.so, .pyd); check how the wheel was built")
    return _elf_sections(src, head)


# PE section names are cut to 8 bytes by the linker: nvcc's sections as they appear in a .dll/.pyd
# (seen in NVIDIA's win_amd64 wheels, e.g. curand64_10.dll: ".nv_fatb").
_PE_NAMES = {b".nv_fatb": EXECUTABLE_SECTION, b"__nv_rel": RELOCATABLE_SECTION}
_PE_SECTION = struct.Struct("<8sIIII")  # Name, VirtualSize, VirtualAddress, SizeOfRawData, PointerToRawData
_PE_SECTION_SIZE = 40  # the header goes on with relocation/line-number fields and Characteristics


def _pe_sections(src: _Window, head: bytes) -> list[tuple[str, int, int, int]]:
    """The fatbin sections of a PE image, named as on ELF; their bytes on disk only."""
    src.need(0, 0x40, "the DOS header")
    pe, = struct.unpack_from("<I", head, 0x3C)
    src.need(pe, 24, "the PE header")
    coff = _pread(src.fd, 24, pe)
    if coff[:4] != b"PE\0\0":
        raise src.error(f"an MZ file without a PE signature at {pe:#x}", HINT_CORRUPT)
    count, = struct.unpack_from("<H", coff, 6)
    optional, = struct.unpack_from("<H", coff, 20)
    table = pe + 24 + optional
    src.need(table, count * _PE_SECTION_SIZE, f"the PE section table ({count} sections)")
    raw = _pread(src.fd, count * _PE_SECTION_SIZE, table)
    sections = []
    for i in range(count):
        name, vsize, _, rsize, rptr = _PE_SECTION.unpack_from(raw, i * _PE_SECTION_SIZE)
        canonical = _PE_NAMES.get(name.rstrip(b"\0"))
        if canonical is None:
            continue
        # raw data is padded to the file alignment; past VirtualSize it is not the section's
        size = min(vsize, rsize) if vsize else rsize
        sections.append((canonical, 1, rptr, size))
    return sections


def _elf_sections(src: _Window, head: bytes) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) of every section."""
    src.need(0, 64, "the ELF header")
    if head[4] != 2 or head[5] != 1:
        raise src.error(f"ELF class {head[4]} / data encoding {head[5]}: only 64-bit little-endian ELF holds CUDA "
                        "device code farm builds", "build for linux_x86_64 or linux_aarch64")
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shoff == 0:
        return []  # no section table: nothing names a fatbin section
    if shentsize < 0x40:
        raise src.error(f"ELF section header size {shentsize} < 64")
    src.need(shoff, shentsize, "the ELF section table")
    if shnum == 0 or shstrndx == 0xFFFF:  # SHN_XINDEX convention: the real values live in section 0
        first = _pread(src.fd, 0x40, shoff)
        if shnum == 0:
            shnum, = struct.unpack_from("<Q", first, 0x20)
        if shstrndx == 0xFFFF:
            shstrndx, = struct.unpack_from("<I", first, 0x28)
    src.need(shoff, shnum * shentsize, f"the ELF section table ({shnum} sections)")
    table = _pread(src.fd, shnum * shentsize, shoff)
    # name, type, (flags and address skipped) offset, size of each section
    raw = [struct.unpack_from("<II16xQQ", table, i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        raise src.error(f"ELF section name table index {shstrndx} >= section count {shnum}")
    _, _, str_off, str_size = raw[shstrndx]
    src.need(str_off, str_size, "the ELF section name table")
    names = _pread(src.fd, str_size, str_off)
    sections = []
    for name_off, stype, offset, size in raw:
        if name_off >= str_size:
            raise src.error(f"ELF section name offset {name_off} outside the name table")
        end = names.find(b"\0", name_off)
        sections.append((names[name_off : end if end != -1 else None].decode("latin-1"), stype, offset, size))
    return sections


# --------------------------------------------------------------------------------------------
# fatbin
# --------------------------------------------------------------------------------------------
def _decode(code: int, arch: int, flags: int, where: str, src: _Window) -> Decoded:
    kind = _KIND_CODES.get(code)
    if kind is None:
        raise src.error(f"{where}: unknown entry kind {code} (known: 1 PTX, 2 cubin, 8 LTO-IR)", _HINT_NEWER)
    if arch < 10 or arch > 999:
        raise src.error(f"{where}: implausible arch number {arch}")
    a, f = bool(flags & _FLAG_ARCH_SPECIFIC), bool(flags & _FLAG_FAMILY)
    if a and f:
        raise src.error(f"{where}: flags {flags:#x} mark the entry both 'a' and 'f'")
    lz4, zstd = bool(flags & _FLAG_LZ4), bool(flags & _FLAG_ZSTD)
    if lz4 and zstd:
        raise src.error(f"{where}: flags {flags:#x} mark the entry both LZ4 and zstd")
    variant = "a" if a else "f" if f else ""
    return kind, arch, variant, LZ4 if lz4 else ZSTD if zstd else NONE, entry_name(kind, arch, variant)


# (kind code, arch, flags) -> Decoded: a library repeats a few dozen combinations thousands of
# times, so each is validated and built once per read (flags whole: masking them costs more than
# the few extra combinations of bits that mean nothing here).
_Cache = dict[tuple[int, int, int], Decoded]


def _where(section: str, number: int, fatbin: int, entry: int | None = None, pos: int = 0) -> str:
    """``.nv_fatbin fatbin 3 at 0x1f40, entry 2 at 0x2000``: built only for an error message."""
    where = f"{section} fatbin {number} at {fatbin:#x}"
    return where if entry is None else f"{where}, entry {entry} at {pos:#x}"


def _bad_entry(src: _Window, where: str, end: int, header_size: int, payload_size: int) -> BinaryFormatError:
    if header_size < ENTRY_MIN:
        return src.error(f"{where}: entry header size {header_size} < {ENTRY_MIN}")
    return src.error(f"{where}: entry of {header_size} + {payload_size} bytes runs past the end of its fatbin "
                     f"at {end:#x}")


def _not_a_header(src: _Window, name: str, number: int, pos: int, end: int) -> int:
    """Where the next fatbin header starts after alignment padding at ``pos``; raises when the bytes
    at ``pos`` are neither padding nor a fatbin header."""
    buf, i = src.get(pos, min(_FATBIN_HEADER.size, end - pos))
    head = buf[i : i + _FATBIN_HEADER.size]
    if head[:1] == b"\0":  # alignment padding, then the next header: realign on the first non-zero byte
        return _skip_padding(src, pos, end)
    label = _where(name, number, pos)
    if len(head) < _FATBIN_HEADER.size:
        raise src.error(f"{label}: truncated fatbin header ({end - pos} bytes left)")
    magic, = struct.unpack_from("<I", head)
    raise src.error(f"{label}: bad fatbin magic {magic:#010x} (expected {FATBIN_MAGIC:#010x})")


def _skip_padding(src: _Window, pos: int, end: int) -> int:
    """The first non-zero byte at or after ``pos`` (``end`` when there is none)."""
    while pos < end:
        chunk = _pread(src.fd, min(4096, end - pos), pos)
        if not chunk:
            raise src.error(f"truncated while reading padding at offset {pos:#x}")
        stripped = len(chunk) - len(chunk.lstrip(b"\0"))
        if stripped < len(chunk):
            return pos + stripped
        pos += len(chunk)
    return end


def _read_section(src: _Window, name: str, stype: int, offset: int, size: int, decoded: _Cache) -> list[RawFatbin]:
    if stype == _SHT_NOBITS:
        raise src.error(f"section {name} has no data in the file (SHT_NOBITS)")
    src.need(offset, size, f"section {name}")
    fatbins: list[RawFatbin] = []
    pos, end = offset, offset + size
    header = _FATBIN_HEADER.size
    unpack_header, unpack_entry = _FATBIN_HEADER.unpack_from, _ENTRY.unpack_from
    # One loop over every fatbin header and entry header of the section: a large library has 8,000.
    # The window is inlined: buf holds the file's bytes from `base` on (offsets only grow, so a
    # header before `base` is never asked for), `full` is the last offset whose entry header lies
    # wholly in it, and `payload`, that of the entry just read (0 after a fatbin header), picks the
    # next read's size. Each distinct entry description is validated once (`decoded`), and
    # error messages are built only on the way out.
    fd, pread, entry_min = src.fd, _pread, ENTRY_MIN
    near, alone, large = max(ENTRY_MIN, _WINDOW), max(ENTRY_MIN, _ALONE), _LARGE
    buf, base, full, payload = b"", 0, -1, 0
    while pos < end:
        if end - pos < header:  # padding at the end of the section, or truncation
            pos = _not_a_header(src, name, len(fatbins) + 1, pos, end)
            continue
        if pos + header > base + len(buf):
            buf, base = pread(fd, near if payload < large else alone, pos), pos
            full = base + len(buf) - ENTRY_MIN
            if len(buf) < header:  # the bounds were checked against the size: the file shrank
                raise src.truncated(pos, header)
        magic, version, header_size, body_size = unpack_header(buf, pos - base)
        if magic != FATBIN_MAGIC:
            pos = _not_a_header(src, name, len(fatbins) + 1, pos, end)
            continue
        if version != 1 or header_size < header:
            raise src.error(f"{_where(name, len(fatbins) + 1, pos)}: unsupported fatbin header (version {version}, "
                            f"header size {header_size})", _HINT_NEWER)
        at, body_end = pos + header_size, pos + header_size + body_size
        if body_end > end:
            raise src.error(f"{_where(name, len(fatbins) + 1, pos)}: declares {body_size} bytes of entries but its "
                            f"section ends {end - at} bytes after the header")
        entries: list[RawEntry] = []
        append, last = entries.append, body_end - ENTRY_MIN  # the last offset an entry header fits at
        payload = 0
        while at <= last:
            if at > full:
                buf, base = pread(fd, near if payload < large else alone, at), at
                full = base + len(buf) - ENTRY_MIN
                if full < at:
                    raise src.truncated(at, ENTRY_MIN)
            code, size, payload, arch, flags, uncompressed = unpack_entry(buf, at - base)
            known = decoded.get((code, arch, flags))
            if known is None:
                where = _where(name, len(fatbins) + 1, pos, len(entries) + 1, at)
                known = decoded[code, arch, flags] = _decode(code, arch, flags, where, src)
            following = at + size + payload
            if size < entry_min or following > body_end:
                where = _where(name, len(fatbins) + 1, pos, len(entries) + 1, at)
                raise _bad_entry(src, where, body_end, size, payload)
            append((known, at, size, payload, uncompressed))
            at = following
        if at < body_end:
            raise src.error(f"{_where(name, len(fatbins) + 1, pos, len(entries) + 1, at)}: truncated entry header "
                            f"({body_end - at} bytes left of the fatbin, a header needs {ENTRY_MIN})")
        fatbins.append((name, pos, entries))
        pos = body_end
    return fatbins


def scan(path: str | os.PathLike[str]) -> list[RawFatbin]:
    """Every fatbin of ``path`` (``.nv_fatbin`` and ``__nv_relfatbin``), in file order, as tuples.

    Reads only the ELF section table and the fatbin and entry headers, so time and memory do not
    grow with payload size. An ELF file without device code gives ``[]``; anything malformed raises
    :class:`~farm.errors.BinaryFormatError` naming the file, the offset and what is wrong.
    """
    where = os.fspath(path)
    try:  # non-blocking, so that a FIFO named by mistake is refused below instead of hanging
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise BinaryFormatError("no such file", where=where, hint="check the path") from None
    except OSError as exc:
        raise BinaryFormatError(f"cannot be opened: {exc.strerror}", where=where,
                                hint="check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise BinaryFormatError("is a directory, not a binary", where=where)
        if not stat.S_ISREG(info.st_mode):
            raise BinaryFormatError("not a regular file", where=where, hint="name the binary itself")
        size = info.st_size
        if size == 0:
            raise BinaryFormatError("empty file", where=where, hint=HINT_CORRUPT)
        src = _Window(fd, size, where)
        decoded: _Cache = {}
        sections = sorted((s for s in _sections(src) if s[0] in FATBIN_SECTIONS), key=lambda s: s[2])
        return [fatbin for section in sections for fatbin in _read_section(src, *section, decoded)]
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """``python -m farm.binary.fatbinscan FILE...``: one line per entry, for scripts.

    Columns: file, section, fatbin offset, kind, image name, compression (tab-separated).
    """
    code = 0
    for name in sys.argv[1:] if argv is None else argv:
        try:
            fatbins = scan(name)
        except BinaryFormatError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = max(code, exc.exit_code)
            continue
        lines = []
        tails: dict[Decoded, str] = {}  # "kind, name, compression": a few dozen distinct ones
        for section, offset, entries in fatbins:
            head = f"{name}\t{section}\t{offset:#x}\t"
            for decoded, *_ in entries:
                tail = tails.get(decoded)
                if tail is None:
                    tail = tails[decoded] = f"{decoded[0]}\t{decoded[4]}\t{decoded[3]}\n"
                lines.append(head + tail)
        sys.stdout.write("".join(lines))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
