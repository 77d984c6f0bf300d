"""The CUDA toolkit that made a binary's device code, as the binary itself records it.

Three records, each written by the compiler, none by the build's configuration:

- every cubin (an ELF object for one GPU) carries a ``.note.nv.cuinfo`` note whose descriptor
  holds the toolkit version (``130`` for 13.0; ``cuobjdump -elf`` prints it as ``toolkit=13.0``)
  and the SASS arch it was made for;
- every PTX entry's fatbin header holds the PTX ISA version (9.0 for CUDA 13.0, 8.x for CUDA
  12.x), and the PTX text itself starts with ``.version 9.0``;
- (LTO-IR says nothing farm reads.)

A wheel labelled ``+cu128`` whose cubins say 13.0 was built by CUDA 13.0, whatever its name and
provenance say: the postbuild assertion and the upload gate compare these records with the
cell's CUDA line. Reading them means reading payloads (a raw cubin is read whole, a compressed
one is decompressed within a limit), so it runs for the assertion's extensions only, never for a
listing. While a cubin is read its ELF structure is checked (header, section table and every
section inside the payload, note records inside their section, the note's arch equal to the
fatbin entry's): a payload whose structure is damaged is refused, even where cuobjdump lists it.
Flipped bytes inside a section's contents (machine code, constants) carry no checksum in the
format and cannot be told from real code by any reader.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.binary.fatbin import Compression, Entry, EntryKind, Fatbin, read_payload
from farm.errors import BinaryFormatError

EM_CUDA = 190  # e_machine of every cubin
_SHT_STRTAB, _SHT_NOTE, _SHT_NOBITS = 3, 7, 8
_NT_CUINFO = 1000  # .note.nv.cuinfo: u16 note version, u16 sm, u32 toolkit version (major * 10 + minor)
_NOTE_OWNER = b"NVIDIA Corp\0"
_PTX_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)\s*$", re.MULTILINE)
_LINE = re.compile(r"\d{1,3}\.\d{1,3}")
_HINT = "the device code is damaged or forged: rebuild the wheel from source"
# The PTX ISA major of each CUDA major: ISA 7.x came with CUDA 11, 8.x with 12, 9.x with 13.
_ISA_MAJOR_OFFSET = 4


def cuda_major_of_isa(isa: str) -> int:
    """The CUDA major that writes PTX ISA ``isa`` (``"9.0"`` -> 13)."""
    return int(isa.partition(".")[0]) + _ISA_MAJOR_OFFSET


@dataclass(frozen=True)
class MadeBy:
    """What one extension's device code says about the toolkit that compiled it: CUDA version
    -> number of cubins recording it, PTX ISA version -> number of PTX entries, and how many
    entries record nothing farm can read (LTO-IR, LZ4-compressed cubins, cubins without the note)."""

    cubins: Mapping[str, int]
    ptx: Mapping[str, int]
    unread: int = 0

    def describe(self) -> str:
        parts = [f"{n} cubin(s) made by CUDA {v}" for v, n in sorted(self.cubins.items())]
        parts += [f"{n} PTX entr{'y' if n == 1 else 'ies'} of ISA {v} (CUDA {cuda_major_of_isa(v)}.x)"
                  for v, n in sorted(self.ptx.items())]
        return ", ".join(parts) or "nothing that records its toolkit"

    def against(self, cuda: str) -> str | None:
        """Why this device code is not the CUDA line ``cuda`` (``"12.8"``), or None when it is."""
        if not _LINE.fullmatch(cuda):
            return f"the cell's CUDA line {cuda!r} is not a line (X.Y), so no device code can be shown to match it"
        major = int(cuda.partition(".")[0])
        other = sorted(v for v in self.cubins if v != cuda)
        wrong_isa = sorted(v for v in self.ptx if cuda_major_of_isa(v) != major)
        if other or wrong_isa:
            return f"its device code holds {self.describe()}; the cell's CUDA line is {cuda}"
        if not (self.cubins or self.ptx):
            return (f"its device code records no toolkit version ({self.unread} entr"
                    f"{'y' if self.unread == 1 else 'ies'} farm cannot read it from), so it cannot be "
                    f"shown to come from CUDA {cuda}")
        return None

    def to_json(self) -> dict[str, object]:
        return {"cubin": dict(sorted(self.cubins.items())), "ptx_isa": dict(sorted(self.ptx.items())),
                "unread": self.unread}


def _bad(where: str, message: str) -> BinaryFormatError:
    return BinaryFormatError(message, where=where, hint=_HINT)


def cubin_facts(cubin: bytes, *, where: str, arch: int) -> str | None:
    """Check a cubin's ELF structure and return the toolkit version its ``.note.nv.cuinfo`` records
    (``"13.0"``; None when it has no such note). ``arch``: the SASS number its fatbin entry
    declares, which the note must repeat. Raises :class:`BinaryFormatError` for what is provably
    not a well-formed cubin."""
    size = len(cubin)
    if size < 64 or cubin[:4] != b"\x7fELF":
        raise _bad(where, f"a cubin entry that is not an ELF object (starts with {cubin[:8]!r})")
    if cubin[4] != 2 or cubin[5] != 1:
        raise _bad(where, f"a cubin of ELF class {cubin[4]} / encoding {cubin[5]} (cubins are 64-bit little-endian)")
    machine, = struct.unpack_from("<H", cubin, 0x12)
    if machine != EM_CUDA:
        raise _bad(where, f"a cubin for ELF machine {machine}, not CUDA ({EM_CUDA})")
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", cubin, 0x36)
    if phnum and (phentsize < 56 or phoff + phnum * phentsize > size):
        raise _bad(where, f"the cubin's program headers ({phnum} at {phoff:#x}) run past its {size} bytes")
    if shnum == 0:
        raise _bad(where, "a cubin without sections")
    if shentsize < 64 or shoff + shnum * shentsize > size:
        raise _bad(where, f"the cubin's section table ({shnum} x {shentsize} at {shoff:#x}) runs past its {size} bytes")
    if shstrndx >= shnum:
        raise _bad(where, f"the cubin's section name table index {shstrndx} is not one of its {shnum} sections")
    sections = []
    for i in range(shnum):
        name, stype, offset, length = struct.unpack_from("<II16xQQ", cubin, shoff + i * shentsize)
        if stype != _SHT_NOBITS and i and offset + length > size:
            raise _bad(where, f"cubin section {i} ({offset:#x} + {length} bytes) runs past its {size} bytes")
        sections.append((name, stype, offset, length))
    _, str_type, _, str_size = sections[shstrndx]
    if str_type != _SHT_STRTAB:
        raise _bad(where, f"the cubin's section name table (section {shstrndx}) is of type {str_type}, not strings")
    toolkit = None
    for i, (name_off, stype, offset, length) in enumerate(sections[1:], 1):
        if name_off >= str_size:
            raise _bad(where, f"cubin section {i}'s name offset {name_off} is outside its name table")
        if stype != _SHT_NOTE:
            continue
        pos, end = offset, offset + length
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", cubin, pos)
            name_end = pos + 12 + namesz
            desc = name_end + (-namesz % 4)
            after = desc + descsz + (-descsz % 4)
            if desc + descsz > end:
                raise _bad(where, f"a note in cubin section {i} ({namesz} + {descsz} bytes) runs past the section")
            if ntype == _NT_CUINFO and cubin[pos + 12 : name_end] == _NOTE_OWNER and descsz >= 8:
                _, sm, version = struct.unpack_from("<HHI", cubin, desc)
                if sm != arch:
                    raise _bad(where, f"the cubin's .note.nv.cuinfo says sm_{sm}, its fatbin entry sm_{arch}")
                found = f"{version // 10}.{version % 10}"
                if toolkit not in (None, found):
                    raise _bad(where, f"the cubin records two toolkits ({toolkit} and {found})")
                toolkit = found
            pos = after
    return toolkit


def read_made_by(path: Path | str, fatbins: Iterable[Fatbin]) -> MadeBy:
    """What the entries of ``fatbins`` (read from ``path``) record about their toolkit. Each
    payload is read once, within :func:`read_payload`'s limit."""
    cubins: Counter[str] = Counter()
    ptx: Counter[str] = Counter()
    unread = 0
    with open(path, "rb") as fh:
        for fatbin in fatbins:
            for entry in fatbin.entries:
                where = (f"{path}: {fatbin.section} fatbin at {fatbin.offset:#x}, {entry.name} entry at "
                         f"{entry.offset:#x}")
                if entry.kind is EntryKind.CUBIN:
                    data = read_payload(path, entry, fh=fh)
                    version = None if data is None else cubin_facts(data, where=where, arch=entry.target.number)
                    if version is None:
                        unread += 1
                    else:
                        cubins[version] += 1
                elif entry.kind is EntryKind.PTX:
                    ptx[_ptx_isa(path, entry, fh, where)] += 1
                else:
                    unread += 1
    return MadeBy(dict(cubins), dict(ptx), unread)


def _ptx_isa(path: Path | str, entry: Entry, fh: BinaryIO, where: str) -> str:
    """The PTX ISA an entry's header declares, checked against the ``.version`` of its text
    where the payload can be read."""
    fh.seek(entry.offset + 0x18)
    minor, major = struct.unpack("<HH", fh.read(4))
    isa = f"{major}.{minor}"
    text = read_payload(path, entry, fh=fh) if entry.compressed is not Compression.LZ4 else None
    if text is not None:
        m = _PTX_VERSION.search(text, 0, 65536)
        if m is None:
            raise _bad(where, "a PTX entry without a .version directive")
        said = f"{int(m[1])}.{int(m[2])}"
        if said != isa:
            raise _bad(where, f"the PTX says .version {said}, its fatbin entry header ISA {isa}")
    return isa
