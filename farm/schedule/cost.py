"""What a cell costs to build, what a wave costs, and which cells no hosted runner can finish.

GitHub stops a hosted job at 6 hours. A cell's build time comes from the ledger (``duration_s``,
the compute seconds of the cell's build, all its jobs together, recorded when it was last built:
any epoch, any version), else from the recorded cells of the same package and platform (their
median: CUDA, torch and Python move a build's time far less than the package does), else from
the recipe's build measured on the repository's build host (``recipe_times.json``:
:mod:`farm.schedule.recipetimes`, for the cell's number of targets, times the factor from that
host to a hosted runner), else from an estimate: :data:`DEFAULT_JOB_S`
per job, times the recipe's ``sharding`` where it declares one (a recipe shards because its
compile is long). The last two are times :data:`PLATFORM_FACTOR` on Windows.

A cell whose last build was killed at the limit is planned at least :data:`KILLED_MARGIN` times
what its jobs ran; one whose build failed is built again, and refused once the same job of it
failed three times (or it failed six times in all) with its recipe and ``_defaults.yml``
unchanged (farm/schedule/attempts.py). A warm plan (``warm``: the compiler cache holds what the
recorded hit rates say, or everything where none is recorded) shards and refuses by the warm
time.

From that, per cell (:func:`plan_cell`):

- a cell whose jobs fit stays as it is;
- a cell that shards on its platform gets more compile jobs when one would near the limit
  (:data:`NEAR_LIMIT` of it), so each compile job is back under :data:`TARGET_JOB_S`;
- a cell that cannot shard on its platform and would near the limit in one job is **refused**,
  with the reason: no hosted runner can finish it, so it is never scheduled to time out.

:func:`wave_cost` is a wave's bill: jobs, runner-hours, and the wall time at N concurrent jobs
(GitHub's Free plan runs 20), longest jobs first as the plan orders them, each job with the set-up
every hosted job pays before ``farm build`` (``recipe_times.json``), then the wave's uploads at
the token's 500 an hour (its publish jobs queue behind its builds). A wave's artifacts (its
wheels, its compile shards' objects) must outlive it and its last publish job
(:data:`PUBLISH_TAIL_S`): :func:`fit_retention` takes fewer cells into a wave whose bill would
pass the artifacts' retention. All of it is pure.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from farm.schedule.attempts import KILLED, KILLED_MARGIN, Attempt, Attempts, refusal
from farm.schedule.jobs import cost as jobs_of
from farm.schedule.recipetimes import RecipeTimes, recipe_times
from farm.schedule.waves import Wave, schedule

if TYPE_CHECKING:  # matrix.py plans the cells costed here: no import cycle at run time
    from farm.model.config import Sharding
    from farm.schedule.hitrate import HitRates
    from farm.schedule.matrix import Matrix, PlannedCell

JOB_LIMIT_S = 6 * 3600  # GitHub stops a hosted job here
NEAR_LIMIT = 0.8  # a job estimated past this share of the limit is at risk: shard it, or refuse it
TARGET_JOB_S = 3 * 3600  # what a compile job of a cell sharded by duration aims at
DEFAULT_JOB_S = 45 * 60  # one build job, when nothing is recorded
LINK_JOB_S = 15 * 60  # a sharded cell's link job (the link, the assertion, the repair)
PLATFORM_FACTOR: Mapping[str, float] = {"win_amd64": 1.5}  # MSVC + nvcc on hosted Windows runners
MAX_COMPILE_JOBS = 64  # a cell never fans out wider than this: its link job waits for all of them
DEFAULT_CONCURRENCY = 20  # concurrent jobs on GitHub's Free plan (Pro 40, Team 60, Enterprise 500)
# Release uploads are content-creating requests: GitHub allows 500 an hour to one token.
UPLOADS_PER_HOUR = 500
# The workflows keep a wave's artifacts this long (build-shard.yml's retention-days; GitHub: 1-90).
ARTIFACT_RETENTION_DAYS = 7
# After a wave's last build, its artifacts are still read by its last publish job (at most a job).
PUBLISH_TAIL_S = JOB_LIMIT_S

# (package, cuda, torch, python tag, platform)
CellKey = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Durations:
    """Recorded build times (seconds): per cell, and the median per (package, platform); and the
    recipes' builds ``measured`` on the reference host, times ``runner_factor`` on a hosted runner."""

    cells: Mapping[CellKey, float]
    typical: Mapping[tuple[str, str], float]
    measured: RecipeTimes | None = None
    runner_factor: float = 1.0

    @classmethod
    def of(cls, recorded: Iterable[tuple[CellKey, float]]) -> Durations:
        """From (cell key, seconds) pairs, oldest first (a later record of a cell wins)."""
        cells = {key: float(seconds) for key, seconds in recorded if seconds > 0}
        by: dict[tuple[str, str], list[float]] = {}
        for key, seconds in cells.items():
            by.setdefault((key[0], key[4]), []).append(seconds)
        return cls(cells, {k: statistics.median(v) for k, v in by.items()})


@dataclass(frozen=True)
class Estimate:
    seconds: float  # the cell's build, all jobs together
    source: str  # "recorded" | "package" | "measured" | "estimate" | "killed"
    why: str = ""  # said in a refusal instead of the source, where there is more to say


def estimate(key: CellKey, durations: Durations, sharding: int = 1, targets: int = 0) -> Estimate:
    """The cell's build time: recorded, else its package's on that platform, else its recipe's
    measured build (for an arch list of ``targets`` targets), else the default (``sharding``: the
    recipe's declared compile jobs on any platform: it declares a long build)."""
    recorded = durations.cells.get(key)
    if recorded is not None:
        return Estimate(recorded, "recorded")
    typical = durations.typical.get((key[0], key[4]))
    if typical is not None:
        return Estimate(typical, "package")
    measured = durations.measured.seconds(key[0], targets) if durations.measured is not None else None
    if measured is not None:
        return Estimate(measured * durations.runner_factor * PLATFORM_FACTOR.get(key[4], 1.0), "measured")
    return Estimate(DEFAULT_JOB_S * max(1, sharding) * PLATFORM_FACTOR.get(key[4], 1.0), "estimate")


@dataclass(frozen=True)
class CellJobs:
    """How a cell is built: ``compile_jobs`` (1: one ordinary job), each job's estimated time,
    or ``refused`` with the reason."""

    estimate: Estimate
    compile_jobs: int
    job_s: float  # one compile job (or the only job)
    link_s: float  # 0 for an unsharded cell
    refused: str | None = None

    @property
    def jobs(self) -> int:
        return 1 if self.compile_jobs < 2 else self.compile_jobs + 1

    @property
    def runner_s(self) -> float:
        """Every job of the cell on its runner, each with its set-up."""
        link = self.link_s + job_setup_s() if self.jobs > 1 else 0.0
        return (self.job_s + job_setup_s()) * max(1, self.compile_jobs) + link


def plan_cell(est: Estimate, *, declared_jobs: int, shard_platforms: Sequence[str] = ()) -> CellJobs:
    """``declared_jobs``: the recipe's ``sharding`` for the cell's platform (1: none there);
    ``shard_platforms``: where the recipe shards at all (farm's nvcc launcher is Linux-only)."""
    near = NEAR_LIMIT * JOB_LIMIT_S
    if declared_jobs > 1:
        n = declared_jobs
        if est.seconds / n > near:  # the declared split no longer fits: split by duration
            n = min(MAX_COMPILE_JOBS, math.ceil(est.seconds / TARGET_JOB_S))
        job = est.seconds / n
        if job > near:
            return CellJobs(est, n, job, LINK_JOB_S, refused=(
                f"{_hours(est.seconds)} of compile ({est.why or est.source}) is still {_hours(job)} per job in "
                f"{n} compile jobs, near GitHub's {_hours(JOB_LIMIT_S)} job limit: build it on a "
                "self-hosted runner"))
        return CellJobs(est, n, job, LINK_JOB_S)
    if est.seconds > near:
        why = (f"its recipe shards the compile only on {', '.join(shard_platforms)} (farm's nvcc launcher "
               "is not built for Windows)" if shard_platforms
               else "its recipe has no `sharding:` to split the compile")
        return CellJobs(est, 1, est.seconds, 0.0, refused=(
            f"{_hours(est.seconds)} in one job ({est.why or est.source}) nears GitHub's {_hours(JOB_LIMIT_S)} job "
            f"limit and {why}: no hosted runner can finish it; build it on a self-hosted runner, or "
            "drop the platform from the recipe"))
    return CellJobs(est, 1, est.seconds, 0.0)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


# --------------------------------------------------------------------------------------------
# A wave's bill
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WaveCost:
    jobs: int
    runner_hours: float
    wall_hours: float  # at ``concurrency`` jobs at once, the plan's order, links after the builds
    concurrency: int
    uploads: int  # release assets the wave publishes (one per cell)
    estimated: int  # cells whose time is the default estimate (nothing recorded)

    def line(self) -> str:
        note = f"; {self.estimated} cell(s) estimated, not recorded" if self.estimated else ""
        return (f"cost: {self.jobs:,} job(s), {self.runner_hours:,.0f} runner-hours, "
                f"~{self.wall_hours:,.1f} h ({self.wall_hours / 24:,.1f} days) at {self.concurrency} "
                f"concurrent jobs; {self.uploads:,} upload(s), >= {self.uploads / UPLOADS_PER_HOUR:.1f} h "
                f"under GitHub's {UPLOADS_PER_HOUR} uploads/h{note}")

    def to_json(self) -> dict[str, float | int]:
        return {"jobs": self.jobs, "runner_hours": round(self.runner_hours, 1),
                "wall_hours": round(self.wall_hours, 1), "concurrency": self.concurrency,
                "uploads": self.uploads, "estimated_cells": self.estimated}


def job_setup_s() -> float:
    """What every hosted job spends before ``farm build`` starts (recipe_times.json: an estimate)."""
    return recipe_times().value("job_setup_s")


def makespan(durations: Sequence[float], runners: int) -> float:
    """Wall time of jobs started in order on ``runners`` slots (each job takes the first free one)."""
    if runners < 1:
        raise ValueError("runners must be >= 1")
    slots = [0.0] * min(runners, max(1, len(durations)))
    for d in durations:
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + d)
    return max(slots)


def wave_cost(plans: Sequence[CellJobs], concurrency: int = DEFAULT_CONCURRENCY) -> WaveCost:
    """The bill of the scheduled cells' plans, in the order the wave starts them: every build
    and compile job, then the link jobs (the link matrix runs after every build shard)."""
    setup = job_setup_s()
    builds = [p.job_s + setup for p in plans for _ in range(max(1, p.compile_jobs))]
    links = [p.link_s + setup for p in plans if p.compile_jobs > 1]
    # a shard's publish job queues behind the wave's build jobs and the token uploads 500 an hour,
    # so the wave's uploads follow its builds; the link jobs wait for the publish jobs
    publish = len(plans) / UPLOADS_PER_HOUR * 3600
    wall = makespan(builds, concurrency) + publish + (makespan(links, concurrency) if links else 0.0)
    return WaveCost(
        jobs=len(builds) + len(links),
        runner_hours=sum(p.runner_s for p in plans) / 3600,
        wall_hours=wall / 3600,
        concurrency=concurrency,
        uploads=len(plans),
        estimated=sum(p.estimate.source == "estimate" for p in plans),
    )


def longest_first(seconds: Sequence[float]) -> list[int]:
    """Positions in start order: longest job first (a stable sort), so the jobs that decide the
    wave's wall time get runners first and short ones fill in behind them."""
    return sorted(range(len(seconds)), key=lambda i: -seconds[i])


# --------------------------------------------------------------------------------------------
# The matrix, costed
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RefusedCell:
    cell: PlannedCell
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"id": self.cell.cell.id, "reason": self.reason}


@dataclass(frozen=True)
class Costed:
    """The matrix with each cell's jobs planned by duration: refused cells taken out (with the
    reason), each package's queue longest first, ``plans`` per kept cell id."""

    matrix: Matrix
    refused: tuple[RefusedCell, ...]
    plans: Mapping[str, CellJobs]

    def plan_of(self, cell: PlannedCell) -> CellJobs:
        return self.plans[cell.cell.id]


def killed(est: Estimate, attempt: Attempt) -> Estimate:
    """A cell's estimate after its build was killed at the job limit: at least
    :data:`KILLED_MARGIN` times what its jobs ran."""
    seconds = max(est.seconds, attempt.elapsed_s * attempt.jobs * KILLED_MARGIN)
    return Estimate(seconds, "killed", f"killed at GitHub's job limit after {_hours(attempt.elapsed_s)} in "
                                       f"{attempt.jobs} job(s) of run {attempt.run} ({attempt.job})")


def cost_matrix(matrix: Matrix, sharding: Mapping[str, Sharding | None], durations: Durations, *,
                time_limit: bool = True, hit_rates: HitRates | None = None, attempts: Attempts | None = None,
                unchanged: Callable[[Attempt], bool] | None = None, warm: bool = False) -> Costed:
    """Plan every cell to build (pure). ``sharding``: package -> its recipe's ``sharding``;
    ``time_limit``: False keeps the cells no hosted runner can finish (a self-hosted run).
    ``hit_rates``: the compiler cache's recorded hit rates (:mod:`farm.schedule.hitrate`): each
    planned job's time is scaled by the cell's expected hit share, for ordering and the waves'
    cost; sharding and refusals are decided on the unscaled estimate (a cache may be cold),
    unless the plan is ``warm``. ``attempts``: the builds that ended without a wheel, by (cell
    key, epoch), oldest first; ``unchanged(attempt)``: whether a failed one's recipe and defaults
    are today's, for the retry policy (:func:`~farm.schedule.attempts.refusal`; None: refuse no
    failed cell)."""
    plans: dict[str, CellJobs] = {}
    refused: list[RefusedCell] = []
    packages = []
    for pkg in matrix.packages:
        shard = sharding.get(pkg.package)
        kept: list[tuple[float, PlannedCell]] = []
        for planned in pkg.to_build:
            p, c = planned, planned.cell
            key = (c.package, c.cuda, c.torch, c.python, c.platform)
            est = estimate(key, durations, shard.jobs if shard else 1, len(p.archs))
            history = attempts.get((key, p.epoch), ()) if attempts else ()
            attempt = history[-1] if history else None
            why = refusal(history, unchanged) if unchanged is not None else None
            if why is not None:
                refused.append(RefusedCell(p, why))
                continue
            # warm: asked for, or the compiler cache is a store that keeps every step and holds the
            # cell's last build; then the cell is sharded by its warm time, in no more jobs than that needs
            cell_warm = hit_rates is not None and (warm or hit_rates.holds(key))
            declared = p.compile_jobs
            if attempt is not None and attempt.outcome == KILLED:
                est, cell_warm = killed(est, attempt), False
            elif cell_warm and hit_rates is not None:
                est = replace(est, seconds=hit_rates.warm_seconds(key, est.seconds, recorded=est.source == "recorded"))
                declared = min(declared, max(1, math.ceil(est.seconds / TARGET_JOB_S)))
            plan = plan_cell(est, declared_jobs=declared, shard_platforms=shard.platforms if shard else ())
            if plan.refused and time_limit:
                refused.append(RefusedCell(p, plan.refused))
                continue
            if plan.refused:  # kept anyway: as declared, the time limit is the runner's business
                plan = CellJobs(est, p.compile_jobs, est.seconds / max(1, p.compile_jobs),
                                LINK_JOB_S if p.compile_jobs > 1 else 0.0)
            if plan.compile_jobs != p.compile_jobs:
                p = replace(p, compile_jobs=plan.compile_jobs)
            if hit_rates is not None and not cell_warm and est.source != "killed":
                # a compile shard's job is all compile; a whole cell's has its fixed part
                plan = replace(plan, job_s=hit_rates.seconds(key, plan.job_s, recorded=est.source == "recorded",
                                                             fixed=0.0 if plan.compile_jobs > 1 else None))
            plans[c.id] = plan
            kept.append((plan.job_s, p))
        kept.sort(key=lambda kp: -kp[0])  # stable: grid order among equals
        packages.append(replace(pkg, to_build=tuple(p for _, p in kept)))
    return Costed(replace(matrix, packages=tuple(packages)), tuple(refused), plans)


def plan_wave(costed: Costed, capacity: int | None) -> Wave:
    """The run's wave: chosen round-robin across packages, started longest job first, with the
    cells no runner can finish set aside."""
    wave = schedule(costed.matrix, capacity, jobs=jobs_of)
    return replace(wave, scheduled=tuple(ordered(wave.scheduled, costed)), refused=costed.refused)


def fit_retention(costed: Costed, capacity: int, concurrency: int = DEFAULT_CONCURRENCY, *,
                  retention_days: float = ARTIFACT_RETENTION_DAYS, matrix: Matrix | None = None) -> int:
    """The most jobs a wave of ``matrix`` (default: the costed one) may take so that its bill at
    ``concurrency``, plus its last publish job, ends inside the artifacts' retention:
    ``capacity`` when the full wave does, else fewer (never below one cell's jobs)."""
    costed = replace(costed, matrix=matrix or costed.matrix)
    limit_h = retention_days * 24 - PUBLISH_TAIL_S / 3600

    def fits(cap: int) -> bool:
        wave = plan_wave(costed, cap)
        return wave_cost([costed.plan_of(p) for p in wave.scheduled], concurrency).wall_hours <= limit_h

    if capacity < 1 or fits(capacity):
        return capacity
    lo, hi = 1, capacity - 1  # the largest that fits: wall time grows with the jobs taken
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def drain_model(costed: Costed, capacity: int, concurrency: int = DEFAULT_CONCURRENCY, *,
                retention_days: float | None = None) -> list[WaveCost]:
    """The waves that drain the whole queue (nothing failing), as the workflow chains them: each
    the :func:`plan_wave` of what the previous ones left, sized to the artifacts'
    ``retention_days`` where given (:func:`fit_retention`)."""
    out = []
    matrix = costed.matrix
    while matrix.cells:
        cap = capacity if retention_days is None else fit_retention(costed, capacity, concurrency,
                                                                    retention_days=retention_days, matrix=matrix)
        wave = plan_wave(replace(costed, matrix=matrix), cap)
        if not wave.scheduled:
            break  # a cell bigger than a run: schedule() says so to the user
        out.append(wave_cost([costed.plan_of(p) for p in wave.scheduled], concurrency))
        left = {p.cell.id for p in wave.deferred}
        matrix = replace(matrix, packages=tuple(
            replace(pkg, to_build=tuple(p for p in pkg.to_build if p.cell.id in left)) for pkg in matrix.packages))
    return out


def ordered(cells: Sequence[PlannedCell], costed: Costed) -> list[PlannedCell]:
    """A wave's cells in start order: longest job first."""
    jobs = [costed.plan_of(p).job_s for p in cells]
    return [cells[i] for i in longest_first(jobs)]
