"""Small ELF shared objects holding fatbins, written byte by byte in the layout nvcc emits.

The fast tier's counterpart to the nvcc fixtures (tests/support/cudafix.py): each verdict rule of the
assertion and the wheel judge gets a binary of exactly the shape the rule is about (a missing or
extra target, PTX, one translation unit short, an nvcc device-link stub, a relocatable fatbin),
built in microseconds. The layout is the one the native reader checks: a 64-bit little-endian
ELF whose ``.nv_fatbin`` / ``__nv_relfatbin`` sections hold fatbins (magic, version 1, header
size 16, body size), each a run of 64-byte entry headers (kind, header size, payload size,
arch at 28, flags at 40) followed by their payloads. A cubin payload is itself an ELF: one with a
``.text.<kernel>`` section holds code; one with no content section is what an nvcc device link
adds (a stub).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.binary.fatbinscan import EXECUTABLE_SECTION, FATBIN_MAGIC, RELOCATABLE_SECTION

__all__ = ["EXECUTABLE_SECTION", "RELOCATABLE_SECTION", "elf", "fatbin", "noted_cubin", "noted_elf", "noted_extension",
           "ptx", "sass", "shared_object"]

_KIND = {"compute": 1, "sm": 2}
_FLAG_ARCH_SPECIFIC = 0x100000
_FLAG_FAMILY = 0x200000


def elf(sections: Sequence[tuple[str, bytes]], *, kinds: dict[str, tuple[int, int, int]] | None = None) -> bytes:
    """A 64-bit little-endian ELF holding ``sections`` (name, bytes) and its section name table;
    ``kinds``: section name -> (type, link, entry size) where not PROGBITS (a symbol table)."""
    names = b"\0.shstrtab\0"
    offsets = []
    for name, _ in sections:
        offsets.append(len(names))
        names += name.encode() + b"\0"
    body = bytearray(64)
    placed = []
    for data in (names, *(d for _, d in sections)):
        body += b"\0" * (-len(body) % 16)
        placed.append((len(body), len(data)))
        body += data
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    table = bytes(64)  # section 0: SHN_UNDEF
    table += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, *placed[0], 0, 0, 1, 0)  # .shstrtab
    for (name, _), name_off, (offset, size) in zip(sections, offsets, placed[1:], strict=True):
        stype, link, entsize = (kinds or {}).get(name, (1, 0, 0))
        table += struct.pack("<IIQQQQIIQQ", name_off, stype, 2, 0, offset, size, link, 0, 16, entsize)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 2 + len(sections), 1)
    body[:64] = header
    return bytes(body) + table


def cubin(*, code: bool = True) -> bytes:
    """A cubin: with a kernel's ``.text`` section, or (``code=False``) an empty one, as a stub holds."""
    return elf([(".text._Z6kernelv", b"\x00" * 32)] if code else [(".nv.callgraph", b"")])


def _entry(name: str, payload: bytes) -> bytes:
    prefix, _, rest = name.partition("_")
    variant = rest[-1] if rest[-1] in "af" else ""
    number = int(rest[:-1] if variant else rest)
    flags = _FLAG_ARCH_SPECIFIC if variant == "a" else _FLAG_FAMILY if variant == "f" else 0
    payload += b"\0" * (-len(payload) % 8)
    return struct.pack("<HHIQ12xI4x4xQ8xQ", _KIND[prefix], 0, 64, len(payload), number, flags, 0) + payload


def fatbin(targets: Iterable[str], *, stub: bool = False) -> bytes:
    """One fatbin (one translation unit) holding ``targets`` (``sm_80``, ``compute_90``, ``sm_90a``).
    ``stub``: its cubins hold no code, as the fatbin an nvcc device link adds."""
    body = b"".join(_entry(t, cubin(code=not stub) if t.startswith("sm_") else f"// PTX {t}\n".encode())
                    for t in targets)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def _symbols(stems: Sequence[str], starts: Sequence[int], section: int) -> tuple[bytes, bytes]:
    """A symbol table as a link of nvcc objects leaves it: per TU, the host object's file symbol
    (named after the source) and the local ``fatbinData`` at its fatbin."""
    strings = b"\0"
    table = bytes(24)  # symbol 0
    for number, (stem, start) in enumerate(zip(stems, starts, strict=True)):
        for name, info, shndx, value in ((f"tmpxft_0000{number:04x}_00000000-6_{stem}.cudafe1.cpp", 4, 0xFFF1, 0),
                                         ("fatbinData", 0, section, start)):
            table += struct.pack("<IBBHQQ", len(strings), info, 0, shndx, value, 0)
            strings += name.encode() + b"\0"
    return table, strings


def shared_object(path: Path, units: Sequence[Sequence[str]] = (), *, stubs: Sequence[Sequence[str]] = (),
                  relocatable: Sequence[Sequence[str]] = (), sources: Sequence[str] | None = None) -> Path:
    """Write an extension ``.so`` at ``path``: one fatbin per translation unit in ``units``, then the
    device-link ``stubs``, in ``.nv_fatbin``; ``relocatable`` fatbins (``-rdc`` code) in
    ``__nv_relfatbin``. No units at all: a host-only library. ``sources``: each unit's ``.cu`` stem,
    written into a symbol table as nvcc's objects leave it (None: no symbol table, as stripped)."""
    fatbins = [fatbin(u) for u in units]
    starts = [sum(map(len, fatbins[:i])) for i in range(len(fatbins))]
    executable = b"".join(fatbins) + b"".join(fatbin(s, stub=True) for s in stubs)
    sections = [(".text", b"\xc3" * 16)]
    if executable:
        sections.append((EXECUTABLE_SECTION, executable))
    if relocatable:
        sections.append((RELOCATABLE_SECTION, b"".join(fatbin(u) for u in relocatable)))
    kinds = {}
    if sources is not None:
        table, strings = _symbols(sources, starts, 3)  # .nv_fatbin: section 3 (after null, names, .text)
        sections += [(".symtab", table), (".strtab", strings)]
        kinds = {".symtab": (2, len(sections) + 1, 24), ".strtab": (3, 0, 0)}  # link: .strtab's index
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf(sections, kinds=kinds))
    return path


# -- device code that records its toolkit, as nvcc writes it: cubins (EM_CUDA) with their
# .note.nv.cuinfo, PTX with its .version; the entry headers carry the PTX ISA / cubin versions
def noted_elf(sections: list[tuple[str, int, bytes]], *, machine: int = 190) -> bytes:
    """An ELF64 little-endian file: a null section, ``sections`` (name, type, data), a name table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body = bytearray(64)
    headers = [bytes(64)]
    name_at = 1
    for name, stype, data in [*sections, (".shstrtab", 3, names)]:
        while len(body) % 8:
            body.append(0)
        offset = len(body)
        body += data
        header = bytearray(64)
        struct.pack_into("<II", header, 0, name_at if name != ".shstrtab" else names.index(b".shstrtab"), stype)
        struct.pack_into("<QQ", header, 0x18, offset, len(data))
        headers.append(bytes(header))
        name_at += len(name) + 1
    while len(body) % 8:
        body.append(0)
    shoff = len(body)
    body += b"".join(headers)
    body[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    struct.pack_into("<HHI", body, 0x10, 3, machine, 1)
    struct.pack_into("<Q", body, 0x28, shoff)
    struct.pack_into("<HHHHHH", body, 0x34, 64, 0, 0, 64, len(headers), len(headers) - 1)
    return bytes(body)


def _cuinfo(sm: int, toolkit: int) -> bytes:
    return struct.pack("<III", 12, 8, 1000) + b"NVIDIA Corp\0" + struct.pack("<HHI", 2, sm, toolkit)


def noted_cubin(sm: int = 90, toolkit: int = 130) -> bytes:
    return noted_elf([(".note.nv.cuinfo", 7, _cuinfo(sm, toolkit)), (".text.k", 1, b"\x00" * 32)])


def _noted_entry(kind: int, arch: int, payload: bytes, version: tuple[int, int]) -> bytes:
    payload += bytes(-len(payload) % 8)
    header = bytearray(0x40)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 0x40, len(payload))
    struct.pack_into("<HHI", header, 0x18, version[1], version[0], arch)
    struct.pack_into("<Q", header, 0x28, 0x11)  # 64-bit, Linux; stored uncompressed
    return bytes(header) + payload


def noted_extension(tmp_path: Path, *entries: bytes, name: str = "ext.so") -> Path:
    """A host ELF whose .nv_fatbin holds one fatbin of ``entries``."""
    body = b"".join(entries)
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    path = tmp_path / name
    path.write_bytes(noted_elf([(".nv_fatbin", 1, fatbin)], machine=62))
    return path


def ptx(isa: tuple[int, int], arch: int = 90, said: str | None = None) -> bytes:
    version = said or f"{isa[0]}.{isa[1]}"
    text = f"//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version {version}\n.target sm_{arch}\n"
    return _noted_entry(1, arch, text.encode() + b"\0", isa)


def sass(arch: int = 90, toolkit: int = 130, data: bytes | None = None) -> bytes:
    return _noted_entry(2, arch, noted_cubin(arch, toolkit) if data is None else data, (1, 8))
