"""The header scanner and ``python -m farm.binary.fatbin``, on real nvcc builds and hand-edited copies."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from farm.binary import fatbinscan
from farm.binary.fatbin import read_fatbins
from farm.errors import BinaryFormatError
from tests.support.cudafix import FATBIN_MAGIC, VALID, CudaFixtures

REPO = Path(__file__).resolve().parent.parent

# offsets inside an entry header (farm.binary.fatbinscan._ENTRY)
_HEADER_SIZE, _ARCH, _FLAGS = 4, 28, 40


def _edited(cuda_fixtures: CudaFixtures, tmp_path: Path, edit: Callable[[bytearray, int], None]) -> Path:
    """The default fixture with its first fatbin (found by its magic) edited."""
    data = bytearray(cuda_fixtures.path("default").read_bytes())
    at = data.find(FATBIN_MAGIC)
    assert at > 0
    edit(data, at)
    out = tmp_path / "edited.so"
    out.write_bytes(bytes(data))
    return out


def _set_flags(bits: int) -> Callable[[bytearray, int], None]:
    def edit(data: bytearray, at: int) -> None:
        flags, = struct.unpack_from("<Q", data, at + 16 + _FLAGS)
        struct.pack_into("<Q", data, at + 16 + _FLAGS, flags | bits)

    return edit


def _pack(offset: int, fmt: str, value: int) -> Callable[[bytearray, int], None]:
    return lambda data, at: struct.pack_into(fmt, data, at + offset, value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set_flags(0x100000 | 0x200000), "both 'a' and 'f'"),
        (_set_flags(0x2000 | 0x8000), "both LZ4 and zstd"),
        (_pack(16 + _ARCH, "<I", 7), "implausible arch number 7"),
        (_pack(16 + _HEADER_SIZE, "<I", 8), "entry header size 8 < 64"),
        (_pack(4, "<H", 2), "unsupported fatbin header (version 2"),
        (_pack(8, "<Q", 40), "truncated entry header (40 bytes left"),  # the fatbin ends inside its first header
    ],
)
def test_every_header_check_fails_closed(
    cuda_fixtures: CudaFixtures, tmp_path: Path, edit: Callable[[bytearray, int], None], message: str
) -> None:
    path = _edited(cuda_fixtures, tmp_path, edit)
    with pytest.raises(BinaryFormatError) as err:
        fatbinscan.scan(path)
    assert message in err.value.message
    assert ".nv_fatbin fatbin 1 at 0x" in err.value.message  # where in the file
    assert err.value.where == str(path)
    assert err.value.hint


@pytest.mark.parametrize(("window", "alone", "large"), [(1, 1, 0), (64, 64, 1 << 30), (100, 70, 200), (4095, 100, 64)])
def test_the_read_window_does_not_change_the_answer(
    cuda_fixtures: CudaFixtures, monkeypatch: pytest.MonkeyPatch, window: int, alone: int, large: int
) -> None:
    """Headers that straddle a read's end, or miss it, read as with the default sizes."""
    expected = {name: fatbinscan.scan(cuda_fixtures.path(name)) for name in VALID}
    monkeypatch.setattr(fatbinscan, "_WINDOW", window)
    monkeypatch.setattr(fatbinscan, "_ALONE", alone)
    monkeypatch.setattr(fatbinscan, "_LARGE", large)
    assert {name: fatbinscan.scan(cuda_fixtures.path(name)) for name in VALID} == expected


def test_directories_and_fifos_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BinaryFormatError, match="is a directory"):
        fatbinscan.scan(tmp_path)
    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)
    with pytest.raises(BinaryFormatError, match="not a regular file"):  # refused, not waited on
        fatbinscan.scan(fifo)


def _module(*args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", *flags, "-m", "farm.binary.fatbinscan", *args],
                          capture_output=True, text=True, cwd=REPO, check=False)


def test_module_lists_what_read_fatbins_reads(cuda_fixtures: CudaFixtures) -> None:
    paths = [str(cuda_fixtures.path(name)) for name in ("two-tu", "rdc", "family")]
    proc = _module(*paths)
    assert proc.returncode == 0, proc.stderr
    expected = [
        f"{path}\t{f.section}\t{f.offset:#x}\t{e.kind.value}\t{e.name}\t{e.compressed.value}"
        for path in paths for f in read_fatbins(path) for e in f.entries
    ]
    assert proc.stdout.splitlines() == expected


def test_module_reports_a_corrupt_file_and_goes_on(cuda_fixtures: CudaFixtures) -> None:
    good, bad = cuda_fixtures.path("two-tu"), cuda_fixtures.path("bad-magic")
    proc = _module(str(bad), str(good))
    assert proc.returncode == 2
    assert f"error: {bad}: .nv_fatbin fatbin 1 at 0x" in proc.stderr
    assert "bad fatbin magic" in proc.stderr
    assert proc.stdout.splitlines()
    assert all(line.startswith(f"{good}\t") for line in proc.stdout.splitlines())
