"""Recorded build durations from the ledger: what :mod:`farm.schedule.cost` plans with.

Each ledger entry may carry ``duration_s`` (the compute seconds its cell's build took). Only the
four fields the plan needs are decoded from each line (msgspec ignores the rest), so the matrix
pays a fraction of a full read of the ledger. A line that does not decode, or a duration that is
not a positive number, is skipped: the ledger's own reader judges its lines, and a missing
duration only means the cell is estimated.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from farm.schedule.cost import CellKey, Durations


class _Cell(msgspec.Struct):
    cuda: str
    torch: str
    python: str
    platform: str


class _Line(msgspec.Struct):
    package: str
    cell: _Cell
    duration_s: float | None = None


_decode = msgspec.json.Decoder(_Line).decode


def read_durations(ledger: Path) -> Durations:
    """Every recorded duration of ``ledger`` (none when the file is missing)."""
    pairs: list[tuple[CellKey, float]] = []
    if not ledger.is_file():
        return Durations.none()
    with open(ledger, "rb") as handle:
        for line in handle:
            if b'"duration_s"' not in line:
                continue
            try:
                e = _decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if e.duration_s is not None and e.duration_s > 0:
                pairs.append(((e.package, e.cell.cuda, e.cell.torch, e.cell.python, e.cell.platform), e.duration_s))
    return Durations.of(pairs)
