"""Waves: what one workflow run builds of the matrix's cells, and what waits for the next.

The cells to build are a work queue. :func:`schedule` takes what one workflow run can start (its
shard jobs x 256 cells) round-robin across packages and defers the rest; deferred cells stay out
of the ledger, so the next run schedules them (docs/maintainers.md, "How a bump drains").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from farm.errors import UsageError
from farm.schedule.matrix import Matrix, PlannedCell

if TYPE_CHECKING:  # cost.py plans the cells a wave takes: no import cycle at run time
    from farm.schedule.cost import RefusedCell

MAX_REFUSED_SHOWN = 20


@dataclass(frozen=True)
class Wave:
    """The cells one run schedules (at most its job capacity) and the rest, deferred.

    Deferred cells are not dropped: they are still missing from the ledger, so the next run's
    matrix has them again. ``scheduled`` keeps the matrix order (package, then grid order)."""

    matrix: Matrix
    scheduled: tuple[PlannedCell, ...]
    deferred: tuple[PlannedCell, ...]
    capacity: int | None  # jobs one run may start; None: no limit
    # cells no hosted runner can finish (farm/schedule/cost.py): neither scheduled nor deferred
    refused: tuple[RefusedCell, ...] = ()

    def per_package(self) -> dict[str, tuple[int, int]]:
        """package -> (scheduled, deferred), for every package of the matrix."""
        out = {pkg.package: [0, 0] for pkg in self.matrix.packages}
        for p in self.scheduled:
            out[p.cell.package][0] += 1
        for p in self.deferred:
            out[p.cell.package][1] += 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    def refused_by_package(self) -> dict[str, int]:
        return dict(Counter(r.cell.cell.package for r in self.refused))

    def totals(self) -> dict[str, int]:
        """``scheduled + deferred + refused == to_build``."""
        return {**self.matrix.totals(), "scheduled": len(self.scheduled), "deferred": len(self.deferred),
                "refused": len(self.refused)}


def one_job(cell: PlannedCell) -> int:  # noqa: ARG001 (a cost function: every cell costs one job)
    return 1


def schedule(
    matrix: Matrix,
    capacity: int | None,
    *,
    jobs: Callable[[PlannedCell], int] = one_job,
) -> Wave:
    """Take cells round-robin across packages until ``capacity`` jobs are used; defer the rest.

    The order is stable and fair: packages in the matrix's order (by name), each package's
    cells in grid order, one cell of each package per round. So every package with work
    advances in every wave, and a package whose cells keep failing (they stay in the queue)
    holds at most its share of a wave, never the whole of it. ``jobs(cell)`` is the number of
    jobs a cell costs (1; more where a build is split into several jobs); a cell that does not
    fit in what is left is deferred, and smaller ones after it may still fit."""
    if capacity is None:
        return Wave(matrix, tuple(matrix.cells), (), None)
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    queues = [pkg.to_build for pkg in matrix.packages if pkg.to_build]
    chosen: set[str] = set()  # the chosen cells' ids
    left = capacity
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        if left <= 0:
            break
        for q in queues:
            if i < len(q):
                cost = jobs(q[i])
                if cost <= left:
                    chosen.add(q[i].cell.id)
                    left -= cost
    scheduled = tuple(p for p in matrix.cells if p.cell.id in chosen)
    deferred = tuple(p for p in matrix.cells if p.cell.id not in chosen)
    return Wave(matrix, scheduled, deferred, capacity)


def deferred_error(wave: Wave) -> UsageError:
    """``--fail-on-deferred``: the queue is longer than one run."""
    n = len(wave.scheduled) + len(wave.deferred)
    return UsageError(
        f"the matrix has {n} cells but one run schedules at most {wave.capacity} jobs: "
        f"{len(wave.deferred)} cell(s) would be deferred to a later run",
        hint="drop --fail-on-deferred to build in waves, or narrow the matrix (packages, --cuda)",
    )


def wave_advice(wave: Wave) -> list[str]:
    """What a run with deferred cells means: nothing is lost, the next run takes them; and each
    refused cell with its reason."""
    out = []
    if wave.deferred:
        out.append(f"{len(wave.deferred)} cell(s) deferred: one run starts at most {wave.capacity} jobs; "
                   "they stay in the queue (not in the ledger) and the next run schedules them")
    if wave.refused:
        out.append(f"{len(wave.refused)} cell(s) refused: no hosted runner can finish them (GitHub stops a job "
                   "at 6 h); they stay out of every wave until their time is recorded lower, or "
                   "`farm matrix --no-time-limit` (a self-hosted runner):")
        out += [f"  {r.cell.cell.id}: {r.reason}" for r in wave.refused[:MAX_REFUSED_SHOWN]]
        if len(wave.refused) > MAX_REFUSED_SHOWN:
            out.append(f"  and {len(wave.refused) - MAX_REFUSED_SHOWN} more (the plan's refused_cells lists all)")
    return out
