"""A publish job's plan (pure): its share of the token's limits and when it stops. ``farm
publish-shard`` runs by these, and a simulation of a drain plans with the same functions.

What a publish job asks of GitHub's REST API (farm/publish/releases.py):

- one upload per asset (a ``POST``, content-creating);
- one request per release it publishes to, once per job: a ``GET`` of the release by its tag
  where the ledger already records assets under that tag, else a ``POST`` that creates it (a
  second request only where the guess was wrong: another job created it meanwhile);
- a release's asset list only when an upload meets a name already taken (a re-run, a job killed
  between an upload and its record): rare, and not planned for;
- nothing for the cells' artifacts when it runs in the run that made them: they come from the
  run's artifact service (the one ``actions/download-artifact`` uses, with the job's runtime
  token), which is not the REST API and does not count against its limits
  (farm/publish/artifacts.py).

So a job that publishes A assets to R releases sends A + R requests. The jobs of one wave share
the token: each takes a share of its limits in proportion to the cells it publishes
(:func:`publish_shares`), so a shard of 256 cells is not paced like one of 10.

A job's clock (:class:`JobClock`) starts when the job does; GitHub stops it at the job limit. It
stops itself :data:`RESERVE_S` before that (the last ledger push and the report's upload), and
hands every cell it has not published to the next publish job (the run's ``publish-rest`` job:
docs/ci.md). It also stops when GitHub's own rate-limit answers have cost it
:data:`MAX_RATE_LIMIT_WAIT_S` in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from farm.publish.ratelimit import WaitBudget
from farm.schedule.cost import JOB_LIMIT_S
from farm.schedule.slices import LINK

# Kept free at the end of a publish job: its last ledger commit and push (rebased and retried
# against the other jobs' pushes) and the upload of its report.
RESERVE_S = 15 * 60
# What a publish job may spend in all on waits GitHub asks for (Retry-After, a spent primary
# limit): past it, another client is starving the token and the job hands on the rest.
MAX_RATE_LIMIT_WAIT_S = 30 * 60
# Before a cell, a job wants this many times its slowest cell so far left on its clock.
CELL_MARGIN = 2.0
FIRST_CELL_S = 60.0  # what a job expects its first cell to take, before it has timed one
REST = "rest"  # the run's last publish job: every cell the others handed on


def publish_shares(cells: Mapping[str, int]) -> dict[str, float]:
    """Each publish job's share of the token's limits (job name -> a fraction; the fractions add
    up to 1): in proportion to the cells it publishes. A job with no cells gets none."""
    total = sum(max(0, n) for n in cells.values())
    return {job: (max(0, n) / total if total else 0.0) for job, n in cells.items()}


def job_share(job: str, cells: Mapping[str, int], publishers: int | None = None) -> float:
    """Publish job ``job``'s share of the token's limits: 1/N where ``--publishers N`` says so;
    else the whole token for the link shard's job and for :data:`REST` (the build shards' jobs
    leave the link shard its share; its job itself is queued behind the next wave's builds and
    runs after them, GitHub's answers pacing it beside the next wave's jobs; ``rest`` runs after
    every other publish job of the run: alone); else its :func:`publish_shares` of the wave's
    jobs' ``cells``, the whole token for a job with none."""
    if publishers:
        return 1.0 / publishers
    if job in (LINK, REST):
        return 1.0
    return publish_shares(cells).get(job, 0.0) or 1.0


def rate_limit_wait_s(job: str, limit_s: float) -> float:
    """The most publish job ``job`` waits in all on GitHub's rate-limit answers before it hands the
    rest on; :data:`REST`, which hands on to no job, its whole clock of ``limit_s``."""
    return limit_s if job == REST else MAX_RATE_LIMIT_WAIT_S


def waits_out(budget: WaitBudget | None, rate_limit: bool, attempt: int, wait_s: float, *, max_retries: int,
              max_wait_s: float) -> bool:
    """Whether a REST client waits ``wait_s`` and tries again after the refusal of its try
    ``attempt`` (from 0). A job's budget (:meth:`JobClock.budget`) alone bounds its waits on
    GitHub's rate-limit answers: a wait past it raises :class:`~farm.errors.OutOfTime` and the job
    hands the cell on instead of failing it. Any other client, and any other refusal: at most
    ``max_retries`` retries, never a wait past ``max_wait_s``."""
    if rate_limit and budget is not None and budget.bounded:
        return True
    return attempt < max_retries and wait_s <= max_wait_s


@dataclass(frozen=True)
class JobClock:
    """A publish job's clock: it started at ``started`` (epoch seconds), GitHub stops it at
    ``limit_s``, and it keeps ``reserve_s`` for its last push and its report."""

    started: float
    limit_s: float = JOB_LIMIT_S
    reserve_s: float = RESERVE_S

    @property
    def deadline(self) -> float:
        """When the job stops publishing."""
        return self.started + self.limit_s - self.reserve_s

    def left(self, now: float) -> float:
        return self.deadline - now

    def budget(self, rate_limit_s: float = MAX_RATE_LIMIT_WAIT_S) -> WaitBudget:
        """The wait budget of the job's REST clients."""
        return WaitBudget(self.deadline, rate_limit_s)


@dataclass
class CellPace:
    """What a publish job expects its next cell to take: its slowest cell so far, each timed from
    the start of one cell to the next less the throttle's waits in between (its share's hour window
    can hold a cell for most of an hour, and the wait before the next upload is counted once, as
    that wait); :data:`FIRST_CELL_S` before it has timed one."""

    last: float = 0.0
    waited: float = 0.0
    slowest: float = 0.0
    timed: bool = False

    def next_cell_s(self, now: float, waited_s: float) -> float:
        """Called before each cell at ``now``, the throttle having waited ``waited_s`` in all."""
        if self.timed:
            self.slowest = max(self.slowest, now - self.last - (waited_s - self.waited))
        self.timed, self.last, self.waited = True, now, waited_s
        return self.slowest or FIRST_CELL_S


def next_cell_fits(left_s: float, slowest_cell_s: float, next_wait_s: float) -> bool:
    """Whether a job with ``left_s`` on its clock starts another cell: it wants the throttle's
    wait for its next upload plus :data:`CELL_MARGIN` times its slowest cell so far."""
    return left_s > next_wait_s + CELL_MARGIN * slowest_cell_s
