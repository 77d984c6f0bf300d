"""The toolkit a binary's device code records (farm/binary/madeby.py) and the cubin structure
checks, on binaries constructed here byte by byte in the documented layouts (ELF64, the fatbin
container, the .note.nv.cuinfo note): the values a real nvcc 13.0 writes (note toolkit 130, PTX
ISA 9.0) and their 12.8 counterparts, then damaged ones. Real nvcc builds are in
tests/test_postbuild.py and tests/test_upload_gate.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from farm.binary.archrule import Expected
from farm.binary.assertion import Cause, assert_inspection
from farm.binary.fatbin import read_fatbins
from farm.binary.inspection import Reader, compare_made_by, inspect_file
from farm.binary.madeby import MadeBy, cubin_facts, read_made_by
from farm.errors import BinaryFormatError
from farm.model.arch import ArchList
from tests.support.cudafix import CudaFixtures
from tests.support.fatbinmaker import noted_cubin, noted_elf, noted_extension, ptx, sass


def test_a_cuda_13_build_records_13_0(tmp_path: Path) -> None:
    so = noted_extension(tmp_path, sass(80), sass(90), ptx((9, 0)))
    made = read_made_by(so, read_fatbins(so))
    assert made == MadeBy({"13.0": 2}, {"9.0": 1}, 0)
    assert made.against("13.0") is None
    assert made.against("12.8") == ("its device code holds 2 cubin(s) made by CUDA 13.0, 1 PTX entry of ISA 9.0 "
                                    "(CUDA 13.x); the cell's CUDA line is 12.8")


def test_a_cuda_12_8_build_is_not_13_0(tmp_path: Path) -> None:
    so = noted_extension(tmp_path, sass(90, 128), ptx((8, 7)))
    made = read_made_by(so, read_fatbins(so))
    assert made.against("12.8") is None
    assert "made by CUDA 12.8" in (made.against("13.0") or "")
    # PTX alone (a +PTX-only build) still tells the major
    only_ptx = read_made_by(p := noted_extension(tmp_path, ptx((9, 0)), name="p.so"), read_fatbins(p))
    assert only_ptx.against("13.0") is None
    assert "ISA 9.0 (CUDA 13.x)" in (only_ptx.against("12.9") or "")


def test_one_translation_unit_of_another_toolkit_is_a_mismatch(tmp_path: Path) -> None:
    so = noted_extension(tmp_path, sass(80, 130), sass(90, 128))
    assert "1 cubin(s) made by CUDA 12.8, 1 cubin(s) made by CUDA 13.0" in (
        read_made_by(so, read_fatbins(so)).against("13.0") or "")


def test_device_code_that_records_nothing_is_not_proven(tmp_path: Path) -> None:
    bare = noted_elf([(".text.k", 1, b"\x00" * 32)])  # a cubin without the note
    so = noted_extension(tmp_path, sass(90, data=bare))
    made = read_made_by(so, read_fatbins(so))
    assert made == MadeBy({}, {}, 1)
    assert "records no toolkit version (1 entry farm cannot read it from)" in (made.against("13.0") or "")


def test_the_assertion_fails_a_wheel_of_another_line_naming_both(tmp_path: Path) -> None:
    so = noted_extension(tmp_path, sass(90), ptx((9, 0)))
    inspection = inspect_file(so, Reader.NATIVE, label="pkg/_C.so", made_by=True)
    expected = Expected(ArchList.parse("sm_90;compute_90"), cuda="12.8")
    report = assert_inspection("pkg-1.0+cu128.whl", (inspection,), expected)
    assert not report.passed
    (finding,) = report.extensions[0].findings
    assert finding.code == "toolkit-mismatch"
    assert finding.cause is Cause.TOOLKIT
    assert "CUDA 13.0" in finding.message
    assert "12.8" in finding.message
    assert "pkg/_C.so" in finding.message
    assert "built by another CUDA toolkit" in report.render()
    assert assert_inspection("w", (inspection,), Expected(ArchList.parse("sm_90;compute_90"), cuda="13.0")).passed
    # an inspection that did not read the records cannot pass a CUDA line
    unread = inspect_file(so, Reader.NATIVE, label="pkg/_C.so")
    assert not assert_inspection("w", (unread,), Expected(ArchList.parse("sm_90;compute_90"), cuda="13.0")).passed


def test_readers_must_agree_on_the_records() -> None:
    native = MadeBy({"13.0": 2}, {"9.0": 1}, 0)
    assert compare_made_by(native, MadeBy({"13.0": 2}, {"9.0": 1}, 0)) is None
    assert "cuobjdump -elf 2 cubin(s) made by CUDA 12.8" in (compare_made_by(native, MadeBy({"12.8": 2}, {"9.0": 1})) or "")
    assert compare_made_by(native, MadeBy({"13.0": 2}, {"8.7": 1})) is not None
    # LZ4 cubins the native reader could not open: what it read must be among cuobjdump's
    assert compare_made_by(MadeBy({"13.0": 1}, {}, 1), MadeBy({"13.0": 2}, {})) is None
    assert compare_made_by(MadeBy({"13.0": 1}, {}, 1), MadeBy({"12.8": 2}, {})) is not None


def _with_header(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def _section_header(data: bytes, index: int) -> int:
    shoff: int
    shoff, = struct.unpack_from("<Q", data, 0x28)
    return shoff + index * 64


GOOD = noted_cubin()
DAMAGED = {
    "not an ELF": (b"\x00" * 8 + GOOD[8:], "not an ELF object"),
    "a host ELF": (_with_header(GOOD, 0x12, "<H", 62), "for ELF machine 62, not CUDA"),
    "32-bit": (_with_header(GOOD, 4, "<B", 1), "ELF class 1"),
    "section table past the end": (_with_header(GOOD, 0x28, "<Q", len(GOOD) - 64), "section table"),
    "a section past the end": (_with_header(GOOD, _section_header(GOOD, 2) + 0x20, "<Q", 1 << 20),
                               "cubin section 2 .* runs past its"),
    "name table index out of range": (_with_header(GOOD, 0x3E, "<H", 40), "name table index 40"),
    "name table not strings": (_with_header(GOOD, _section_header(GOOD, 3) + 4, "<I", 1), "not strings"),
    "note longer than its section": (_with_header(GOOD, GOOD.index(b"NVIDIA Corp") - 8, "<I", 4096),
                                     "a note in cubin section 1 .* runs past the section"),
    "note of another arch": (noted_cubin(sm=80), "says sm_80, its fatbin entry sm_90"),
    "a name outside the table": (_with_header(GOOD, _section_header(GOOD, 2), "<I", 9999), "name offset 9999"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_structurally_damaged_cubin_is_refused(damage: str) -> None:
    data, message = DAMAGED[damage]
    with pytest.raises(BinaryFormatError, match=message):
        cubin_facts(data, where="x.so", arch=90)


def test_flipped_bytes_in_a_raw_cubin_are_refused_where_they_break_its_structure(tmp_path: Path) -> None:
    """The open case: a raw (uncompressed) cubin with payload bytes flipped; its fatbin headers are
    intact, so the header reader and cuobjdump's listing both pass it. Flipping the section table's
    offsets makes it provably corrupt; flipping machine code inside .text cannot be told from code."""
    good = sass(90)
    so = noted_extension(tmp_path, good)
    at = so.read_bytes().index(GOOD) + _section_header(GOOD, 1) + 0x18  # the note section's offset
    data = bytearray(so.read_bytes())
    for i in range(at, at + 8):
        data[i] ^= 0xFF
    so.write_bytes(bytes(data))
    assert read_fatbins(so)  # the headers still read
    with pytest.raises(BinaryFormatError, match=r"cubin section 1 .* runs past"):
        inspect_file(so, Reader.NATIVE, made_by=True)


def test_a_ptx_whose_text_contradicts_its_header_is_refused(tmp_path: Path) -> None:
    so = noted_extension(tmp_path, ptx((9, 0), said="8.7"))
    with pytest.raises(BinaryFormatError, match=r"the PTX says \.version 8\.7, its fatbin entry header ISA 9\.0"):
        read_made_by(so, read_fatbins(so))


def test_a_line_that_is_not_x_y_never_matches() -> None:
    assert "'banana' is not a line (X.Y)" in (MadeBy({"13.0": 1}, {}).against("banana") or "")


@pytest.mark.parametrize("flip", ["machine", "note arch"])
def test_a_real_cubin_with_flipped_bytes_that_cuobjdump_lists_is_refused(cuda_fixtures: CudaFixtures,
                                                                         tmp_path: Path, flip: str) -> None:
    """nvcc 13.0's own binary (sm_80 + sm_90 raw cubins, compute_90 zstd PTX), bytes of the first
    raw cubin flipped, fatbin headers intact: its ELF machine (CUDA -> x86-64), or the arch its
    .note.nv.cuinfo records. cuobjdump lists and dumps it without complaint (rc 0), and so does
    the header reader; reading the cubin refuses it. (Flips in a section offset or size, or in
    e_shoff, cuobjdump refuses itself; flips inside machine code no reader can see.)"""
    import subprocess

    from farm.binary.cuobjdump import find_cuobjdump, list_targets
    from farm.binary.fatbin import Compression, EntryKind

    so = cuda_fixtures.path("default")
    made = read_made_by(so, read_fatbins(so))
    assert made == MadeBy({"13.0": 2}, {"9.0": 1}, 0)
    assert made.against("13.0") is None
    entry = next(e for f in read_fatbins(so) for e in f.entries
                 if e.kind is EntryKind.CUBIN and e.compressed is Compression.NONE)
    data = bytearray(so.read_bytes())
    payload = bytes(data[entry.payload_offset : entry.payload_offset + entry.payload_size])
    if flip == "machine":
        at, message = entry.payload_offset + 0x12, "for ELF machine 62, not CUDA"
        struct.pack_into("<H", data, at, 62)
    else:
        note = payload.index(struct.pack("<III", 12, 8, 1000) + b"NVIDIA Corp\0")
        at, message = entry.payload_offset + note + 24 + 2, r"\.note\.nv\.cuinfo says sm_75, its fatbin entry sm_80"
        struct.pack_into("<H", data, at, 75)
    damaged = tmp_path / so.name
    damaged.write_bytes(bytes(data))
    tool = find_cuobjdump(cuda_fixtures.cuda_home)
    assert len(list_targets(damaged, tool)) == 3
    assert read_fatbins(damaged)
    assert subprocess.run([str(tool), "-elf", str(damaged)], capture_output=True, check=False).returncode == 0
    with pytest.raises(BinaryFormatError, match=message):
        inspect_file(damaged, Reader.NATIVE, made_by=True)
