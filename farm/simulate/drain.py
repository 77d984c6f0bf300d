"""An epoch bump drained under GitHub's clocks and limits: a discrete-event simulation.

Every decision is farm's own: each run's wave is :func:`farm.schedule.cost.plan_wave` of what the
ledger lacks, costed from the durations and compiler-cache counts the ledger holds so far
(:class:`~farm.schedule.cost.Durations`, :class:`~farm.schedule.hitrate.HitRates`); its shards are
:func:`~farm.schedule.jobs.build_entries` cut into matrices of :data:`~farm.schedule.slices.SHARD_SIZE`;
each publish job walks :func:`~farm.schedule.stream.shard_cells` of its shard under farm's own
:class:`~farm.publish.ratelimit.Throttle` and its REST client's retries; the chain asks
:func:`~farm.schedule.outcome.from_reports` whether the next wave starts; and what the workflows
fix (shards, publishers, retention, time limits, the nightly) is read from them
(:mod:`farm.simulate.workflow`).

What is simulated is the world those decisions meet: ``runners`` concurrent jobs taken in order,
each job's clock and GitHub's kill at its time limit, the REST limits every job of the repository
shares (:class:`~farm.simulate.githubsim.Rest`), artifact retention, the Actions cache
(:class:`~farm.simulate.githubsim.ActionsCache`) or an S3 store for the compiler cache, git's file
sizes for the ledger, and build jobs that fail. A job's time comes from the measured per-recipe
times (:mod:`farm.schedule.recipetimes`) and the inputs table (:mod:`farm.simulate.inputs`).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import math
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from farm.errors import OutOfTime
from farm.model.cells import NO_TORCH
from farm.model.config import FarmConfig, Sharding
from farm.provenance.ledgerfiles import segment_of
from farm.provenance.ledgerline import ExistsKey
from farm.publish.budget import (
    REST,
    CellPace,
    JobClock,
    job_share,
    next_cell_fits,
    rate_limit_wait_s,
    waits_out,
)
from farm.publish.ghrest import MAX_RETRIES, MAX_WAIT_S
from farm.publish.github import tag_for
from farm.publish.githubsettings import GithubSettings
from farm.publish.ratelimit import Throttle, github_limits
from farm.schedule.attempts import FAILED as FAILED_BUILD
from farm.schedule.attempts import KILLED, Attempt, refusal
from farm.schedule.cacheplan import CacheSizes, CellKeys, toolkit_size, torch_size
from farm.schedule.cost import (
    DEFAULT_JOB_S,
    CellKey,
    Costed,
    Durations,
    cost_matrix,
    drain_model,
    fit_retention,
    plan_wave,
)
from farm.schedule.hitrate import HitRates
from farm.schedule.jobs import build_entries
from farm.schedule.matrix import Matrix, PlannedCell
from farm.schedule.outcome import from_reports
from farm.schedule.recipetimes import RecipeTimes
from farm.schedule.slices import LINK, SHARD_SIZE
from farm.schedule.stream import ERROR, FAILED, HANDED_ON, PUBLISHED, CellVerdict, shard_cells
from farm.simulate.githubsim import GIT_REFUSE_BYTES, ActionsCache, Rest, expired
from farm.simulate.inputs import MB, Inputs
from farm.simulate.workflow import Workflow

DAY = 86400.0
BACKENDS = ("s3", "gha")  # where the compiler cache lives: an S3 store, or the Actions cache
ASSETS_PAGE = 100  # GitHub lists a release's assets and a run's artifacts 100 a page
CHAIN_REQUESTS = 5  # farm chain: the waiting runs, once per status (4), and the dispatch


# --------------------------------------------------------------------------------------------
# The scenario, the cells, the ledger
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    runners: int
    epochs: int = 1
    warm: bool = False  # a cold bump first: the reported bumps find the compiler cache it filled
    compile_cache: str = "s3"
    horizon_days: float = 60.0  # a bump not drained by then leaves its queue as lost cells


@dataclass(frozen=True)
class Truth:
    """What a cell really costs on a hosted runner (the planner sees only the ledger)."""

    compile_s: float  # all its compiling, cold
    linked: bool
    toolkit: str
    toolkit_bytes: int
    torch: str | None
    torch_bytes: int
    wheel_bytes: int


@dataclass
class CellState:
    planned: PlannedCell
    truth: Truth
    published: bool = False
    asset: bool = False  # on the release, recorded or not
    builds: int = 0  # artifacts made
    cached: float = 0.0  # share of its compile steps the compiler cache holds (S3 backend)
    unpublished_s: float = 0.0  # runner time of its last artifact, lost if that is never published
    unpublished_why: str = ""
    duration: float | None = None  # farm build's own time of its last artifact (None: a link job's)
    hit_share: float = 0.0  # the compiler cache's share of its last build's compile steps
    cc_keys: list[str] = field(default_factory=list)  # its compiler-cache entries (the Actions cache)


@dataclass
class Ledger:
    """The ledger as git holds it: what each record weighs, in the file it goes to (one per
    package and epoch: farm/provenance/ledgerfiles.py), and what the planner reads back."""

    record_bytes: int
    files: dict[str, int] = field(default_factory=dict)  # segment -> bytes
    durations: list[tuple[CellKey, float]] = field(default_factory=list)
    counts: list[tuple[CellKey, int, int]] = field(default_factory=list)

    def largest_file(self) -> int:
        return max(self.files.values(), default=0)

    def push(self, records: list[tuple[CellKey, float | None, int, int]], epoch: int = 0) -> bool:
        """Append ``records`` (cell key, duration, compile steps, hits) of bump ``epoch`` to their
        segments and push: GitHub refuses a push that carries a file over 100 MiB (GH001; a
        refusal farm names and does not retry) and only warns over 50 MiB."""
        after = dict(self.files)
        for (package, *_), _, _, _ in records:
            name = segment_of(package, epoch)
            after[name] = after.get(name, 0) + self.record_bytes
        if any(size > GIT_REFUSE_BYTES for size in after.values()):
            return False
        self.files = after
        for key, duration, compiles, hits in records:
            if duration is not None:
                self.durations.append((key, duration))
            self.counts.append((key, compiles, hits))
        return True


# --------------------------------------------------------------------------------------------
# The event loop and the runners
# --------------------------------------------------------------------------------------------
Process = Generator[float, None, None]  # yields the seconds to wait before it goes on


class Loop:
    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (max(when, self.now), self._seq, action))

    def run(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            self.now, _, action = heapq.heappop(self._events)
            action()
        if self._events:
            self.now = until

    def idle(self) -> bool:
        return not self._events


@dataclass
class Job:
    kind: str  # matrix, slice, build, compile, link, publish, chain
    start: Callable[[Job], Process]
    done: Callable[[Job], None]
    limit_s: float = math.inf
    began: float = 0.0
    ended: float = 0.0
    killed: bool = False
    ok: bool = True
    pushed_at: float = 0.0  # a publish job: its last ledger push
    unpushed: list[CellState] = field(default_factory=list)  # a publish job: records not pushed yet


class Runners:
    """``count`` concurrent jobs, taken first come first served; a job holds its slot from the
    moment a runner is assigned (after ``queue_s``) until it ends or GitHub kills it."""

    def __init__(self, loop: Loop, count: int, queue_s: float, on_runner_s: Callable[[Job, float], None]) -> None:
        self.loop, self.free, self.queue_s, self.on_runner_s = loop, count, queue_s, on_runner_s
        self.waiting: deque[Job] = deque()

    def submit(self, jobs: Iterable[Job]) -> None:
        self.waiting.extend(jobs)
        self._dispatch()

    def _dispatch(self) -> None:
        while self.free and self.waiting:
            job = self.waiting.popleft()
            self.free -= 1
            self.loop.at(self.loop.now + self.queue_s, functools.partial(self._begin, job))

    def _begin(self, job: Job) -> None:
        job.began = self.loop.now
        self._step(job, job.start(job), job.began + job.limit_s)

    def _step(self, job: Job, process: Process, deadline: float) -> None:
        now = self.loop.now
        if now >= deadline:
            job.killed, job.ok = True, False
            process.close()
            self._end(job, deadline)
            return
        try:
            wait = next(process)
        except StopIteration:
            self._end(job, now)
            return
        # GitHub kills the job at its limit, wherever it is
        self.loop.at(min(now + wait, deadline), lambda: self._step(job, process, deadline))

    def _end(self, job: Job, when: float) -> None:
        job.ended = when
        self.on_runner_s(job, when - job.began)
        self.free += 1
        job.done(job)
        self._dispatch()


def _hash_fraction(*parts: object) -> float:
    """A fixed pseudo-random number in [0, 1) for these parts: the same scenario gives the same drain."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


# --------------------------------------------------------------------------------------------
# A run (one wave) and its bookkeeping
# --------------------------------------------------------------------------------------------
@dataclass
class DrainRun:
    number: int
    epoch: int
    started: float
    plan: dict[str, Any] = field(default_factory=dict)  # what farm wave reads: cells, totals.deferred
    shards: list[list[dict[str, Any]]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, float] = field(default_factory=dict)  # cell -> when its wheel was uploaded
    objects: dict[str, list[float]] = field(default_factory=dict)  # cell -> each compile shard's upload
    object_cost: dict[str, float] = field(default_factory=dict)  # cell -> runner time of its compile shards
    # cell -> the share of its compile steps the compiler cache held when the run began: what each
    # of its compile shards finds (they compile disjoint units, so none finds another's steps)
    held: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, CellVerdict] = field(default_factory=dict)
    handed: list[tuple[str, str]] = field(default_factory=list)  # (cell, package) handed on to publish-rest
    builds_left: int = 0  # build shards whose builds have not all ended (then the link shard's)
    publishes_left: int = 0  # publish jobs not ended
    open: bool = True  # until its chain job ends
    ended: float = 0.0
    chained: bool = False  # its next-wave job started the next run when its builds ended
    # cell -> (outcome, its longest job's time, the job that says so) of a cell whose job failed
    # or was killed: what publish-rest reads from GitHub's listing of the run's jobs (its attempt)
    ended_without: dict[str, tuple[str, float, str]] = field(default_factory=dict)


@dataclass
class EpochResult:
    epoch: int
    warm: bool
    days: float
    drained: bool
    runs: int
    runner_hours: float
    runner_hours_by_kind: dict[str, float]  # build (build, compile and link jobs), publish, other
    wasted_hours: dict[str, float]
    cells: int  # to build after the planner's refusals
    refused: int
    published: int
    rebuilt: Counter[str]
    lost: int
    failed_out: int  # of the lost: refused by the retry policy (their builds kept failing)
    timeouts: int  # jobs GitHub killed at their limit
    publish_jobs_killed: int
    planned_runner_hours: float  # what farm matrix's drain model billed at the bump's start
    planned_days: float


# --------------------------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------------------------
class _SimClock:
    """farm's throttle reads the simulated time; it never sleeps (the loop does the waiting)."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop

    def now(self) -> float:
        return self.loop.now

    def sleep(self, seconds: float) -> None:
        raise AssertionError(f"the simulated throttle never sleeps ({seconds} s asked)")


def _unchanged(_: Attempt) -> bool:
    """A failed build's recipe is today's: no recipe changes during a drain."""
    return True


def _wait(seconds: float) -> Process:
    yield seconds


class Drain:
    def __init__(self, config: FarmConfig, matrix: Matrix, inputs: Inputs, times: RecipeTimes, workflow: Workflow,
                 sizes: CacheSizes, scenario: Scenario) -> None:
        if scenario.compile_cache not in BACKENDS:
            raise ValueError(f"compile cache backend {scenario.compile_cache!r}")
        self.config, self.matrix, self.inputs, self.v = config, matrix, inputs, inputs.v
        self.times, self.wf, self.sizes, self.scenario = times, workflow, sizes, scenario
        self.sharding: dict[str, Sharding | None] = {p.package: config.recipe(p.package).sharding
                                                     for p in matrix.packages}
        self.tag = next((t.tag for t in config.defaults.publish.values() if isinstance(t, GithubSettings)), None)
        self.planned = {p.cell.id: p for p in matrix.cells}
        self.truths = self._truths()
        self.loop = Loop()
        self.runners = Runners(self.loop, scenario.runners, self.v.queue_s, self._count_runner)
        self.rest = Rest()
        self.cache = ActionsCache()
        self.ledger = Ledger(int(self.v.ledger_record_bytes))
        self.cells: dict[str, CellState] = {}
        self.releases: dict[str, int] = {}  # release tag -> its assets
        self.requests = 0  # REST requests sent, refused ones too
        self.rate_limited = 0
        self.runs: list[DrainRun] = []
        self.results: list[EpochResult] = []
        self.attempts: dict[tuple[CellKey, int], tuple[Attempt, ...]] = {}  # the ledger's attempts files
        self._epoch, self._done, self._last_publish = 0, False, 0.0
        self._runner_s = 0.0
        self._by_kind: defaultdict[str, float] = defaultdict(float)
        self._wasted: defaultdict[str, float] = defaultdict(float)
        self._rebuilt: Counter[str] = Counter()
        self._timeouts = self._publish_killed = 0

    # -- what a cell really costs ------------------------------------------------------------
    def _truths(self) -> dict[str, Truth]:
        keys = CellKeys(self.config)
        out = {}
        for cid, p in self.planned.items():
            c = p.cell
            host = self.times.seconds(c.package, len(p.archs))
            if host is not None:
                compile_s = host * self.times.runner_factor.value
            else:  # unmeasured: what the planner guesses, a default job per declared compile job
                shard = self.sharding.get(c.package)
                compile_s = DEFAULT_JOB_S * (shard.jobs if shard else 1)
            if c.platform == "win_amd64":
                compile_s *= self.v.windows_factor
            toolkit, torch = keys.of(p)
            out[cid] = Truth(compile_s, c.torch != NO_TORCH, str(toolkit),
                             toolkit_size(toolkit, self.sizes).bytes, None if torch is None else str(torch),
                             0 if torch is None else torch_size(torch, self.sizes).bytes,
                             self.inputs.wheel_bytes(c.package))
        return out

    def _count_runner(self, job: Job, seconds: float) -> None:
        self._runner_s += seconds
        kind = "build" if job.kind in ("build", "compile", "link") else "publish" if job.kind == "publish" else "other"
        self._by_kind[kind] += seconds
        if job.killed:
            self._timeouts += 1
            if job.kind == "publish":
                self._publish_killed += 1
            else:
                self._wasted["timeout"] += seconds
        elif not job.ok:
            self._wasted["failure"] += seconds

    # -- the planner, as `farm matrix` runs it on the ledger so far -----------------------------
    def _held(self) -> set[str]:
        """What a new run's matrix leaves out (``farm matrix --hold``): the cells of every run still
        in progress (those it published are in the ledger already)."""
        return {c["id"] for r in self.runs if r.open for c in r.plan.get("cells", ())}

    def _costed(self, held: set[str] | None = None) -> Costed:
        queued = {cid for cid, s in self.cells.items() if not s.published and cid not in (held or ())}
        left = replace(self.matrix, packages=tuple(
            replace(pkg, to_build=tuple(p for p in pkg.to_build if p.cell.id in queued))
            for pkg in self.matrix.packages))
        # as farm matrix plans: the recorded durations, else the recipes' measured builds on a runner
        durations = replace(Durations.of(self.ledger.durations), measured=self.times,
                            runner_factor=self.times.runner_factor.value)
        return cost_matrix(left, self.sharding, durations,
                           hit_rates=HitRates.of(self.ledger.counts, retained=self.scenario.compile_cache == "s3"),
                           attempts=self.attempts, unchanged=_unchanged)

    # -- one epoch bump ------------------------------------------------------------------------
    def bump(self, warm: bool) -> EpochResult:
        """Queue every cell (a bump of build_epoch), run waves until only what the planner refuses
        is left or the horizon passes."""
        self._epoch += 1
        start = self.loop.now
        self.cells = {cid: CellState(self.planned[cid], t, cached=self._carried(cid)) for cid, t in self.truths.items()}
        self.attempts = {}  # a bump's cells are a new build epoch's: no attempts yet
        self._runner_s, self._wasted, self._rebuilt = 0.0, defaultdict(float), Counter()
        self._by_kind = defaultdict(float)
        self._timeouts = self._publish_killed = 0
        self._done, self._last_publish = False, start
        bill = drain_model(self._costed(), self.wf.max_shards * SHARD_SIZE, self.scenario.runners,
                           retention_days=min(self.wf.wheel_days, self.wf.objects_days))
        horizon = start + self.scenario.horizon_days * DAY
        self._start_run(start)
        while not self._done and not self.loop.idle() and self.loop.now < horizon:
            self.loop.run(min(horizon, self.loop.now + DAY))
        for run in self.runs:
            run.open = False
        if not self._done:  # the horizon ends this bump: what still runs is dropped
            self.loop = Loop()
            self.loop.now = horizon
            self.runners = Runners(self.loop, self.scenario.runners, self.v.queue_s, self._count_runner)
        # the planner's refusals of what no hosted runner can finish; a cell refused after its
        # builds failed or were killed is lost
        refused = {r.cell.cell.id for r in self._costed().refused if not self._history(r.cell)}
        queued = [s for cid, s in self.cells.items() if not s.published and cid not in refused]
        for state in queued:  # an artifact nobody published is lost work too
            if state.unpublished_s:
                self._wasted[state.unpublished_why] += state.unpublished_s
        result = EpochResult(
            epoch=self._epoch, warm=warm, days=(self._last_publish - start) / DAY, drained=not queued,
            runs=sum(1 for r in self.runs if r.epoch == self._epoch), runner_hours=self._runner_s / 3600,
            runner_hours_by_kind={k: v / 3600 for k, v in self._by_kind.items()},
            wasted_hours={k: v / 3600 for k, v in self._wasted.items()}, cells=len(self.cells) - len(refused),
            refused=len(refused), published=sum(s.published for s in self.cells.values()),
            rebuilt=Counter(self._rebuilt), lost=len(queued),
            failed_out=sum(1 for s in queued if refusal(self._history(s.planned), _unchanged)), timeouts=self._timeouts,
            publish_jobs_killed=self._publish_killed,
            planned_runner_hours=sum(w.runner_hours for w in bill), planned_days=sum(w.wall_hours for w in bill) / 24)
        self.results.append(result)
        return result

    def _history(self, planned: PlannedCell) -> tuple[Attempt, ...]:
        c = planned.cell
        return self.attempts.get(((c.package, c.cuda, c.torch, c.python, c.platform), planned.epoch), ())

    def _record_attempts(self, run: DrainRun) -> None:
        """What the run's publish-rest job records: each cell of the wave whose job failed or was
        killed, from GitHub's account of the run's jobs (farm/schedule/attempts.py)."""
        for cid, (outcome, elapsed, name) in run.ended_without.items():
            if self.cells[cid].published:
                continue
            p = self.planned[cid]
            c = p.cell
            key = (c.package, c.cuda, c.torch, c.python, c.platform)
            attempt = Attempt(cid, c.package, key, p.epoch, outcome, elapsed, p.compile_jobs, str(run.number), name,
                              None, None)
            self.attempts[(key, p.epoch)] = (*self.attempts.get((key, p.epoch), ()), attempt)

    def _carried(self, cid: str) -> float:
        """What the compiler cache holds of a cell at a bump: an S3 store keeps every step the last
        bump compiled; the Actions cache what its 10 GB, its write rate and its 7 days left."""
        before = self.cells.get(cid)
        if before is None:
            return 0.0
        if self.scenario.compile_cache == "s3":
            return before.cached
        return min(1.0, sum(self.cache.restore(k, self.loop.now) for k in before.cc_keys))

    # -- runs ------------------------------------------------------------------------------------
    def _start_run(self, when: float) -> None:
        run = DrainRun(len(self.runs) + 1, self._epoch, when)
        self.runs.append(run)
        matrix = Job("matrix", lambda _: _wait(self.v.matrix_s), lambda _: self._planned(run))
        self.loop.at(when, lambda: self.runners.submit([matrix]))

    def _planned(self, run: DrainRun) -> None:
        held = self._held()
        costed = self._costed(held)
        # the run's jobs, as farm matrix sizes a wave: at most the shards', and no more than end,
        # published, inside the artifacts' retention at the matrix's default concurrency
        wave = plan_wave(costed, fit_retention(costed, self.wf.max_shards * SHARD_SIZE,
                                               retention_days=min(self.wf.wheel_days, self.wf.objects_days)))
        if not wave.scheduled:  # the run ends after its matrix: its later jobs are skipped
            run.open = False
            if not self._finish_if_drained():
                self._nightly()
            return
        build, link = build_entries(wave.scheduled)
        run.plan = {"cells": [{"id": p.cell.id, "package": p.cell.package} for p in wave.scheduled],
                    "totals": {"deferred": len(wave.deferred)},
                    "held": sum(not self.cells[cid].published for cid in held)}
        run.shards = [build[i:i + SHARD_SIZE] for i in range(0, len(build), SHARD_SIZE)]
        run.links = link
        run.builds_left = len(run.shards)
        run.publishes_left = len(run.shards) + (1 if link else 0)
        self.runners.submit(self._slice(run, str(i), entries) for i, entries in enumerate(run.shards))

    def _slice(self, run: DrainRun, shard: str, entries: list[dict[str, Any]]) -> Job:
        """A shard's slice job, then its build matrix, then its publish job once every build ended."""
        left = [len(entries)]

        def one_done(job: Job, state: CellState, kind: str) -> None:
            self._built(run, state, kind, job)
            left[0] -= 1
            if left[0] == 0:
                cells = shard_cells(entries)
                self.runners.submit([Job("publish", lambda j: self._publish(run, shard, cells, j),
                                         lambda j: self._published(run, cells, j),
                                         limit_s=self.wf.publish_timeout_s)])
                self._builds_done(run, shard)

        def sliced(_: Job) -> None:
            jobs = []
            for e in entries:
                state, part = self.cells[e["id"]], str(e.get("shard") or "")
                jobs.append(Job("link" if part == "link" else "compile" if part else "build",
                                functools.partial(self._build, run, state, part),
                                functools.partial(one_done, state=state, kind=part),
                                limit_s=self.wf.build_timeout_s))
            self.runners.submit(jobs)
        return Job("slice", lambda _: _wait(self.v.slice_s), sliced)

    def _builds_done(self, run: DrainRun, shard: str) -> None:
        """The link matrix and the next-wave job wait for every build shard's builds (not their
        publishing). The next-wave job starts the next run if the plan deferred cells, once no
        other run is in progress (`farm chain --wait-for-runs`: two runs in flight at most); if
        one still is when its wait ends, it starts none and the run's chain does."""
        if shard == "link":
            return
        run.builds_left -= 1
        if run.builds_left:
            return
        if run.links:
            self.runners.submit([self._slice(run, "link", run.links)])
        if run.plan["totals"]["deferred"] > 0:
            run.chained = True
            self.runners.submit([Job("chain", functools.partial(self._next_wave, run), functools.partial(
                self._next_wave_done, run), limit_s=self.wf.build_timeout_s)])

    def _next_wave(self, run: DrainRun, job: Job) -> Process:
        yield from self._chain_requests(job)
        waited = 0.0
        while any(r.open for r in self.runs if r is not run) and waited < self.wf.next_wave_wait_s:
            yield from self._request("GET", None)  # the runs in progress, once a minute
            yield 60.0
            waited += 60.0
        job.ok = not any(r.open for r in self.runs if r is not run)

    def _next_wave_done(self, run: DrainRun, job: Job) -> None:
        if job.ok and not job.killed:
            self._start_run(self.loop.now)
        else:  # it started none: the run's chain starts the next wave
            run.chained = False

    def _chain_requests(self, _: Job) -> Process:
        for _call in range(CHAIN_REQUESTS):
            yield from self._request("GET", None)
        yield self.v.chain_s

    def _chain(self, run: DrainRun) -> None:
        """The run's chain job, after every publish job: `farm wave`'s verdict, and the next run
        when cells wait, unless the run's builds started it already (that run's chain takes this
        one's failed cells, which it held), else the nightly's."""
        def chained(_: Job) -> None:
            self._record_attempts(run)
            run.open, run.ended = False, self.loop.now
            outcome = from_reports(run.plan, run.verdicts)  # what `farm wave` decides from the reports
            if self._finish_if_drained() or run.chained:
                return
            if outcome.next_wave:
                self._start_run(self.loop.now)
            else:  # the chain stops
                self._nightly()
        self.runners.submit([Job("chain", self._chain_requests, chained)])

    def _nightly(self) -> None:
        """The nightly's run (a run the schedule starts while another is open plans nothing)."""
        hour, minute = self.wf.nightly
        nightly = math.floor(self.loop.now / DAY) * DAY + hour * 3600 + minute * 60
        self._start_run(nightly if nightly > self.loop.now else nightly + DAY)

    def _finish_if_drained(self) -> bool:
        """The bump is over when no run is open and the planner has nothing left to schedule."""
        if any(r.open for r in self.runs) or self._costed().matrix.cells:
            return False
        self._done = True
        return True

    # -- build jobs --------------------------------------------------------------------------
    def _restore(self, key: str, size: int, saves: list[tuple[str, int]]) -> float:
        """Seconds to have ``key`` on the runner: restored from the Actions cache, or downloaded
        (and saved at the job's end)."""
        if self.cache.restore(key, self.loop.now):
            return size / MB / self.v.cache_mb_s
        saves.append((key, size))
        return size / MB / self.v.download_mb_s

    def _build(self, run: DrainRun, state: CellState, part: str, job: Job) -> Process:
        """One build job: ``part`` is "" (a whole cell), "I/N" (a compile shard) or "link"."""
        v, t, cid = self.v, state.truth, state.planned.cell.id
        saves: list[tuple[str, int]] = []
        yield self.times.value("job_setup_s")
        yield self._restore(t.toolkit, t.toolkit_bytes, saves)  # its unpacking is part of the set-up
        build_s = 0.0
        if t.torch is not None:
            build_s = self._restore(t.torch, t.torch_bytes, saves) + self.times.value("torch_install_s")
            yield build_s
        if part == "link":
            ready = run.objects.get(cid, [])
            lapsed = any(expired(u, self.wf.objects_days, self.loop.now) for u in ready)
            if len(ready) < state.planned.compile_jobs or lapsed:
                job.ok = False
                if ready:  # the compile shards' work is lost with their objects; a shard that failed is no limit
                    why = "artifact expired" if lapsed else "failure"
                    self._wasted[why] += run.object_cost.get(cid, 0.0)
                    self._rebuilt[why] += 1
                yield 60.0  # download-artifact fails on the missing or expired shard
                return
            yield v.compile_objects_mb / v.download_mb_s
        else:
            parts = int(part.split("/")[1]) if part else 1
            held = run.held.setdefault(cid, min(1.0, state.cached))
            compile_s = t.compile_s / parts * ((1 - held) + held * self.times.value("hit_cost"))
            if _hash_fraction(self._epoch, run.number, cid, part) < v.failure_rate:
                job.ok = False
                yield compile_s * _hash_fraction("at", self._epoch, run.number, cid, part)
                return
            state.hit_share = held
            left = job.limit_s - (self.loop.now - job.began)
            done = min(1.0, max(0.0, left) / compile_s) if compile_s > 0 else 1.0
            self._cache_compiled(state, done * (1 - held) / parts, run)  # sccache stores each step as it ends
            build_s += compile_s
            yield compile_s
        if part and part != "link":
            yield v.compile_objects_mb / v.upload_mb_s
        else:
            post = self.times.build_fixed_s(t.linked) - (self.times.value("torch_install_s") if t.linked else 0.0)
            build_s += post
            yield post + t.wheel_bytes / MB / v.upload_mb_s
        for key, size in saves:  # actions/cache saves what it missed, after the job's steps
            yield size / MB / v.upload_mb_s
            self.cache.save(key, size, self.loop.now)
        state.duration = None if part == "link" else build_s

    def _cache_compiled(self, state: CellState, share: float, run: DrainRun) -> None:
        """The compiler cache keeps what a job compiled, a job killed later too: all of it in an S3
        store; in the Actions cache, what its write rate admits and its 10 GB keep."""
        if share <= 0:
            return
        if self.scenario.compile_cache == "s3":
            state.cached = min(1.0, state.cached + share)
            return
        key = f"cc-{state.planned.cell.id}-{self._epoch}-{run.number}-{len(state.cc_keys)}"
        stored = self.cache.save(key, int(self.v.compile_objects_mb * MB * share), self.loop.now,
                                 writes=max(1, round(self.v.compile_steps * share)))
        state.cc_keys.append(key)
        state.cached = min(1.0, state.cached + share * stored)

    def _built(self, run: DrainRun, state: CellState, part: str, job: Job) -> None:
        if job.killed or not job.ok:
            # as attempts.classify reads the jobs: killed if one was, else the first that failed
            cid, seen = state.planned.cell.id, run.ended_without.get(state.planned.cell.id)
            name = cid + (f".{part}" if part == "link" else f".shard-{part.replace('/', '-of-')}" if part else "")
            outcome = KILLED if job.killed or (seen and seen[0] == KILLED) else FAILED_BUILD
            first = seen[2] if seen and (seen[0] == outcome or not job.killed) else name
            run.ended_without[cid] = (outcome, max(job.ended - job.began, seen[1] if seen else 0.0), first)
            return
        cid, runner_s = state.planned.cell.id, job.ended - job.began
        if part and part != "link":
            run.objects.setdefault(cid, []).append(self.loop.now)
            run.object_cost[cid] = run.object_cost.get(cid, 0.0) + runner_s
            return
        if state.unpublished_s:  # an earlier artifact of this cell was never published
            self._rebuilt[state.unpublished_why] += 1
            self._wasted[state.unpublished_why] += state.unpublished_s
        state.builds += 1
        state.unpublished_s = runner_s + run.object_cost.get(cid, 0.0)
        state.unpublished_why = "publish killed"  # until its publish says otherwise
        run.artifacts[cid] = self.loop.now

    # -- publish jobs ------------------------------------------------------------------------
    def _request(self, method: str, throttle: Throttle | None) -> Process:
        """One REST call as farm's client makes it: its job's throttle first, then GitHub's
        answer; a refusal is waited out as GitHub asks, within what
        :func:`~farm.publish.budget.waits_out` allows (the chain's calls have no throttle, so no
        job's budget)."""
        if throttle is not None and (delay := throttle.delay(method)) > 0:
            throttle.spend(delay, rate_limit=False, what="the throttle's pacing")
            yield delay
        for attempt in itertools.count():
            self.requests += 1
            wait = self.rest.ask(self.loop.now, method)
            yield self.v.request_s
            if throttle is not None:
                throttle.sent(method)
            if wait == 0:
                return
            self.rate_limited += 1
            budget = None if throttle is None else throttle.budget
            if not waits_out(budget, True, attempt, wait, max_retries=MAX_RETRIES, max_wait_s=MAX_WAIT_S):
                return
            if throttle is not None:
                throttle.spend(wait, rate_limit=True, what=f"{method}: Retry-After")
            yield wait

    def _publish(self, run: DrainRun, shard: str, cells: list[tuple[str, str]], job: Job) -> Process:
        """``farm publish-shard --shard SHARD`` as the publish job runs it: the run's artifacts
        listed once (from the artifact service: no REST request), then each cell in plan order,
        its records pushed at most once a minute and at the end, under its
        :func:`~farm.publish.budget.job_share` of the token. It knows its deadline: before a cell
        without room for it, or on a wait its budget refuses, it hands that cell and every one
        after it on to publish-rest (``--shard rest``)."""
        jobs = {str(i): len(shard_cells(s)) for i, s in enumerate(run.shards)} | {LINK: len(shard_cells(run.links))}
        share = job_share(shard, jobs, self.wf.publishers)
        clock = JobClock(job.began, self.wf.publish_timeout_s)
        budget = clock.budget(rate_limit_wait_s(shard, clock.limit_s))
        throttle = Throttle(github_limits(share=share), clock=_SimClock(self.loop), budget=budget)
        yield self.v.publish_setup_s
        job.pushed_at = self.loop.now
        pace = CellPace()  # as farm publish-shard times its cells
        seen: set[str] = set()  # the releases this job has read (farm/publish/releases.py: ReleaseCache)
        for i, (cid, package) in enumerate(cells):
            now = self.loop.now
            if not next_cell_fits(clock.left(now), pace.next_cell_s(now, throttle.waited_s), throttle.delay("POST")):
                self._hand_on(run, cells[i:], "publish killed")  # its clock has no room: publishing ran out of time
                break
            state = self.cells[cid]
            uploaded = run.artifacts.get(cid)
            if uploaded is None:
                run.verdicts[cid] = CellVerdict(cid, package, FAILED)
                continue
            if expired(uploaded, self.wf.wheel_days, self.loop.now):  # 410: the next run builds it again
                run.verdicts[cid] = CellVerdict(cid, package, ERROR, detail="artifact expired")
                state.unpublished_why = "artifact expired"
                continue
            try:
                yield from self._publish_cell(state, throttle, seen)
            except OutOfTime as exc:
                self._hand_on(run, cells[i:], "publish killed" if "deadline" in exc.message else "rate limit")
                break
            job.unpushed.append(state)
            run.verdicts[cid] = CellVerdict(cid, package, PUBLISHED, (state.planned.wheel,))
            if self.loop.now - job.pushed_at >= 60:
                yield from self._push(job)
        yield from self._push(job)

    def _hand_on(self, run: DrainRun, cells: list[tuple[str, str]], why: str) -> None:
        """Cells a publish job leaves to publish-rest (``handed-on``); ``why`` is the limit that
        rebuilds them if publish-rest cannot publish them either."""
        for cid, package in cells:
            run.verdicts[cid] = CellVerdict(cid, package, HANDED_ON, detail=why)
            run.handed.append((cid, package))
            self.cells[cid].unpublished_why = why

    def _publish_cell(self, state: CellState, throttle: Throttle, seen: set[str]) -> Process:
        """One cell as :func:`cell_requests` says the path asks GitHub, with the transfers: the
        wheel downloaded and gated, then uploaded (or, sent before without a record, read back)."""
        v, t, c = self.v, state.truth, state.planned.cell
        key = ExistsKey(c.package, c.version, c.cuda, c.torch, c.python, c.platform,
                        state.planned.epoch + self._epoch - 1)  # each bump a release of its own
        tag = tag_for(self.tag, key) if self.tag else c.package
        calls = cell_requests(tag in seen, self.releases.get(tag, 0) > 0, self.releases.get(tag, 0),
                              adopt=state.asset)
        seen.add(tag)
        wheel_s = t.wheel_bytes / MB
        yield wheel_s / v.download_mb_s + wheel_s / v.gate_mb_s  # its artifacts, from the artifact service
        for method in calls:
            yield from self._request(method, throttle)
        self.releases.setdefault(tag, 0)
        if state.asset:
            yield wheel_s / v.download_mb_s + wheel_s / v.gate_mb_s
            return
        yield wheel_s / v.upload_mb_s
        state.asset = True
        self.releases[tag] += 1

    def _push(self, job: Job) -> Process:
        job.pushed_at = self.loop.now
        if not job.unpushed:
            return
        yield self.v.push_s
        steps = int(self.v.compile_steps)
        records = [((c.package, c.cuda, c.torch, c.python, c.platform), s.duration, steps, round(steps * s.hit_share))
                   for s in job.unpushed for c in (s.planned.cell,)]
        if self.ledger.push(records, self._epoch):
            for state in job.unpushed:
                state.published, state.unpublished_s = True, 0.0
            self._last_publish = self.loop.now
        else:  # GH001: the commits stay on the runner, which ends with the job
            for state in job.unpushed:
                state.unpublished_why = "ledger refused"
        job.unpushed.clear()

    def _published(self, run: DrainRun, cells: list[tuple[str, str]], job: Job, *, rest: bool = False) -> None:
        """A publish job ended; after the last, publish-rest publishes what they handed on (a
        job of seconds when none was), with a fresh clock and the whole token; then the chain.
        What publish-rest hands on in turn is not published: the next wave builds it again."""
        if job.killed:  # its report is never uploaded: the chain sees no verdict of these cells
            for state in job.unpushed:
                state.unpublished_why = "publish killed"
            for cid, _ in cells:
                run.verdicts.pop(cid, None)
        if rest:
            self._chain(run)
            return
        run.publishes_left -= 1
        if run.publishes_left == 0:
            handed, run.handed = run.handed, []
            self.runners.submit([Job("publish", lambda j: self._publish(run, REST, handed, j),
                                     lambda j: self._published(run, handed, j, rest=True),
                                     limit_s=self.wf.publish_timeout_s)])


def cell_requests(seen: bool, recorded: bool, assets: int, *, adopt: bool = False,
                  service: bool = True) -> list[str]:
    """The REST calls ``farm publish-shard`` makes for one built cell, in order (checked against
    the real command on a loopback GitHub by tests/test_publish_shard.py;
    farm/publish/budget.py counts them): its artifacts (none in its own run: the artifact
    service; else its fragment's and its wheel's), the release once per job (``seen``: already
    read by this job; else looked up where the ledger records wheels under its tag, ``recorded``,
    else created), then the upload; an asset sent before without a record (``adopt``) answers the
    upload 422, and the release's ``assets`` are listed and the asset read back to re-assert it."""
    calls = [] if service else ["GET", "GET"]
    if not seen:
        calls.append("GET" if recorded else "POST")
    calls.append("POST")
    if adopt:
        calls += ["GET"] * max(1, math.ceil(assets / ASSETS_PAGE)) + ["GET"]
    return calls


def simulate(config: FarmConfig, matrix: Matrix, inputs: Inputs, times: RecipeTimes, workflow: Workflow,
             sizes: CacheSizes, scenario: Scenario) -> Drain:
    """Every bump of the scenario, in order (a ``warm`` scenario runs a cold bump first)."""
    drain = Drain(config, matrix, inputs, times, workflow, sizes, scenario)
    if scenario.warm:
        drain.bump(warm=False)
    for n in range(scenario.epochs):
        drain.bump(warm=scenario.warm or n > 0)
    return drain
