"""Reading each TU's source from a .so's symbol table."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.binary.fatbin import read_fatbins
from farm.binary.tusources import source_stem, stem_of, tu_sources
from farm.errors import BinaryFormatError
from tests.support.fatbinmaker import shared_object


@pytest.mark.parametrize(("symbol", "stem"), [
    ("tmpxft_00001154_00000000-6_a.compute_90.cudafe1.cpp", "a"),  # nvcc names the last virtual arch
    ("tmpxft_000011b5_00000000-6_scaled_mm_c3x_sm90.cudafe1.cpp", "scaled_mm_c3x_sm90"),
    ("tmpxft_000011b5_00000000-6_ops.v2.cudafe1.cpp", "ops.v2"),
    ("crtstuff.c", None),
    ("torch_bindings.cpp", None),
])
def test_stem_of_nvcc_host_objects(symbol: str, stem: str | None) -> None:
    assert stem_of(symbol) == stem


def test_source_stem() -> None:
    assert source_stem("csrc/quantization/fp8/common.cu") == "common"


def test_each_fatbin_gets_its_source(tmp_path: Path) -> None:
    so = shared_object(tmp_path / "x.so", [["sm_80"], ["sm_90a"]], stubs=[["sm_80"]], sources=["a", "b"])
    sources = tu_sources(so)
    assert sources is not None
    assert [sources.get(f.offset) for f in read_fatbins(so)] == ["a", "b", None]  # the stub has no source


def test_stripped_and_not_elf(tmp_path: Path) -> None:
    assert tu_sources(shared_object(tmp_path / "x.so", [["sm_80"]])) is None
    (tmp_path / "x.pyd").write_bytes(b"MZ" + bytes(100))
    assert tu_sources(tmp_path / "x.pyd") is None


def test_a_truncated_symbol_table_is_a_format_error(tmp_path: Path) -> None:
    so = shared_object(tmp_path / "x.so", [["sm_80"]], sources=["a"])
    data = so.read_bytes()
    so.write_bytes(data[:200] + data[-64 * 7:])  # the section table survives, what it points at does not
    with pytest.raises(BinaryFormatError, match="runs past the end"):
        tu_sources(so)
