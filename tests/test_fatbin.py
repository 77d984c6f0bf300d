"""The native fatbin reader on real nvcc builds and hand-corrupted copies of them."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
import zstandard

from farm.binary.fatbin import (
    Compression,
    Entry,
    EntryKind,
    Fatbin,
    cubin_has_code,
    is_device_link_stub,
    read_fatbins,
    read_payload,
    runnable,
    union,
)
from farm.binary.fatbinscan import EXECUTABLE_SECTION, RELOCATABLE_SECTION
from farm.errors import BinaryFormatError
from farm.model.arch import ArchList, Kind, Target, Variant
from tests.support.cudafix import BASE, CORRUPT_HEADERS, FIXTURES, VALID, CudaFixtures


def _stub(path: Path, fatbin: Fatbin) -> bool | None:
    with open(path, "rb") as fh:
        return is_device_link_stub(path, fatbin, fh=fh)


def _payload(path: Path, entry: Entry, **limit: int) -> bytes | None:
    with open(path, "rb") as fh:
        return read_payload(path, entry, fh=fh, **limit)


@pytest.mark.parametrize("name", VALID)
def test_found_equals_what_was_built(cuda_fixtures: CudaFixtures, name: str) -> None:
    fatbins = read_fatbins(cuda_fixtures.path(name))
    holds = FIXTURES[name].holds
    if holds is None:
        assert fatbins == []
    else:
        assert union(runnable(fatbins)) == ArchList.parse(holds)


@pytest.mark.parametrize(
    ("name", "cubin", "ptx"),
    [
        ("none", Compression.NONE, Compression.NONE),
        ("default", Compression.NONE, Compression.ZSTD),
        ("speed", Compression.NONE, Compression.LZ4),
        ("size", Compression.ZSTD, Compression.ZSTD),
        ("compress-all", Compression.ZSTD, Compression.ZSTD),
    ],
)
def test_compression_modes(cuda_fixtures: CudaFixtures, name: str, cubin: Compression, ptx: Compression) -> None:
    (fatbin,) = read_fatbins(cuda_fixtures.path(name))
    assert fatbin.section == EXECUTABLE_SECTION
    kinds = {e.kind: e.compressed for e in fatbin.entries}
    assert kinds == {EntryKind.CUBIN: cubin, EntryKind.PTX: ptx}
    for entry in fatbin.entries:  # compressed entries record their inflated size, raw ones 0
        assert (entry.uncompressed_size > 0) == (entry.compressed is not Compression.NONE)


def test_variants_are_read_from_the_flags(cuda_fixtures: CudaFixtures) -> None:
    (fatbin,) = read_fatbins(cuda_fixtures.path("family"))
    variants = {e.name: e.target.variant for e in fatbin.entries}
    assert variants == {"sm_100f": Variant.FAMILY, "sm_120f": Variant.FAMILY, "compute_120f": Variant.FAMILY}
    (fatbin,) = read_fatbins(cuda_fixtures.path("sm90a"))
    assert {e.name for e in fatbin.entries} == {"sm_90a", "compute_90a"}


def test_ptx_only(cuda_fixtures: CudaFixtures) -> None:
    (fatbin,) = read_fatbins(cuda_fixtures.path("ptx-only"))
    assert [(e.kind, e.target.kind) for e in fatbin.entries] == [(EntryKind.PTX, Kind.PTX)]


def test_one_fatbin_per_translation_unit(cuda_fixtures: CudaFixtures) -> None:
    fatbins = read_fatbins(cuda_fixtures.path("two-tu"))
    assert [f.targets for f in fatbins] == [ArchList.parse(BASE)] * 2
    fatbins = read_fatbins(cuda_fixtures.path("tu-mismatch"))
    assert sorted(f.targets.canonical() for f in fatbins) == ["sm_80", "sm_80;sm_90;compute_90"]


def test_nvcc_link_adds_a_stub_of_empty_cubins(cuda_fixtures: CudaFixtures) -> None:
    path = cuda_fixtures.path("nvcc-link")
    fatbins = read_fatbins(path)
    assert len(fatbins) == 3
    stubs = [f for f in fatbins if _stub(path, f)]
    assert [s.targets.canonical() for s in stubs] == ["sm_80;sm_90"]
    for fatbin in fatbins:
        if fatbin not in stubs:
            cubins = [e for e in fatbin.entries if e.kind is EntryKind.CUBIN]
            assert all(cubin_has_code(_payload(path, e) or b"") for e in cubins)


def test_nvcc_link_without_gencode_adds_sm_75(cuda_fixtures: CudaFixtures) -> None:
    path = cuda_fixtures.path("nvcc-link-default")
    stubs = [f for f in read_fatbins(path) if _stub(path, f)]
    assert [s.targets.canonical() for s in stubs] == ["sm_75"]


def test_compressed_stub_is_recognised(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """A stub under -Xfatbin -compress-all is zstd-compressed; it is still recognised."""
    fx = cuda_fixtures
    obj = fx.nvcc_c("k1.cu", ["-gencode=arch=compute_80,code=sm_80", "-Xfatbin", "-compress-all"], "k1-ca80.o")
    out = tmp_path / "stub.so"
    fx.nvcc_link([obj], ["-gencode=arch=compute_80,code=sm_80", "-Xfatbin", "-compress-all"], out)
    fatbins = read_fatbins(out)
    assert all(e.compressed is Compression.ZSTD for f in fatbins for e in f.entries)
    assert sorted(bool(_stub(out, f)) for f in fatbins) == [False, True]


def test_zstd_payload_cannot_inflate_past_its_header(tmp_path: Path) -> None:
    """The zstd frame's own content size is not trusted: a payload claiming more than its entry
    header declares (a decompression bomb, or a lying header) is refused, not allocated."""
    frame = zstandard.ZstdCompressor().compress(bytes(1 << 20))
    path = tmp_path / "payload.bin"
    path.write_bytes(bytes(64) + frame)
    entry = Entry(EntryKind.CUBIN, Target(8, 0), Compression.ZSTD, 0, 64, len(frame), 1 << 20)
    assert _payload(path, entry) == bytes(1 << 20)
    with pytest.raises(BinaryFormatError, match=r"claims 1048576 bytes; its entry header declares 1024 \(read limit"):
        _payload(path, dataclasses.replace(entry, uncompressed_size=1024))
    with pytest.raises(BinaryFormatError, match=r"claims 1048576 bytes; its entry header declares 1048576 \(read limit 4096\)"):
        _payload(path, entry, limit=4096)
    # a frame that does not say its size is bounded by the header's
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(1 << 20))
    path.write_bytes(bytes(64) + unsized)
    with pytest.raises(BinaryFormatError, match="does not decompress"):
        _payload(path, dataclasses.replace(entry, payload_size=len(unsized), uncompressed_size=1024))
    path.write_bytes(bytes(64) + frame)
    path.write_bytes(bytes(64) + frame[:-8] + bytes(8))
    with pytest.raises(BinaryFormatError, match="does not decompress"):
        _payload(path, entry)


def test_data_only_translation_unit_is_not_a_stub(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """A TU holding only __device__ data has no .text either (cuBLASLt has hundreds): not a stub."""
    obj = cuda_fixtures.nvcc_c("data.cu", ["-gencode=arch=compute_80,code=sm_80"], "data80.o")
    out = tmp_path / "data.so"
    cuda_fixtures.gxx_link([obj], out)
    (fatbin,) = read_fatbins(out)
    assert fatbin.targets == ArchList.parse("8.0")
    assert _stub(out, fatbin) is False


def test_rdc_keeps_relocatable_fatbins_apart(cuda_fixtures: CudaFixtures) -> None:
    fatbins = read_fatbins(cuda_fixtures.path("rdc"))
    sections = [f.section for f in fatbins]
    assert sections == [EXECUTABLE_SECTION, RELOCATABLE_SECTION, RELOCATABLE_SECTION]
    assert runnable(fatbins) == (fatbins[0],)
    # one relocatable fatbin per TU, each with the PTX the device link did not keep
    assert all(f.targets == ArchList.parse(BASE) for f in fatbins[1:])
    assert fatbins[0].targets == ArchList.parse("8.0;9.0")


def test_relocatable_object_without_device_link(cuda_fixtures: CudaFixtures) -> None:
    """``nvcc -c -rdc`` gives only __nv_relfatbin: that is what runs once linked, so it counts."""
    obj = cuda_fixtures.nvcc_c("rdc_b.cu", ["-rdc=true", "-gencode=arch=compute_80,code=sm_80"], "rdc_b.o")
    fatbins = read_fatbins(obj)
    assert {f.section for f in fatbins} == {RELOCATABLE_SECTION}
    assert union(runnable(fatbins)) == ArchList.parse("8.0")


def test_lto_ir_is_read_but_not_a_runnable_target(cuda_fixtures: CudaFixtures) -> None:
    obj = cuda_fixtures.nvcc_c("rdc_b.cu", ["-rdc=true", "-gencode=arch=compute_90,code=lto_90"],
                               "rdc_b-lto.o")
    entries = [e for f in read_fatbins(obj) for e in f.entries]
    assert [(e.kind, e.name) for e in entries] == [(EntryKind.LTO_IR, "lto_90")]
    assert union(read_fatbins(obj)) == ArchList(frozenset())


def test_host_only_has_no_fatbins(cuda_fixtures: CudaFixtures) -> None:
    assert read_fatbins(cuda_fixtures.path("host-only")) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("text", "neither an ELF nor a PE file"),
        ("truncated", "truncated: the ELF section table"),
        ("bad-magic", "bad fatbin magic 0xdeadbeef"),
        ("oversized-entry", "runs past the end of its fatbin"),
        ("unknown-kind", "unknown entry kind 5"),
        ("oversized-fatbin", "declares 2147483647 bytes of entries"),
    ],
)
def test_corrupt_files_fail_closed(cuda_fixtures: CudaFixtures, name: str, message: str) -> None:
    assert name in CORRUPT_HEADERS
    path = cuda_fixtures.path(name)
    with pytest.raises(BinaryFormatError) as err:
        read_fatbins(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "fix:" in str(err.value)
    assert err.value.exit_code == 2


def _elf_with_section_table(tmp_path: Path, *, ident: bytes = b"\x7fELF\x02\x01\x01") -> Path:
    """An ELF header alone, claiming a section table past the end of the file."""
    header = bytearray(64)
    header[: len(ident)] = ident
    struct.pack_into("<Q", header, 0x28, 4096)  # e_shoff
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    path = tmp_path / "x.so"
    path.write_bytes(bytes(header))
    return path


def test_section_table_past_the_end(tmp_path: Path) -> None:
    with pytest.raises(BinaryFormatError, match="ELF section table"):
        read_fatbins(_elf_with_section_table(tmp_path))


def test_32_bit_and_big_endian_elf_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BinaryFormatError, match="only 64-bit little-endian"):
        read_fatbins(_elf_with_section_table(tmp_path, ident=b"\x7fELF\x01\x01\x01"))
    with pytest.raises(BinaryFormatError, match="only 64-bit little-endian"):
        read_fatbins(_elf_with_section_table(tmp_path, ident=b"\x7fELF\x02\x02\x01"))


def test_empty_missing_and_pe_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(BinaryFormatError, match="empty file"):
        read_fatbins(empty)
    with pytest.raises(BinaryFormatError, match="no such file"):
        read_fatbins(tmp_path / "absent.so")
    pe = tmp_path / "ext.pyd"
    pe.write_bytes(b"MZ" + bytes(200))
    with pytest.raises(BinaryFormatError, match="PE"):
        read_fatbins(pe)


def test_padding_between_fatbins_is_skipped_but_garbage_is_not(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """Two fatbins separated by zero padding read as two; a non-zero byte there is bad magic."""
    data = bytearray(cuda_fixtures.path("two-tu").read_bytes())
    first = data.find(b"\x50\xed\x55\xba")
    second = data.find(b"\x50\xed\x55\xba", first + 4)
    size, = struct.unpack_from("<Q", data, first + 8)
    assert second == first + 16 + size
    # shrink the first fatbin's declared entries by its last entry: those bytes become a gap
    fatbins = read_fatbins(cuda_fixtures.path("two-tu"))
    last = fatbins[0].entries[-1]
    gap = last.header_size + last.payload_size
    struct.pack_into("<Q", data, first + 8, size - gap)
    data[second - gap : second] = bytes(gap)
    padded = tmp_path / "padded.so"
    padded.write_bytes(bytes(data))
    assert [len(f.entries) for f in read_fatbins(padded)] == [len(fatbins[0].entries) - 1, len(fatbins[1].entries)]
    data[second - 8] = 1
    garbage = tmp_path / "garbage.so"
    garbage.write_bytes(bytes(data))
    with pytest.raises(BinaryFormatError, match="bad fatbin magic"):
        read_fatbins(garbage)
