"""``farm publish-shard``'s reading of a cell's small artifact: ledger fragments only, flat, small;
anything else refuses the cell (an artifact is another job's output: checked, not believed)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from farm.commands.publish_shard import MAX_FRAGMENT_BYTES, _extract_fragments
from farm.errors import UsageError

NAME = "a-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl.ledger.json"


def bundle(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_fragments_are_extracted_flat(tmp_path: Path) -> None:
    out = tmp_path / "cell"
    out.mkdir()
    assert _extract_fragments(bundle(tmp_path / "b.zip", {NAME: b"{}"}), out) == [NAME]
    assert (out / NAME).read_bytes() == b"{}"


@pytest.mark.parametrize("members", [
    {"../" + NAME: b"{}"},  # a path out of the folder
    {"sub/" + NAME: b"{}"},
    {"a.whl": b"PK"},  # a wheel belongs in its own artifact
    {NAME: b"x" * (MAX_FRAGMENT_BYTES + 1)},
    {f"{i}{NAME}": b"{}" for i in range(9)},
])
def test_anything_else_refuses_the_cell(tmp_path: Path, members: dict[str, bytes]) -> None:
    out = tmp_path / "cell"
    out.mkdir()
    with pytest.raises(UsageError):
        _extract_fragments(bundle(tmp_path / "b.zip", members), out)
    assert list(out.iterdir()) == []


def test_not_a_zip_refuses_the_cell(tmp_path: Path) -> None:
    (tmp_path / "b.zip").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a zip"):
        _extract_fragments(tmp_path / "b.zip", tmp_path)
