"""Recorded build durations from the ledger: what :mod:`farm.schedule.cost` plans with.

Each ledger entry may carry ``duration_s`` (the compute seconds its cell's build took) and its
compiler cache's counts (:mod:`farm.schedule.hitrate` reads those). Only the few fields the plan
needs are decoded from each line (a projection of the record's one definition; msgspec skips the
rest), so the matrix pays a fraction of a full read of the ledger, once for both. A line that does
not decode, or a duration that is not a positive number, is skipped: the ledger's own reader judges
its lines, and a missing duration only means the cell is estimated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from farm.provenance.buildinfo import BuildInfo, LedgerEntry
from farm.provenance.ledger import raw_lines
from farm.provenance.shape import projection
from farm.schedule.cost import CellKey, Durations

# the fields a build's cost is planned by, decoded from the record's one definition
BuildCost: Any = projection((BuildInfo, LedgerEntry), "BuildCost", {
    "package": ...,
    "cell": {"cuda": ..., "torch": ..., "python": ..., "platform": ...},
    "duration_s": ...,
    "toolchain": {"compile_cache": ...},
}, missing=True)
_decode = msgspec.json.Decoder(BuildCost).decode


def recorded_builds(ledger: Path) -> Iterator[tuple[CellKey, float | None, tuple[int, int] | None]]:
    """Per ledger line that records a duration or compiler-cache counts: its cell key, its build
    duration and its compiler cache's (compile steps, hits), each None when unrecorded. Other
    lines are skipped undecoded, as are lines that do not decode (module docstring); none when
    there is no ledger."""
    for line in raw_lines(ledger):
        if b'"duration_s"' not in line and b'"compile_cache"' not in line:
            continue
        try:
            e = _decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        counts = e.toolchain.compile_cache if e.toolchain else None
        yield ((e.package, e.cell.cuda, e.cell.torch, e.cell.python, e.cell.platform), e.duration_s,
               None if counts is None else (counts.compiles, counts.hits))


def durations_of(recorded: Iterable[tuple[CellKey, float | None, tuple[int, int] | None]]) -> Durations:
    """The positive durations among ``recorded`` (:func:`recorded_builds`)."""
    return Durations.of((key, duration) for key, duration, _ in recorded if duration is not None and duration > 0)


def read_durations(ledger: Path) -> Durations:
    """Every recorded duration of ``ledger`` (none when the file is missing)."""
    return durations_of(recorded_builds(ledger))
