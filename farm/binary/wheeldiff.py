"""What differs between two wheels: the members, and inside a member what a reviewer reads.

A rebuild is the same wheel when the files are the same bytes. When they are not, this says where:
a member only one wheel has; a member whose bytes differ, and inside it the ELF sections of a
shared object (by name: size and the first differing offset), the JSON keys of a JSON file
(``_build_info.json``: which fields), the lines of a text file (``METADATA``, ``RECORD``); or,
every member being the same, the zip's own fields (order, timestamps, permissions, compression).
Reading is bounded: members through :class:`~farm.binary.wheelfile.SafeWheel`, a shared object
compared section by section from temporary files, a JSON or text member only up to
:data:`TEXT_CAP`, and at most :data:`MAX_DETAILS` details per member.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.binary.wheelfile import SafeWheel
from farm.errors import FarmError
from farm.fsutil import sha256_file

MAX_DETAILS = 20
TEXT_CAP = 16 << 20  # a JSON or text member larger than this is compared by its bytes alone
_CHUNK = 1 << 20


@dataclass(frozen=True)
class MemberDiff:
    """One member that differs: ``what`` (``only in A``, ``only in B``, ``content``, ``zip entry``) and the details."""

    name: str
    what: str
    details: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"member": self.name, "what": self.what, "details": list(self.details)}


@dataclass(frozen=True)
class WheelDiff:
    a: str
    b: str
    a_sha256: str
    b_sha256: str
    members: tuple[MemberDiff, ...]

    @property
    def identical(self) -> bool:
        return self.a_sha256 == self.b_sha256

    def to_json(self) -> dict[str, Any]:
        return {"identical": self.identical, "a": {"wheel": self.a, "sha256": self.a_sha256},
                "b": {"wheel": self.b, "sha256": self.b_sha256}, "differences": [m.to_json() for m in self.members]}

    def render(self) -> list[str]:
        if self.identical:
            return [f"identical: sha256 {self.a_sha256}"]
        lines = [f"differ: {self.a} has sha256 {self.a_sha256}, {self.b} has {self.b_sha256}"]
        for m in self.members:
            lines.append(f"  {m.name}: {m.what}")
            lines += [f"    {d}" for d in m.details]
        return lines


def _capped(details: list[str]) -> tuple[str, ...]:
    if len(details) <= MAX_DETAILS:
        return tuple(details)
    return (*details[:MAX_DETAILS], f"... and {len(details) - MAX_DETAILS} more")


# -- ELF ------------------------------------------------------------------------------------------
def _sections(path: Path) -> dict[str, tuple[int, int]] | None:
    """Name -> (file offset, size) of each section with bytes in the file; None: not a 64-bit LE ELF."""
    with path.open("rb") as fh:
        head = fh.read(64)
        if head[:6] != b"\x7fELF\x02\x01":
            return None
        size = path.stat().st_size
        shoff, = struct.unpack_from("<Q", head, 0x28)
        entsize, count, names = struct.unpack_from("<HHH", head, 0x3A)
        if shoff == 0 or entsize < 64 or shoff + count * entsize > size or names >= count:
            return None
        fh.seek(shoff)
        table = fh.read(count * entsize)
        heads = [struct.unpack_from("<IIQQQQ", table, i * entsize) for i in range(count)]
        _, _, _, _, str_off, str_size = heads[names]
        if str_off + str_size > size or str_size > TEXT_CAP:
            return None
        fh.seek(str_off)
        strings = fh.read(str_size)
    out: dict[str, tuple[int, int]] = {}
    for index, (name, kind, _, _, offset, length) in enumerate(heads):
        end = strings.find(b"\0", name)
        label = strings[name:end if end >= 0 else None].decode("latin-1") or f"[{index}]"
        if kind != 8 and offset + length <= size:  # SHT_NOBITS (.bss) has no bytes in the file
            out[label if label not in out else f"{label}[{index}]"] = (offset, length)
    return out


def _first_difference(fa: Any, fb: Any, a: tuple[int, int], b: tuple[int, int]) -> int | None:
    """The offset in the section where the bytes first differ (None: same bytes)."""
    fa.seek(a[0])
    fb.seek(b[0])
    done = 0
    while done < min(a[1], b[1]):
        n = min(_CHUNK, min(a[1], b[1]) - done)
        x, y = fa.read(n), fb.read(n)
        if x != y:
            return done + next(i for i in range(n) if x[i] != y[i])
        done += n
    return None if a[1] == b[1] else done


def elf_differences(a: Path, b: Path) -> list[str] | None:
    """Each section that differs (only in one file, or other bytes: sizes and the first differing
    offset); None when either file is not an ELF farm reads."""
    sa, sb = _sections(a), _sections(b)
    if sa is None or sb is None:
        return None
    out = [f"section {n}: only in A" for n in sa if n not in sb]
    out += [f"section {n}: only in B" for n in sb if n not in sa]
    with a.open("rb") as fa, b.open("rb") as fb:
        for name in (n for n in sa if n in sb):
            at = _first_difference(fa, fb, sa[name], sb[name])
            if at is not None:
                x, y = sa[name][1], sb[name][1]
                sizes = f"{x} bytes" if x == y else f"{x} -> {y} bytes"
                strings = _strings_apart(fa, fb, sa[name], sb[name]) if name.endswith(_STRING_SECTIONS) else ""
                out.append(f"section {name}: {sizes}, first difference at +{at:#x}{strings}")
    return out


# The string tables: where a path the build did not map, or a temporary name, shows as itself.
_STRING_SECTIONS = ("str", "strtab")  # .debug_str, .debug_line_str, .dynstr; .strtab
_SHOWN = 3


def _strings_apart(fa: Any, fb: Any, a: tuple[int, int], b: tuple[int, int]) -> str:
    """The first strings only one of two string tables holds (``; only in A: ...``), or ""."""
    if max(a[1], b[1]) > TEXT_CAP:
        return ""
    fa.seek(a[0])
    fb.seek(b[0])
    x, y = fa.read(a[1]).split(b"\0"), fb.read(b[1]).split(b"\0")
    out = ""
    for label, mine, other in (("A", x, y), ("B", y, x)):
        theirs = set(other)
        only = [s.decode("latin-1")[:200] for s in mine if s and s not in theirs][:_SHOWN]
        if only:
            out += f"; only in {label}: " + ", ".join(repr(s) for s in only)
    return out


# -- JSON and text --------------------------------------------------------------------------------
def _json_paths(x: Any, y: Any, path: str = "") -> Iterator[str]:
    if isinstance(x, dict) and isinstance(y, dict):
        for key in list(x) + [k for k in y if k not in x]:
            where = f"{path}.{key}" if path else str(key)
            if key not in y:
                yield f"{where}: only in A"
            elif key not in x:
                yield f"{where}: only in B"
            else:
                yield from _json_paths(x[key], y[key], where)
    elif x != y:
        def short(v: Any) -> str:
            text = json.dumps(v)
            return text if len(text) <= 80 else text[:77] + "..."
        yield f"{path or '(the document)'}: {short(x)} -> {short(y)}"


def _text_lines(x: str, y: str) -> list[str]:
    xs, ys = x.splitlines(), y.splitlines()
    seen_a, seen_b = set(xs), set(ys)
    only_a = [f"- {line}" for line in xs if line not in seen_b]
    only_b = [f"+ {line}" for line in ys if line not in seen_a]
    return (only_a + only_b) or ["the same lines, in another order or with other line ends"]


def _content(wa: SafeWheel, wb: SafeWheel, name: str) -> list[str]:
    ia, ib = wa.zip.getinfo(name), wb.zip.getinfo(name)
    if name.endswith((".json", "/METADATA", "/RECORD", "/WHEEL", ".txt", ".py")) \
            and max(ia.file_size, ib.file_size) <= TEXT_CAP:
        x, y = wa.read(name), wb.read(name)
        if name.endswith(".json"):
            try:
                return list(_json_paths(jsonread.loads(x), jsonread.loads(y))) or ["the same JSON, other bytes"]
            except (ValueError, FarmError):
                pass
        return _text_lines(x.decode("utf-8", "replace"), y.decode("utf-8", "replace"))
    with wa.extracted(name) as pa, wb.extracted(name) as pb:
        elf = elf_differences(pa, pb)
        if elf is not None:
            return elf or ["every section the same, other bytes between them"]
        with pa.open("rb") as fa, pb.open("rb") as fb:
            at = _first_difference(fa, fb, (0, ia.file_size), (0, ib.file_size))
    return [f"{ia.file_size} -> {ib.file_size} bytes, first difference at {at:#x}"]


def _entry(ia: Any, ib: Any) -> list[str]:
    return [f"{label}: {getattr(ia, field)!r} -> {getattr(ib, field)!r}"
            for field, label in (("date_time", "timestamp"), ("external_attr", "permissions"),
                                 ("compress_type", "compression"), ("create_system", "system"))
            if getattr(ia, field) != getattr(ib, field)]


def compare_wheels(a: Path, b: Path) -> WheelDiff:
    """Compare wheel ``a`` (the original) with wheel ``b`` (the rebuild)."""
    sha_a, sha_b = sha256_file(a), sha256_file(b)
    if sha_a == sha_b:
        return WheelDiff(str(a), str(b), sha_a, sha_b, ())
    diffs: list[MemberDiff] = []
    with SafeWheel(a) as wa, SafeWheel(b) as wb:
        names_a, names_b = wa.names(), wb.names()
        in_a, in_b = set(names_a), set(names_b)
        diffs += [MemberDiff(n, "only in A") for n in names_a if n not in in_b]
        diffs += [MemberDiff(n, "only in B") for n in names_b if n not in in_a]
        common = [n for n in names_a if n in in_b]
        for name in common:
            ia, ib = wa.zip.getinfo(name), wb.zip.getinfo(name)
            if not (ia.is_dir() and ib.is_dir()) and (ia.file_size != ib.file_size
                                                      or wa.sha256(name) != wb.sha256(name)):
                diffs.append(MemberDiff(name, "content", _capped(_content(wa, wb, name))))
            elif entry := _entry(ia, ib):
                diffs.append(MemberDiff(name, "zip entry", _capped(entry)))
        if [n for n in names_b if n in in_a] != common:
            diffs.append(MemberDiff("(the archive)", "member order", ("the same members in another order",)))
    if not diffs:
        same = "every member the same: the zip's headers, comments or compression differ"
        diffs.append(MemberDiff("(the archive)", "zip structure", (same,)))
    return WheelDiff(str(a), str(b), sha_a, sha_b, tuple(diffs))
