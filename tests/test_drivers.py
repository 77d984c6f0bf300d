"""The driver-version tables (farm/model/driver_versions.json): NVIDIA's minimums per CUDA runtime
(minor version compatibility) and per PTX ISA, and what a driver's JIT reads."""

from __future__ import annotations

import json

import pytest

from farm.errors import UsageError
from farm.model import drivers
from farm.model.drivers import DriverVersion, Requirement, minimum_driver, requirements, table


def _known(need: Requirement | None) -> Requirement:
    assert need is not None
    return need


@pytest.mark.parametrize(("cuda", "branch"), [("13.0", 580), ("13.2", 580), ("12.8", 525), ("12.0", 525),
                                             ("11.8", 450)])
def test_runtime_minimum_per_major(cuda: str, branch: int) -> None:
    need = table().runtime_minimum(cuda)
    assert need is not None
    assert need.branch == branch
    assert "minor-version-compatibility" in need.source
    assert table().runtime_minimum("10.2") is None


def test_windows_numbers_where_nvidia_prints_them() -> None:
    assert _known(table().runtime_minimum("11.4", "win_amd64")).shown == "452.39"
    assert _known(table().runtime_minimum("11.4", "linux_x86_64")).shown == "450.80.02"


@pytest.mark.parametrize(("cuda", "isa"), [("13.0", "9.0"), ("12.9", "8.8"), ("12.8", "8.7"), ("12.6", "8.5"),
                                           ("12.4", "8.4"), ("11.8", "7.8"), ("13.0.88", "9.0")])
def test_ptx_isa_per_release(cuda: str, isa: str) -> None:
    assert table().ptx_isa(cuda) == isa


def test_ptx_needs_the_driver_of_its_toolkit() -> None:
    need = table().ptx_minimum("8.7")
    assert need is not None
    assert need.branch == 570
    assert "222" in need.error
    assert _known(table().ptx_minimum("8.6")).branch == 570  # CUDA 12.7 never shipped: the first toolkit writing >= 8.6
    assert _known(table().ptx_minimum("9.0")).shown == "580.65.06"
    assert table().ptx_minimum("99.0") is None  # newer than the table: unknown, never guessed


def test_what_a_driver_jit_reads() -> None:
    assert table().newest_cuda(DriverVersion.parse("550.54")) == "12.4"
    assert table().newest_cuda(DriverVersion.parse("580.159.04")) == "13.0"
    assert table().newest_cuda(DriverVersion.parse("572.61")) == "12.8"  # a Windows R570 driver
    assert table().newest_cuda(DriverVersion.parse("440.33")) is None


def test_a_cu128_wheel_on_driver_550_runs_sass_but_cannot_jit() -> None:
    driver = DriverVersion.parse("550.54.14")
    sass = requirements("12.8", None, has_ptx=False)
    jit = requirements("12.8", None, has_ptx=True)
    assert all(r.met_by(driver) for r in sass)
    assert not _known(minimum_driver(jit)).met_by(driver)
    assert _known(minimum_driver(jit)).branch == 570


def test_driver_version_keeps_its_text() -> None:
    assert str(DriverVersion.parse("580.159.04")) == "580.159.04"
    assert DriverVersion.parse(" 550.54 ").branch == 550
    for bad in ("", "abc", "550.", "1.2.3.4.5", "x" * 1000):
        with pytest.raises(UsageError, match="not a driver version"):
            DriverVersion.parse(bad)


def test_every_number_names_its_source() -> None:
    doc = json.loads(drivers.DATA.read_text())
    assert set(doc["sources"]) >= {"minor_version_compatibility", "toolkit_drivers", "ptx_isa"}
    assert all(r["source"] in doc["sources"] for r in doc["runtime_minimum"])
    cudas = [tuple(map(int, r["cuda"].split("."))) for r in doc["releases"]]
    assert cudas == sorted(cudas)
    branches = [r["branch"] for r in doc["releases"]]
    assert branches == sorted(branches)
