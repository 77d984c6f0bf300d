"""Which source file each translation unit's fatbin came from, read from the ``.so`` itself.

nvcc puts a TU's fatbin in ``.nv_fatbin`` under the local symbol ``fatbinData``, and the host
object it compiles is named after the source: its ``STT_FILE`` symbol is
``tmpxft_<id>-<n>_<stem>[.compute_NN].cudafe1.cpp``, or ``<stem>.cudafe1.cpp`` as farm's
launchers name it in every build (``x_0.cudafe1.cpp``, sccache's name, carries no stem). The
linker keeps each object's local symbols together after its file symbol, so the symbol table
pairs every fatbin (by address) with the stem of the ``.cu`` file it was compiled from. This
holds whatever the link order, static archives included, and needs nothing recorded at build
time; it needs the static symbol table, which a stripped ``.so`` has lost (the caller then fails
closed). A stem is the source's basename without
``.cu``: two sources of one name in different folders are told apart by nothing in the binary.
"""

from __future__ import annotations

import os
import re
import struct

from farm.errors import BinaryFormatError

_SHT_SYMTAB = 2
_STT_FILE = 4
_SYM = struct.Struct("<IBBHQQ")
_MAX_SYMTAB = 1 << 30  # a bound on what is read: vLLM's _C.so has a few MB of symbols
_HOST_OBJECT = re.compile(r"(?P<nvcc>tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_)?(?P<stem>.+?)(?:\.compute_\d+[af]?)?"
                          r"\.cudafe1\.cpp")
_SCCACHE_NAME = re.compile(r"x_\d+")


def stem_of(file_symbol: str) -> str | None:
    """The source stem nvcc's host object name carries (``gemm`` for ``tmpxft_..._gemm.cudafe1.cpp``
    and ``gemm.cudafe1.cpp``; None for sccache's ``x_0.cudafe1.cpp``)."""
    m = _HOST_OBJECT.fullmatch(os.path.basename(file_symbol))
    if m is None or (m["nvcc"] is None and _SCCACHE_NAME.fullmatch(m["stem"])):
        return None
    return m["stem"]


def source_stem(path: str) -> str:
    """What a source path leaves in the binary: its basename without the ``.cu`` suffix."""
    return os.path.basename(path).removesuffix(".cu")


def tu_sources(path: str | os.PathLike[str]) -> dict[int, str] | None:
    """File offset of each TU's fatbin -> the stem of its source; ``None``: no symbol table
    (stripped). Raises :class:`~farm.errors.BinaryFormatError` on a malformed table."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        data_size = os.fstat(f.fileno()).st_size

        def read(offset: int, size: int, what: str) -> bytes:
            if offset < 0 or size < 0 or offset + size > data_size:
                raise BinaryFormatError(f"{name}: {what} at {offset:#x}+{size:#x} runs past the end of the file",
                                        where=name, hint="the file is truncated or damaged: rebuild it")
            f.seek(offset)
            return f.read(size)

        head = read(0, 64, "the ELF header")
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None  # not a 64-bit little-endian ELF (a PE .pyd): no symbol table to read
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        if shoff == 0 or shnum == 0 or shentsize < 0x40:
            return None
        table = read(shoff, shnum * shentsize, "the ELF section table")
        # type, address, offset, size, link and entry size of each section
        sections = [struct.unpack_from("<4xI8xQQQI12xQ", table, i * shentsize) for i in range(shnum)]
        symtab = next((s for s in sections if s[0] == _SHT_SYMTAB), None)
        if symtab is None:
            return None
        _, _, sym_off, sym_size, link, entsize = symtab
        if entsize != _SYM.size or link >= shnum or sym_size > _MAX_SYMTAB or sections[link][3] > _MAX_SYMTAB:
            raise BinaryFormatError(f"{name}: unexpected ELF symbol table (entry size {entsize}, "
                                    f"{sym_size} bytes, string table {link})", where=name,
                                    hint="the file is damaged: rebuild it")
        symbols = read(sym_off, sym_size, "the ELF symbol table")
        strings = read(sections[link][2], sections[link][3], "the ELF symbol names")

    def text(offset: int) -> str:
        end = strings.find(b"\0", offset)
        return strings[offset: end if end != -1 else None].decode("latin-1")

    found: dict[int, str] = {}
    stem: str | None = None
    for st_name, info, _, shndx, value, _ in _SYM.iter_unpack(symbols):
        if info & 0xF == _STT_FILE:
            stem = stem_of(text(st_name))
        elif stem is not None and 0 < shndx < len(sections) and text(st_name) == "fatbinData":
            _, addr, offset, _, _, _ = sections[shndx]
            found[value - addr + offset] = stem
    return found
