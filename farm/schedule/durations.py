"""Recorded build durations from the ledger: what :mod:`farm.schedule.cost` plans with.

Each ledger entry may carry ``duration_s`` (the compute seconds its cell's build took) and its
compiler cache's counts (:mod:`farm.schedule.hitrate` reads those). Only the few fields the plan
needs are decoded from each line (msgspec ignores the rest), so the matrix pays a fraction of a
full read of the ledger. A line that does not decode, or a duration that is not a positive number,
is skipped: the ledger's own reader judges its lines, and a missing duration only means the cell
is estimated.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from farm.schedule.cost import CellKey, Durations


class _Cell(msgspec.Struct):
    cuda: str
    torch: str
    python: str
    platform: str


class _Counts(msgspec.Struct):
    compiles: int
    hits: int


class _Toolchain(msgspec.Struct):
    compile_cache: _Counts | None = None


class _Line(msgspec.Struct):
    package: str
    cell: _Cell
    duration_s: float | None = None
    toolchain: _Toolchain | None = None


_decode = msgspec.json.Decoder(_Line).decode


def recorded_builds(ledger: Path, marker: bytes) -> Iterator[tuple[CellKey, float | None, tuple[int, int] | None]]:
    """Per ledger line holding ``marker`` (a key's quoted name, to skip the rest undecoded): its
    cell key, its build duration and its compiler cache's (compile steps, hits), each None when
    unrecorded. Lines that do not decode are skipped (module docstring); none when the file is missing."""
    if not ledger.is_file():
        return
    with open(ledger, "rb") as handle:
        for line in handle:
            if marker not in line:
                continue
            try:
                e = _decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            counts = e.toolchain.compile_cache if e.toolchain else None
            yield ((e.package, e.cell.cuda, e.cell.torch, e.cell.python, e.cell.platform), e.duration_s,
                   None if counts is None else (counts.compiles, counts.hits))


def read_durations(ledger: Path) -> Durations:
    """Every recorded duration of ``ledger`` (none when the file is missing)."""
    return Durations.of((key, duration) for key, duration, _ in recorded_builds(ledger, b'"duration_s"')
                        if duration is not None and duration > 0)
