"""A farm draining on a simulated GitHub: the workflow's jobs run in process, their decisions are
farm's own.

GitHub cannot be reached from the test machine, so its documented behaviour is simulated on
127.0.0.1: the Releases API by :mod:`tests.support.ghsim` (422 on a duplicate asset name, the 1,000-asset
cap, 403/429 with Retry-After under the primary and secondary rate limits) in scaled time, the
repository's branch by a bare git remote that other writers push to, a hosted runner's disk by a
quota per publish job. What runs is the real thing: ``farm matrix`` plans each run (sharding,
costs, refusals), ``farm slice`` hands each shard its entries, the publish job of each shard is
:func:`farm.schedule.stream.publish_shard` streaming one artifact at a time into ``farm upload``'s
path (gate, GitHub REST client with its throttle, the releases each job has read kept for the
whole job, adoption of unrecorded assets, ledger records)
and :func:`farm.publish.ledgerpush.commit_and_push`, and ``farm wave`` reads the verdicts and says
whether the chain goes on. The artifacts are handed to each publish job from local folders: in CI
they come from the run's artifact service, which is not the REST API (tests/test_publish_shard.py
runs that path), so the REST requests counted here are all a publish job sends. Only the build
jobs are simulated: a cell's wheel is written with
:mod:`tests.support.wheelmaker` (a valid wheel carrying the cell's provenance, no CUDA code), its size in
the disk model taken from :data:`NOMINAL_MB` (the real wheels' order of size).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.cli import main
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerfiles import segments
from farm.publish import ghrest
from farm.publish.githubsettings import GithubSettings
from farm.publish.ledgerpush import commit_and_push
from farm.publish.publish import upload
from farm.publish.ratelimit import Throttle, github_limits
from farm.publish.releases import ReleaseCache, github_client
from farm.publish.verdict import Verdict
from farm.schedule.outcome import CellResult
from farm.schedule.slices import LINK, slice_plan
from farm.schedule.stream import ERROR, PUBLISHED, REFUSED, CellVerdict, publish_shard, shard_cells
from tests.support import ghsim
from tests.support.ledgermaker import make_entry, raw_lines
from tests.support.wheelmaker import stamped_wheel

REPO = Path(__file__).resolve().parents[2]
MB = 1 << 20
# What the real wheels weigh (the disk model's sizes; the files written are small).
NOMINAL_MB = {"flash_attn": 450, "natten": 350, "llama_cpp_python": 250, "vllm": 480, "spconv": 180,
              "nunchaku": 300, "sageattn3": 200, "torchao": 120}
DEFAULT_MB = 40
# A hosted Linux runner has ~14 GB free; the checkout, Python and farm's environment take ~2 GB.
RUNNER_FREE = 14 * 1024 * MB
JOB_OVERHEAD = 2 * 1024 * MB
OUT_OF_SPACE = errno.ENOSPC
OK_VERDICTS = {Verdict.PUBLISHED, Verdict.PRESENT, Verdict.ADOPTED}


class Sim(ghsim.GitHubSim):
    """:class:`tests.support.ghsim.GitHubSim` with its limits kept in sliding windows: the same answers,
    in time independent of how many requests came before (a drain sends tens of thousands)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hour: deque[float] = deque()
        self._content_hour: deque[float] = deque()
        self._content_minute: deque[float] = deque()
        self.stored: dict[str, int] = {}  # asset name -> times an upload of it was stored
        self.on_upload = self._stored

    def _stored(self, tag: str, name: str) -> None:
        self.stored[name] = self.stored.get(name, 0) + 1
        if self.kill_armed:  # the publisher dies now: GitHub has the asset, nobody recorded it
            self.kill_armed, self.killed = False, name

    kill_armed = False
    killed: str | None = None

    exhaust_next = False  # another client of the token takes the rest of this minute's budget

    def _exhaust(self, now: float) -> None:
        """Another client of the same token sends what is left of the minute's content-creating
        requests just before farm's next one: it counts against the token as farm's own do."""
        for _ in range(self.limits.content_per_minute - len(self._content_minute)):
            self._take(now, True)
            self.log.append(ghsim.Request(now, "POST", "/elsewhere", 201))

    def _take(self, now: float, content: bool) -> None:
        self._hour.append(now)
        if content:
            self._content_hour.append(now)
            self._content_minute.append(now)

    def _headers(self, now: float) -> dict[str, str]:
        """GitHub's ``x-ratelimit-*`` headers from the hour's window (the request being answered
        is in it), not from a scan of the whole log."""
        with self._lock:
            while self._hour and self._hour[0] <= now - 3600:
                self._hour.popleft()
            used, oldest = len(self._hour), (self._hour[0] if self._hour else now)
        return {"x-ratelimit-limit": str(self.limits.primary_per_hour),
                "x-ratelimit-remaining": str(max(0, self.limits.primary_per_hour - used)),
                "x-ratelimit-used": str(used), "x-ratelimit-reset": str(math.ceil(oldest + 3600)),
                "x-ratelimit-resource": "core"}

    def _limited(self, method: str, now: float) -> tuple[int, dict[str, str]] | None:
        for window, period in ((self._hour, 3600), (self._content_hour, 3600), (self._content_minute, 60)):
            while window and window[0] <= now - period:
                window.popleft()
        if self.exhaust_next and method in ghsim.CONTENT:
            self.exhaust_next = False
            self._exhaust(now)
        if len(self._hour) >= self.limits.primary_per_hour:
            return 403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(math.ceil(self._hour[0] + 3600))}
        content = method in ghsim.CONTENT
        if content and len(self._content_minute) >= self.limits.content_per_minute:
            return self.secondary_status, {"retry-after": str(math.ceil(self._content_minute[0] + 60 - now))}
        if content and len(self._content_hour) >= self.limits.content_per_hour:
            return self.secondary_status, {"retry-after": str(math.ceil(self._content_hour[0] + 3600 - now))}
        self._take(now, content)
        return None


class JobKilled(Exception):
    """The publish job's process died (a runner lost, a timeout): no more verdicts from it."""


@dataclass
class Faults:
    """What goes wrong, by (run number, shard)."""

    fail_build: Callable[[int, str], bool] = lambda run, cell: False
    small_disk: set[tuple[int, str]] = field(default_factory=set)  # a publish job whose disk is full (10 MB free)
    kill_after_upload: set[tuple[int, str]] = field(default_factory=set)  # killed between upload and record
    push_race: set[int] = field(default_factory=set)  # runs whose publish jobs all start from one head
    maintainer_push: set[tuple[int, str]] = field(default_factory=set)  # someone pushes during that job
    cancel_after: dict[int, int] = field(default_factory=dict)  # run -> build shards that ran before the cancel
    rate_burst: set[int] = field(default_factory=set)  # another client spends the token's budget first


@dataclass
class JobStats:
    run: int
    shard: str
    cells: int
    peak_bytes: int  # nominal bytes the job's scratch held at most
    largest_bytes: int  # its largest artifact (nominal)
    verdicts: dict[str, int]
    ledger_reads: int = 0  # times the job read its ledger whole (once, and once after each push that rebased)
    pushes: int = 0


@dataclass
class RunResult:
    number: int
    scheduled: int
    refused: int
    deferred: int
    next_wave: bool
    cancelled: bool
    jobs: list[JobStats]
    to_build: int = 0  # the queue this run's plan started from (built cells taken out)


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "GIT_AUTHOR_NAME": "farm", "GIT_AUTHOR_EMAIL": "farm@localhost",
                               "GIT_COMMITTER_NAME": "farm", "GIT_COMMITTER_EMAIL": "farm@localhost"})
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


class Farm:
    """The repository's recipes on a bare remote, a simulated GitHub, and the runs of build.yml."""

    def __init__(self, work: Path, sim: Sim, faults: Faults, *, filters: tuple[str, ...] = (), max_shards: int = 8,
                 push_every: int = 64) -> None:
        self.work = work
        self.sim = sim
        self.faults = faults
        self.push_every = push_every
        self.filters = filters  # build.yml's inputs, as `farm matrix` arguments
        self.max_shards = max_shards
        self.remote = work / "remote.git"
        self.runs = 0
        self.killed: list[tuple[int, str, str]] = []  # (run, shard, asset) of each kill
        self.pushes: list[Any] = []  # every PushResult
        self.nominal: dict[str, int] = {}  # cell id -> nominal wheel bytes
        seed = work / "seed"
        seed.mkdir(parents=True)
        shutil.copy(REPO / "_defaults.yml", seed / "_defaults.yml")
        shutil.copytree(REPO / "packages", seed / "packages")
        shutil.copytree(REPO / "examples", seed / "examples")
        shutil.copytree(REPO / "ledger", seed / "ledger")  # the repository's ledger folder, empty
        (seed / "README.md").write_text("the farm\n")
        git(work, "init", "-q", "--bare", "-b", "main", str(self.remote))
        git(seed, "init", "-q", "-b", "main")
        git(seed, "add", "-A")
        git(seed, "commit", "-q", "-m", "recipes")
        git(seed, "remote", "add", "origin", str(self.remote))
        git(seed, "push", "-q", "origin", "main")
        self.maintainer = seed  # a maintainer's clone: pushes other changes during the runs

    # -- checkouts ---------------------------------------------------------------------------
    def checkout(self, name: str) -> Path:
        """A fresh clone of the branch head, as actions/checkout makes one."""
        dest = self.work / "jobs" / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        git(self.work, "clone", "-q", "-b", "main", str(self.remote), str(dest))
        return dest

    def maintainer_commit(self, note: str) -> None:
        git(self.maintainer, "pull", "-q", "--rebase", "origin", "main")
        with (self.maintainer / "README.md").open("a") as fh:
            fh.write(note + "\n")
        git(self.maintainer, "commit", "-q", "-am", note)
        git(self.maintainer, "push", "-q", "origin", "main")

    # -- one run of build.yml ----------------------------------------------------------------
    def run(self) -> RunResult:
        self.runs += 1
        n = self.runs
        run_dir = self.work / f"run-{n}"
        store, reports = run_dir / "artifacts", run_dir / "reports"
        store.mkdir(parents=True)
        reports.mkdir()
        head = self.checkout(f"run-{n}-matrix")
        plan_path, outputs = run_dir / "wave-plan.json", run_dir / "matrix.out"
        with _github_output(outputs), contextlib.redirect_stdout(io.StringIO()):
            assert main(["matrix", "--root", str(head), "--no-lint", "--github-output", "--max-shards",
                         str(self.max_shards), "--plan", str(plan_path), *self.filters]) == 0
        out = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
        plan = json.loads(plan_path.read_text())
        shards = [str(i) for i in range(int(out["shard_count"]))] + ([LINK] if int(out["link_count"]) else [])
        cancel_after = self.faults.cancel_after.get(n)
        cells = {c["id"]: c for c in plan["cells"]}
        failed: set[str] = set()
        jobs: list[JobStats] = []
        # publish jobs check the branch head out when they start: in a race, all before any pushes
        clones = {s: self.checkout(f"run-{n}-publish-{s}") for s in shards} if n in self.faults.push_race else {}
        for i, shard in enumerate(shards):
            if cancel_after is not None and i >= cancel_after:
                return RunResult(n, len(plan["cells"]), len(plan["refused_cells"]), len(plan["deferred_cells"]),
                                 False, True, jobs, plan["totals"]["to_build"])
            entries = slice_plan(plan, shard)
            self._build(n, entries, cells, store, failed)
            clone = clones.get(shard) or self.checkout(f"run-{n}-publish-{shard}")
            jobs.append(self._publish(n, shard, entries, store, reports, clone))
        with _github_output(run_dir / "wave.out"), contextlib.redirect_stdout(io.StringIO()):
            assert main(["wave", "--plan", str(plan_path), "--reports", str(reports), "--github-output"]) == 0
        wave = dict(line.split("=", 1) for line in (run_dir / "wave.out").read_text().splitlines())
        shutil.rmtree(run_dir / "artifacts", ignore_errors=True)
        return RunResult(n, len(plan["cells"]), len(plan["refused_cells"]), len(plan["deferred_cells"]),
                         wave["next_wave"] == "true", False, jobs, plan["totals"]["to_build"])

    # -- build jobs (simulated) ----------------------------------------------------------------
    def _build(self, n: int, entries: list[dict[str, Any]], cells: dict[str, Any], store: Path,
               failed: set[str]) -> None:
        for e in entries:
            cid = e["id"]
            if self.faults.fail_build(n, cid):
                failed.add(cid)
            shard = e.get("shard")
            if cid in failed or (shard and shard != LINK):
                continue  # a compile shard hands objects, not a wheel; a failed cell hands nothing
            self._wheel(n, cells[cid], store / f"wheels-{cid}")

    def _wheel(self, n: int, cell: dict[str, Any], dest: Path) -> None:
        entry = make_entry(cell["package"], cell["version"], cuda=cell["cuda"], torch=cell["torch"],
                           python=cell["python_tag"], platform=cell["platform"], build_epoch=cell["build_epoch"],
                           arch=cell["arch_list"], filename=cell["wheel"])
        stamped_wheel(dest, entry, run_id=str(n))
        self.nominal[cell["id"]] = NOMINAL_MB.get(cell["package"], DEFAULT_MB) * MB

    # -- publish jobs (farm's own code) --------------------------------------------------------
    def _publish(self, n: int, shard: str, entries: list[dict[str, Any]], store: Path, reports: Path,
                 clone: Path) -> JobStats:
        ledger = clone / "ledger"
        quota = (RUNNER_FREE - JOB_OVERHEAD) if (n, shard) not in self.faults.small_disk else 10 * MB
        held: dict[str, int] = {}  # scratch folder -> nominal bytes, while it exists
        peak = largest = 0
        scratch = self.work / "scratch" / f"{n}-{shard}"

        def fetch(cell_id: str, folder: Path) -> bool:
            nonlocal peak, largest
            src = store / f"wheels-{cell_id}"
            if not src.is_dir():
                return False
            for k in [k for k in held if not Path(k).exists()]:
                del held[k]  # deleted after its cell: the disk is free again
            size = self.nominal[cell_id]
            largest = max(largest, size)
            if sum(held.values()) + size > quota:
                folder.mkdir(parents=True)
                (folder / "partial").write_bytes(b"\0" * 10)
                raise OSError(OUT_OF_SPACE, os.strerror(OUT_OF_SPACE), str(folder))
            shutil.copytree(src, folder)
            held[str(folder)] = size
            peak = max(peak, sum(held.values()))
            return True

        settings = GithubSettings("github", self.sim.repo, api_url=self.sim.base.rstrip("/"),
                                  uploads_url=self.sim.base + "uploads")

        clients: dict[str, ghrest.Client] = {}
        caches: dict[str, ReleaseCache] = {}  # what the job has read of the releases, as farm publish-shard keeps it

        def client(s: GithubSettings) -> ghrest.Client:
            if s.name not in clients:
                clients[s.name] = github_client(s, {"GH_TOKEN": ghsim.TOKEN}, clock=self.sim.clock,
                                                throttle=Throttle(github_limits(), clock=self.sim.clock))
            return clients[s.name]

        self.sim.kill_armed = (n, shard) in self.faults.kill_after_upload
        if n in self.faults.rate_burst and shard == "0":
            self._burst()
        pending, pushed = [0], [0]
        book = LedgerBook.open(ledger)  # the job reads its checkout's ledger once

        def publish(cell: CellResult) -> tuple[str, str]:
            before = {name: path.stat().st_size for name, path in segments(ledger)}
            report = upload(cell.files[0].parent, [settings], ledger=ledger, github_client=client, reader="native",
                            book=book, release_caches=caches)
            if self.sim.killed is not None:
                # the process died after GitHub stored the asset, before the ledger record: what it
                # wrote after that moment (the record it appended) never happened
                for name, path in segments(ledger):
                    if name in before:
                        os.truncate(path, before[name])
                    else:
                        path.unlink()
                self.killed.append((n, shard, self.sim.killed))
                self.sim.killed = None
                raise JobKilled(cell.id)
            bad = [v for v in report.verdicts if v.verdict not in OK_VERDICTS]
            if not report.verdicts or bad:
                status = ERROR if any(v.verdict is Verdict.FAILED for v in bad) else REFUSED
                return status, "; ".join(v.line() for v in bad) or "no verdict"
            pending[0] += 1
            if pending[0] >= self.push_every:
                self._push(n, shard, clone)
                pending[0] = 0
                pushed[0] += 1
            return PUBLISHED, ""

        report_path = reports / f"published-{shard}.jsonl"
        counts: dict[str, int] = {}
        with report_path.open("a", encoding="utf-8") as fh:
            def note(v: CellVerdict) -> None:
                fh.write(json.dumps(v.to_json()) + "\n")
                counts[v.status] = counts.get(v.status, 0) + 1

            try:
                publish_shard(shard_cells(entries), fetch, publish, scratch, on_verdict=note)
            except JobKilled:
                counts["killed"] = 1
                killed = True
            else:
                killed = False
        if killed:  # the runner is gone: its unpushed commits and its report with it
            report_path.unlink()
            return JobStats(n, shard, len(shard_cells(entries)), peak, largest, counts, book.reloads + 1, pushed[0])
        self._push(n, shard, clone)
        return JobStats(n, shard, len(shard_cells(entries)), peak, largest, counts, book.reloads + 1, pushed[0] + 1)

    def _push(self, n: int, shard: str, clone: Path) -> None:
        if (n, shard) in self.faults.maintainer_push:
            self.maintainer_commit(f"maintainer edit during run {n} shard {shard}")
        self.pushes.append(commit_and_push(clone, clone / "ledger", f"ledger: run {n} shard {shard}",
                                           clock=self.sim.clock))

    def _burst(self) -> None:
        """Another client of the same token spends the minute's content-creating requests just
        before the job's first upload (its own throttle cannot know: GitHub's answer tells it)."""
        self.sim.exhaust_next = True

    def ledger_lines(self) -> list[dict[str, Any]]:
        head = self.checkout("final")
        return [json.loads(line) for line in raw_lines(head / "ledger") if line.strip()]

    def ledger_files(self) -> dict[str, int]:
        """Each file of the ledger at the branch head and its bytes."""
        head = self.checkout("files")
        return {name: path.stat().st_size for name, path in segments(head / "ledger")}


@contextmanager
def _github_output(path: Path) -> Iterator[None]:
    old = os.environ.get("GITHUB_OUTPUT")
    old_summary = os.environ.pop("GITHUB_STEP_SUMMARY", None)
    os.environ["GITHUB_OUTPUT"] = str(path)
    try:
        yield
    finally:
        if old is None:
            del os.environ["GITHUB_OUTPUT"]
        else:
            os.environ["GITHUB_OUTPUT"] = old
        if old_summary is not None:
            os.environ["GITHUB_STEP_SUMMARY"] = old_summary
