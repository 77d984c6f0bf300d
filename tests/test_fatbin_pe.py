"""Windows (PE) binaries: the native reader finds nvcc's fatbins in ``.nv_fatb`` (the linker cuts
section names to 8 bytes), reads them like ELF ones, and cuobjdump on Linux is never trusted with
them (it answers "no device code" for every PE file)."""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from farm.binary.cuobjdump import find_cuobjdump, list_targets, variant_free
from farm.binary.fatbin import read_fatbins, union
from farm.binary.inspection import inspect_file, inspect_wheel
from farm.errors import BinaryFormatError, ToolError
from tests.support.cudafix import CudaFixtures
from tests.support.wheelmaker import make_wheel

REPO = Path(__file__).resolve().parent.parent
ALIGN = 0x200


def _pe(sections: list[tuple[bytes, bytes]], *, signature: bytes = b"PE\0\0", count: int | None = None) -> bytes:
    """A minimal PE32+ image: DOS header, COFF header, no optional header, the given sections."""
    n = len(sections) if count is None else count
    dos = bytearray(0x40)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x40)
    coff = signature + struct.pack("<HHIIIHH", 0x8664, n, 0, 0, 0, 0, 0x2022)
    table_end = 0x40 + len(coff) + 40 * len(sections)
    pos = -(-table_end // ALIGN) * ALIGN
    headers, bodies = b"", b""
    for name, data in sections:
        raw = -(-len(data) // ALIGN) * ALIGN
        headers += struct.pack("<8sIIIIIIHHI", name, len(data), 0x1000, raw, pos, 0, 0, 0, 0, 0x40000040)
        bodies += data.ljust(raw, b"\0")
        pos += raw
    image = bytes(dos) + coff + headers
    return image.ljust(-(-table_end // ALIGN) * ALIGN, b"\0") + bodies


def _fatbin_bytes(so: Path, tmp_path: Path) -> bytes:
    """The bytes of a real nvcc build's ``.nv_fatbin`` section, as binutils extracts them."""
    out = tmp_path / "section.bin"
    subprocess.run(["objcopy", "--dump-section", f".nv_fatbin={out}", str(so), str(tmp_path / "scratch.o")],
                   check=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def elf(cuda_fixtures: CudaFixtures) -> Path:
    return cuda_fixtures.path("two-tu")


def test_pe_image_reads_like_the_elf_it_came_from(elf: Path, tmp_path: Path) -> None:
    pe = tmp_path / "_C.cp311-win_amd64.pyd"
    pe.write_bytes(_pe([(b".text", b"\xc3" * 100), (b".nv_fatb", _fatbin_bytes(elf, tmp_path)), (b".rsrc", b"\0" * 8)]))
    from_pe = read_fatbins(pe)
    from_elf = read_fatbins(elf)
    assert [[e.name for e in f.entries] for f in from_pe] == [[e.name for e in f.entries] for f in from_elf]
    assert {f.section for f in from_pe} == {".nv_fatbin"}
    assert union(from_pe).canonical() == union(from_elf).canonical()
    assert inspect_file(pe).found == inspect_file(elf).found


def test_pe_without_device_code_and_broken_pe(tmp_path: Path) -> None:
    host = tmp_path / "host.pyd"
    host.write_bytes(_pe([(b".text", b"\xc3" * 64)]))
    assert read_fatbins(host) == []
    nosig = tmp_path / "nosig.pyd"
    nosig.write_bytes(_pe([(b".text", b"\xc3")], signature=b"XX\0\0"))
    with pytest.raises(BinaryFormatError, match="without a PE signature"):
        read_fatbins(nosig)
    short = tmp_path / "short.pyd"
    short.write_bytes(_pe([(b".text", b"\xc3")], count=4000))  # a section table past the end of the file
    with pytest.raises(BinaryFormatError, match="PE section table"):
        read_fatbins(short)


def test_linux_cuobjdump_is_not_asked_about_pe(elf: Path, tmp_path: Path) -> None:
    pe = tmp_path / "ext.pyd"
    pe.write_bytes(_pe([(b".nv_fatb", _fatbin_bytes(elf, tmp_path))]))
    if sys.platform == "win32":
        pytest.skip("cuobjdump.exe reads PE files")
    with pytest.raises(ToolError, match="cannot read a Windows"):
        list_targets(pe)


@pytest.mark.slow
def test_a_real_nvidia_windows_dll_against_its_linux_build(tmp_path_factory: pytest.TempPathFactory) -> None:
    """NVIDIA's curand 10.4.5.25 for win_amd64 (native reader on the DLL) and for manylinux x86_64
    (cuobjdump on the .so): one library version, one arch set."""
    cache = REPO / ".cache" / "pe"
    wheels = {}
    for platform in ("win_amd64", "manylinux_2_27_x86_64"):
        name = f"nvidia_curand-10.4.5.25-py3-none-{platform}.whl"
        if not (cache / name).exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                            "--platform", platform, "--python-version", "3.11", "nvidia-curand==10.4.5.25",
                            "-d", str(cache)], check=True)
        wheels[platform] = cache / name
    out = tmp_path_factory.mktemp("curand")
    with zipfile.ZipFile(wheels["win_amd64"]) as zf:
        dll = next(n for n in zf.namelist() if n.endswith("curand64_10.dll"))
        dll_path = Path(zf.extract(dll, out))
    with zipfile.ZipFile(wheels["manylinux_2_27_x86_64"]) as zf:
        so = next(n for n in zf.namelist() if "/libcurand.so" in n)
        so_path = Path(zf.extract(so, out))
    native = {variant_free(t).name for t in union(read_fatbins(dll_path))}
    listed = {variant_free(e.target).name for e in list_targets(so_path, find_cuobjdump())}
    assert native == listed
    assert {"sm_80", "sm_90", "sm_120", "compute_120"} <= native


def test_a_windows_wheel_is_inspected_natively(elf: Path, tmp_path: Path) -> None:
    pyd = _pe([(b".text", b"\xc3"), (b".nv_fatb", _fatbin_bytes(elf, tmp_path))])
    wheel = make_wheel(tmp_path / "dist", "demo_ext", "0.1.0", {"demo_ext/_C.cp311-win_amd64.pyd": pyd},
                       tag="cp311-cp311-win_amd64")
    (ext,) = inspect_wheel(wheel).extensions
    assert ext.path == "demo_ext/_C.cp311-win_amd64.pyd"
    assert ext.found == inspect_file(elf).found
