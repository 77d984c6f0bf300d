"""Recorded build durations from the ledger: what :mod:`farm.schedule.cost` plans with.

Each ledger entry may carry ``duration_s`` (the compute seconds its cell's build took) and its
compiler cache's counts (:mod:`farm.schedule.hitrate` reads those). The ledger's index keeps both
on each record, decoded in the same pass as the rest of the line
(:mod:`farm.provenance.ledgerline`): the matrix reads the ledger once. A line whose duration or
counts do not decode is indexed without them, and a missing duration only means the cell is
estimated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from farm.provenance.ledger import LedgerIndex
from farm.schedule.cost import CellKey, Durations


def recorded_builds(ledger: LedgerIndex) -> Iterator[tuple[CellKey, float | None, tuple[int, int] | None]]:
    """Per ledger record with a duration or compiler-cache counts: its cell key, its build
    duration and its compiler cache's (compile steps, hits), each None when unrecorded."""
    for r in ledger.records:
        if r.key is not None and (r.duration is not None or r.compile_cache is not None):
            k = r.key
            yield (k.package, k.cuda, k.torch, k.python, k.platform), r.duration, r.compile_cache


def durations_of(recorded: Iterable[tuple[CellKey, float | None, tuple[int, int] | None]]) -> Durations:
    """The positive durations among ``recorded`` (:func:`recorded_builds`)."""
    return Durations.of((key, duration) for key, duration, _ in recorded if duration is not None and duration > 0)
