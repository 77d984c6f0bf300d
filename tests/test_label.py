"""The local version label: one builder, one parser, each the other's inverse."""

from __future__ import annotations

import pytest

from farm.model.cells import Cell, local_version
from farm.model.label import NO_TORCH, LocalLabel, local_label, parse_local_label
from farm.provenance.buildinfo import CellInfo
from farm.provenance.buildinfo import local_label as provenance_label


@pytest.mark.parametrize(("cuda", "torch", "text"), [
    ("12.8", "2.8", "cu128torch2.8"), ("13.0", NO_TORCH, "cu130"), ("12.10", "2.14", "cu1210torch2.14"),
])
def test_build_and_parse_are_inverse(cuda: str, torch: str, text: str) -> None:
    assert local_label(cuda, torch) == text
    assert parse_local_label(text) == LocalLabel(cuda, torch)
    assert str(LocalLabel(cuda, torch)) == text
    assert LocalLabel(cuda, torch).cu == "cu" + cuda.replace(".", "")
    cell = Cell("p", "1.0", cuda, torch, "cp311", "linux_x86_64")
    assert local_version(cell) == text  # the stamp's label and the provenance check's are this one
    assert provenance_label(CellInfo(cuda=cuda, torch=torch, python="cp311", platform="linux_x86_64")) == text


@pytest.mark.parametrize("text", [None, "", "cpu", "cu", "cu8", "cu128torch", "cu128torch2", "cu128+x", "rocm6.2",
                                  "cu128torch2.8.1", "xcu128"])
def test_other_labels_are_not_farm_cells(text: str | None) -> None:
    assert parse_local_label(text) is None
