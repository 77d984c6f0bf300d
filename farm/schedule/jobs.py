"""Cells -> CI jobs. A cell is one build job, unless its recipe says ``sharding: N`` for its
platform: then it is N compile jobs (``farm build ... --shard I/N``) and one link job
(``farm build ... --link``) that runs after them and takes their objects (CI artifacts).

Every one of those jobs counts against the run's job capacity (GitHub runs at most 256 jobs from
one matrix), so :func:`cost` is what :func:`farm.schedule.waves.schedule` charges per cell and
a wave never holds part of a sharded cell. The link jobs form a matrix of their own, after the
build matrices (a job cannot wait for some entries of another matrix only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matrix.py renders these entries: no import cycle at run time
    from farm.schedule.matrix import PlannedCell


def cost(cell: PlannedCell) -> int:
    """Jobs a cell takes: 1, or N compile jobs + 1 link job."""
    return 1 if cell.compile_jobs < 2 else cell.compile_jobs + 1


def _entry(cell: PlannedCell, shard: str, name: str) -> dict[str, Any]:
    # ``name`` is also the CI artifact's name: no '/' allowed there
    return {**cell.github_entry(), "shard": shard, "name": name}


def build_entries(cells: Iterable[PlannedCell]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(build matrix entries, link matrix entries). An unsharded cell's entry is unchanged; a
    sharded cell adds ``shard`` (``I/N`` or ``link``) and ``name`` (``<id>.shard-I-of-N``)."""
    build: list[dict[str, Any]] = []
    link: list[dict[str, Any]] = []
    for cell in cells:
        n = cell.compile_jobs
        if n < 2:
            build.append(cell.github_entry())
            continue
        cid = cell.cell.id
        build += [_entry(cell, f"{i}/{n}", f"{cid}.shard-{i}-of-{n}") for i in range(n)]
        link.append(_entry(cell, "link", f"{cid}.link"))
    return build, link


def job_counts(cells: Iterable[PlannedCell]) -> tuple[int, int]:
    """(build matrix entries, link jobs) for these cells."""
    build = link = 0
    for cell in cells:
        build += max(1, cell.compile_jobs)
        link += cell.compile_jobs > 1
    return build, link
