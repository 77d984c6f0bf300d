"""Compiler-cache hit rates from the ledger, as a factor on a cell's estimated build time.

Each built wheel records its compiler cache's counts (``toolchain.compile_cache``: compile steps
and hits). A cell's next build is expected to hit like its package's recorded builds on that
platform did (their median hit share): an epoch bump that changed nothing the compiler sees hits
nearly everywhere, a new torch minor nowhere. A recorded duration was measured at its own hit
share; :meth:`HitRates.factor` turns it into the expected one, assuming compiling is
:data:`COMPILE_SHARE` of a build and a hit costs nothing:

    expected = recorded * (1 - COMPILE_SHARE * h_expected) / (1 - COMPILE_SHARE * h_recorded)

The hook for the matrix's cost estimate: read the rates once (``read_hit_rates(ledger)``) and
multiply each cell's estimated seconds by ``factor(key, recorded=<the estimate is the cell's own
recorded duration>)`` before its wave is costed; plan sharding and refusals on the unscaled
estimate (a cache may be cold).

Pure, except :func:`read_hit_rates`, which decodes the few fields it needs from each ledger line.
A line that does not decode, or counts that make no sense, are skipped: a missing rate is 0
(every step compiles), the cost of a build without a cache.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.schedule.cost import CellKey
from farm.schedule.durations import recorded_builds

COMPILE_SHARE = 0.9  # of a CUDA extension's build, the compiling (nvcc nearly all of it)

@dataclass(frozen=True)
class HitRates:
    """Recorded hit shares (0..1): per cell (its last build), and the median per (package, platform)."""

    cells: Mapping[CellKey, float]
    typical: Mapping[tuple[str, str], float]

    @classmethod
    def of(cls, recorded: Iterable[tuple[CellKey, int, int]]) -> HitRates:
        """From (cell key, compile steps, hits), oldest first (a later record of a cell wins)."""
        cells: dict[CellKey, float] = {}
        for key, compiles, hits in recorded:
            if compiles > 0 and 0 <= hits <= compiles:
                cells[key] = hits / compiles
        by: dict[tuple[str, str], list[float]] = {}
        for key, rate in cells.items():
            by.setdefault((key[0], key[4]), []).append(rate)
        return cls(cells, {k: statistics.median(v) for k, v in by.items()})

    @classmethod
    def none(cls) -> HitRates:
        return cls({}, {})

    def expected(self, key: CellKey) -> float:
        """The hit share the cell's next build is expected to have: its package's on the platform."""
        return self.typical.get((key[0], key[4]), 0.0)

    def factor(self, key: CellKey, *, recorded: bool = True) -> float:
        """What a duration of the cell is multiplied by: ``recorded`` (a duration the cell's own last
        build measured, at its own hit share) or not (an estimate of a build without a cache)."""
        before = self.cells.get(key, 0.0) if recorded else 0.0
        return (1 - COMPILE_SHARE * self.expected(key)) / (1 - COMPILE_SHARE * before)


    def warm_factor(self, key: CellKey, *, recorded: bool = True) -> float:
        """:meth:`factor` for a warm cache: the package's recorded hit share where there is one,
        else every compile step a hit."""
        if (key[0], key[4]) in self.typical:
            return self.factor(key, recorded=recorded)
        before = self.cells.get(key, 0.0) if recorded else 0.0
        return (1 - COMPILE_SHARE) / (1 - COMPILE_SHARE * before)


def hit_rates_of(recorded: Iterable[tuple[CellKey, float | None, tuple[int, int] | None]]) -> HitRates:
    """The compile-cache counts among ``recorded`` (:func:`farm.schedule.durations.recorded_builds`)."""
    return HitRates.of((key, *counts) for key, _, counts in recorded if counts is not None)


def read_hit_rates(ledger: Path) -> HitRates:
    """Every recorded compile-cache count of ``ledger`` (none when the file is missing)."""
    return hit_rates_of(recorded_builds(Path(ledger)))
