"""Compiler-cache hit rates from the ledger, and what they make of a cell's build time.

Each built wheel records its compiler cache's counts (``toolchain.compile_cache``: compile steps
and hits). What the next build of a cell hits depends on what the cache still holds:

- a store that keeps what it is given (CI's S3 store, a local folder: ``retained``) holds every
  step of every cell built before, so the next build of a recorded cell (an epoch bump that changed
  nothing the compiler sees, a retried job) is expected to hit all of its steps;
- the Actions cache keeps next to nothing of a bump for the next one (10 GB, least recently used
  evicted, against ~300 GB of toolkit and torch keys alone): a cell is expected to hit like its
  package's recorded builds on that platform did (their median hit share); a new torch minor
  nowhere.

A recorded duration holds a part no cache shortens (the build environment, repair, assertion,
stamp and import check) and a compile of which each cached step still costs a share of compiling
it (preprocessing for its key, copying the object): both from ``recipe_times.json``
(:mod:`farm.schedule.recipetimes`), each with its basis.

    cold compile = (recorded - fixed) / (1 - h_recorded * (1 - hit_cost))
    expected     = fixed + cold compile * (1 - h_expected * (1 - hit_cost))

The matrix's cost estimate takes the rates once from the ledger's index (:func:`hit_rates_of`) and
each cell's expected seconds (:meth:`HitRates.seconds`) before its wave is costed; sharding and
refusals are planned on the unscaled estimate (a cache may be cold).

Pure. Counts that make no sense are skipped: a missing rate is 0 (every step compiles), the cost
of a build without a cache.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from farm.model.cells import NO_TORCH
from farm.schedule.cost import CellKey
from farm.schedule.recipetimes import recipe_times


def fixed_seconds(key: CellKey) -> float:
    """What the cell's build spends outside its compile, which no cache shortens."""
    return recipe_times().build_fixed_s(linked=key[2] != NO_TORCH)


@dataclass(frozen=True)
class HitRates:
    """Recorded hit shares (0..1): per cell (its last build), and the median per (package,
    platform); ``retained``: the compiler cache keeps every step it is given (an S3 store)."""

    cells: Mapping[CellKey, float]
    typical: Mapping[tuple[str, str], float]
    retained: bool = False

    @classmethod
    def of(cls, recorded: Iterable[tuple[CellKey, int, int]], *, retained: bool = False) -> HitRates:
        """From (cell key, compile steps, hits), oldest first (a later record of a cell wins)."""
        cells = {key: hits / compiles for key, compiles, hits in recorded if compiles > 0 and 0 <= hits <= compiles}
        by: dict[tuple[str, str], list[float]] = {}
        for key, rate in cells.items():
            by.setdefault((key[0], key[4]), []).append(rate)
        return cls(cells, {k: statistics.median(v) for k, v in by.items()}, retained)

    def expected(self, key: CellKey) -> float:
        """The hit share the cell's next build is expected to have: all of it where a store that
        keeps its steps has the cell's last build; else its package's on the platform."""
        if self.holds(key):
            return 1.0
        return self.typical.get((key[0], key[4]), 0.0)

    def holds(self, key: CellKey) -> bool:
        """The cache holds every step of the cell's last build: a store that keeps them recorded it."""
        return self.retained and key in self.cells

    def seconds(self, key: CellKey, seconds: float, *, recorded: bool = True, fixed: float | None = None) -> float:
        """What a build of the cell taking ``seconds`` is expected to take next time: ``recorded``
        (a duration the cell's own last build measured, at its own hit share) or not (an estimate
        of a build without a cache); ``fixed``: its part no cache shortens (default: measured)."""
        fixed = min(seconds, fixed_seconds(key) if fixed is None else fixed)
        saved = 1 - recipe_times().value("hit_cost")  # of a step's compile, when the cache serves it
        before = self.cells.get(key, 0.0) if recorded else 0.0
        cold = (seconds - fixed) / (1 - before * saved)
        return fixed + cold * (1 - self.expected(key) * saved)

    def warm_seconds(self, key: CellKey, seconds: float, *, recorded: bool = True) -> float:
        """:meth:`seconds` for a warm cache: the package's recorded hit share where there is one,
        else every compile step a hit."""
        if (key[0], key[4]) in self.typical or self.holds(key):
            return self.seconds(key, seconds, recorded=recorded)
        return replace(self, typical={**self.typical, (key[0], key[4]): 1.0}).seconds(key, seconds, recorded=recorded)


def hit_rates_of(recorded: Iterable[tuple[CellKey, float | None, tuple[int, int] | None]], *,
                 retained: bool = False) -> HitRates:
    """The compile-cache counts among ``recorded`` (:func:`farm.schedule.durations.recorded_builds`)."""
    return HitRates.of(((key, *counts) for key, _, counts in recorded if counts is not None), retained=retained)
