"""The GPUs the pages offer (farm/model/devices.py): every capability the nvcc support tables
build for, each named once, and the devices whose machine decides which wheels run at all."""

from __future__ import annotations

import pytest

from farm.model import devices
from farm.model.arch import KNOWN_CUDA_LINES, supported_targets
from farm.model.driver import Device


def test_every_capability_a_cuda_line_builds_is_offered() -> None:
    built = {n for line in KNOWN_CUDA_LINES for n, v in supported_targets(line) if v == ""}
    assert [d.number for d in devices.targetable()] == sorted(built)
    assert {"5.0", "7.0", "8.7", "10.1", "11.0", "12.1"} <= {str(d) for d in devices.targetable()}


def test_every_capability_is_named_once() -> None:
    for d in devices.targetable():
        label = devices.label(d)
        assert label.startswith(f"{d} "), label
        generation = label.removeprefix(f"{d} ").split(" (")[0]
        assert generation, label
        assert label.count("(") <= 1, label  # "Blackwell (Thor) (Jetson Thor)" was a name twice
        assert generation.split()[0] not in devices.products(d), label
    assert devices.label(Device(11, 0)) == "11.0 Blackwell (Jetson Thor)"
    assert devices.label(Device(8, 8)) == "8.8 Ampere"
    assert devices.products(Device(9, 0)) == "H100, H200"


def test_the_lines_that_build_a_capability_come_from_the_tables() -> None:
    assert devices.lines_for(Device(7, 0)) == ("12.4", "12.6", "12.8", "12.9")  # CUDA 13.0 dropped Volta
    assert devices.lines_for(Device(11, 0)) == ("13.0", "13.2")
    assert devices.lines_for(Device(10, 1)) == ("12.8", "12.9")


@pytest.mark.parametrize(("device", "platform", "cuda", "blocked"), [
    ("8.6", "linux_x86_64", "12.8", None),  # no tie: the fatbins decide
    ("8.6", "linux_aarch64", "12.8", None),
    ("8.7", "linux_aarch64", "13.0", "JetPack"),  # Orin: no farm platform runs there
    ("7.2", "linux_aarch64", "12.6", "JetPack"),
    ("11.0", "linux_x86_64", "13.0", "linux_aarch64 wheels only"),
    ("11.0", "linux_aarch64", "12.9", "CUDA 13.0 or newer"),
    ("11.0", "linux_aarch64", "13.0", None),
    ("11.0", "linux_aarch64", "13.2", None),
    ("12.1", "linux_x86_64", "12.8", "linux_aarch64 wheels only"),
    ("12.1", "win_amd64", "13.0", "linux_aarch64 wheels only"),
    ("12.1", "linux_aarch64", "12.8", None),
])
def test_platform_ties(device: str, platform: str, cuda: str, blocked: str | None) -> None:
    why = devices.blocked(Device.parse(device), platform, cuda)
    if blocked is None:
        assert why is None
    else:
        assert why is not None
        assert blocked in why


def test_a_tie_says_what_would_run() -> None:
    tie = devices.tie(Device(8, 7))
    assert tie is not None
    assert tie.platform is None
    assert "JetPack" in tie.instead
    thor = devices.tie(Device(11, 0))
    assert thor is not None
    assert thor.first_cuda == "13.0"
    assert "JetPack 7" in thor.driver
