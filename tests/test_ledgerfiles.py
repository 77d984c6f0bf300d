"""Where a ledger record goes: one segment per package and build epoch."""

from __future__ import annotations

import pytest

from farm.errors import LedgerError
from farm.provenance.ledgerfiles import is_segment, segment_of, segment_sizes


def test_a_record_goes_to_its_package_and_epoch() -> None:
    assert segment_of("flash_attn", 0) == "flash_attn/e0.jsonl"
    assert segment_of("torch-scatter", 12) == "torch-scatter/e12.jsonl"
    assert is_segment("flash_attn/e0.jsonl")
    assert not is_segment("flash_attn/e0.json")
    assert not is_segment("e0.jsonl")
    assert not is_segment("a/b/e0.jsonl")


@pytest.mark.parametrize(("package", "epoch"), [("", 0), ("../x", 0), (".hidden", 0), ("a/b", 0), ("p", -1)])
def test_no_segment_outside_the_folder(package: str, epoch: int) -> None:
    with pytest.raises(LedgerError, match="no ledger segment"):
        segment_of(package, epoch)


def test_ten_bumps_leave_every_segment_the_size_of_one_packages_epoch() -> None:
    """The public farm's grid: 16,390 cells of 45 packages (the largest ~1,500), ~2 KB a
    record; ten epoch bumps make ten segments per package, each the size of one epoch."""
    packages = {f"p{i}": 1500 if i == 0 else 340 for i in range(45)}
    sizes = segment_sizes((pkg, epoch, 2048) for epoch in range(10) for pkg, n in packages.items()
                          for _ in range(n))
    assert len(sizes) == 450
    assert max(sizes.values()) == 1500 * 2048 < 50 * 1024 * 1024
