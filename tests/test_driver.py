"""The driver model reproduces what the driver was measured to load on an H200 (docs/background.md), and the a/f rules."""

from __future__ import annotations

import json

import pytest

from farm.cli import main
from farm.model.arch import ArchList
from farm.model.driver import (
    KNOWN_DEVICES,
    Choice,
    Device,
    ImageKind,
    claimed_devices,
    explain,
    pick_image,
)

H200 = Device(9, 0)


def _image(choice: Choice) -> str | None:
    """The name of the image the driver loads (None: none runs)."""
    return choice.target.name if choice.target else None


@pytest.mark.parametrize(
    ("built", "kind", "image", "cuda_arch"),
    [
        ("sm_80", ImageKind.NONE, None, None),
        ("sm_80;compute_80", ImageKind.PTX_JIT, "compute_80", 800),  # the stub runs: -1
        ("sm_86;sm_89", ImageKind.NONE, None, None),
        ("sm_86;sm_89;compute_89", ImageKind.PTX_JIT, "compute_89", 890),  # Ada path on Hopper
        ("sm_90", ImageKind.SASS, "sm_90", 900),
        ("sm_90a", ImageKind.SASS, "sm_90a", 900),
        ("sm_100;compute_100", ImageKind.NONE, None, None),  # PTX never runs backward
        ("sm_80;sm_90", ImageKind.SASS, "sm_90", 900),
    ],
)
def test_facts_section_1_rows(built: str, kind: ImageKind, image: str | None, cuda_arch: int | None) -> None:
    choice = pick_image(ArchList.parse(built), H200)
    assert choice.kind is kind
    assert _image(choice) == image
    assert choice.cuda_arch == cuda_arch


def test_arch_specific_runs_only_on_its_arch() -> None:
    archs = ArchList.parse("sm_100a;sm_120a")
    assert _image(pick_image(archs, Device(10, 0))) == "sm_100a"
    assert pick_image(archs, Device(10, 3)).kind is ImageKind.NONE
    assert pick_image(archs, Device(12, 1)).kind is ImageKind.NONE
    assert pick_image(ArchList.parse("compute_90a"), Device(10, 0)).kind is ImageKind.NONE


def test_family_specific_runs_on_its_family() -> None:
    archs = ArchList.parse("sm_100f;sm_120f")
    assert _image(pick_image(archs, Device(10, 3))) == "sm_100f"
    assert _image(pick_image(archs, Device(12, 1))) == "sm_120f"
    assert pick_image(archs, Device(11, 0)).kind is ImageKind.NONE
    assert pick_image(ArchList.parse("sm_103f"), Device(10, 0)).kind is ImageKind.NONE


def test_same_major_highest_minor_wins_and_sass_beats_ptx() -> None:
    archs = ArchList.parse("8.0;8.6;8.9+PTX")
    assert _image(pick_image(archs, Device(8, 7))) == "sm_86"
    assert _image(pick_image(archs, Device(8, 9))) == "sm_89"
    assert _image(pick_image(archs, Device(9, 0))) == "compute_89"


def test_issue_done_when_policy_list() -> None:
    by_device = {str(c.device): c for c in explain(ArchList.parse("8.0;8.6;9.0+PTX"))}
    assert _image(by_device["8.9"]) == "sm_86"
    assert by_device["8.9"].kind is ImageKind.SASS
    for d in ("10.0", "12.0"):
        assert by_device[d].kind is ImageKind.PTX_JIT
        assert _image(by_device[d]) == "compute_90"
    assert by_device["7.5"].kind is ImageKind.NONE


def test_claimed_devices_start_at_lowest_arch() -> None:
    claimed = claimed_devices(ArchList.parse("8.0;8.6;9.0+PTX"))
    assert claimed[0] == Device(8, 0)
    assert Device(7, 5) not in claimed
    assert claimed[-1] == KNOWN_DEVICES[-1]


def test_cli_explain_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "8.0;8.6;9.0+PTX"]) == 0
    out = capsys.readouterr().out
    line_89 = next(line for line in out.splitlines() if line.startswith("8.9 "))
    assert "sm_86" in line_89
    assert "sass" in line_89
    line_75 = next(line for line in out.splitlines() if line.startswith("7.5 "))
    assert "cudaErrorNoKernelImageForDevice" in line_75


def test_cli_explain_device_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "8.0+PTX", "--device", "9.0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"] == [{"device": "9.0", "image": "compute_80", "kind": "ptx-jit", "cuda_arch": 800}]


def test_cli_bad_arch_list_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "8.0;nine"]) == 2
    assert "'nine' is not an arch" in capsys.readouterr().err
