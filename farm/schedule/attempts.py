"""Builds that ended without a wheel: killed at the job limit, or failed, with the time they ran.

The ledger learns a cell's duration only from a published wheel. A cell killed at GitHub's 6 h
limit, or one whose build fails, publishes nothing; planned again from the same guess, it is
scheduled unchanged and ends the same way, wave after wave. So the run's last publish job
(``farm publish-shard --shard rest``) records each failed cell of the wave as an **attempt**,
from GitHub's own account of the run's jobs (``GET .../actions/runs/ID/jobs``: each job's
conclusion and its start and end; never from a file a build job wrote, which package code could
forge), one JSON line in ``ledger/<package>/attempts.jsonl`` beside the package's segments, pushed
with the ledger. The matrix reads them back, every line checked (types, bounds: a bad line is an
error naming it, never skipped), and plans by them (:func:`farm.schedule.cost.cost_matrix`):

- **killed** at the limit (GitHub's ``timed_out``, or a job that ran within
  :data:`KILLED_SHARE` of the limit): the cell's build takes more than its jobs ran, so the
  next plan takes at least :data:`KILLED_MARGIN` times that: it shards the cell into more compile
  jobs, or refuses it with the reason where it cannot (its recipe has no ``sharding``);
- **failed** (a job's conclusion ``failure``): scheduled again as it was (a runner that broke, a
  download that failed: the next build usually passes) until the same job of it (the whole
  build, one compile shard, the link) has failed :data:`FAILED_RETRIES` + 1 times, or the cell
  :data:`FAILED_MOST` times in all, with the recipe and ``_defaults.yml`` it failed with: what
  fails the same way every time is the recipe's, what fails in another of a cell's 20 compile
  jobs each time is the runners'. Then it is refused with the reason; any change to the recipe
  or the defaults schedules it again, as does ``farm matrix --retry-failed`` (one more build).

A cancelled job (a cancelled run) is no attempt. Pure, but for reading and writing the files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import LedgerError
from farm.fsutil import atomic_write, read_chunks
from farm.provenance.ledgerfiles import ATTEMPTS_FILE, single_file

KILLED = "killed"
FAILED = "failed"
KILLED_SHARE = 0.97  # a job that ran this share of the limit, then failed or was cancelled, was killed by it
KILLED_MARGIN = 1.25  # a killed cell's build is planned at least this many times what its jobs ran
FAILED_RETRIES = 2  # a job that failed is run again unchanged this many times before its cell is refused
FAILED_MOST = 6  # a cell that failed this many times, whichever its jobs, is refused
MAX_ELAPSED_S = 35 * 86400  # a workflow run's own limit
MAX_LINE = 4096
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_RESTORE = "attempts.jsonl is written by `farm publish-shard --shard rest`; restore it from git"


@dataclass(frozen=True)
class Attempt:
    """One build of a cell that ended without a wheel."""

    cell: str  # the cell's id
    package: str
    key: tuple[str, str, str, str, str]  # (package, cuda, torch, python tag, platform)
    build_epoch: int
    outcome: str  # KILLED | FAILED
    elapsed_s: float  # the longest of its jobs
    jobs: int  # the jobs it ran as (compile jobs of a sharded cell, else 1)
    run: str
    job: str
    recipe_sha256: str | None
    defaults_sha256: str | None

    def to_json(self) -> dict[str, Any]:
        package, cuda, torch, python, platform = self.key
        return {"cell": self.cell, "package": package, "cuda": cuda, "torch": torch, "python": python,
                "platform": platform, "build_epoch": self.build_epoch, "outcome": self.outcome,
                "elapsed_s": round(self.elapsed_s, 1), "jobs": self.jobs, "run": self.run, "job": self.job,
                "recipe_sha256": self.recipe_sha256, "defaults_sha256": self.defaults_sha256}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Attempt:
        """An attempt line, checked: it comes from the branch, written by another job."""
        try:
            fields = [data[k] for k in ("cell", "package", "cuda", "torch", "python", "platform", "run", "job")]
            hashes = [data.get("recipe_sha256"), data.get("defaults_sha256")]
            epoch, outcome, elapsed, jobs = data["build_epoch"], data["outcome"], data["elapsed_s"], data["jobs"]
        except (KeyError, TypeError) as exc:
            raise LedgerError(f"not an attempt record ({exc!r} is missing)", where=where, hint=_RESTORE) from None
        ok = (all(isinstance(f, str) and 0 < len(f) <= 300 and "\n" not in f for f in fields)
              and _ID.fullmatch(fields[1]) is not None
              and all(h is None or (isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)) for h in hashes)
              and type(epoch) is int and epoch >= 0 and outcome in (KILLED, FAILED)
              and type(elapsed) in (int, float) and 0 <= elapsed <= MAX_ELAPSED_S
              and type(jobs) is int and 1 <= jobs <= 1000)
        if not ok:
            raise LedgerError("an attempt record with a field of the wrong type or out of range", where=where,
                              hint=_RESTORE)
        cell, package, cuda, torch, python, platform, run, job = fields
        return cls(cell, package, (package, cuda, torch, python, platform), epoch, outcome, float(elapsed), jobs,
                   run, job, hashes[0], hashes[1])


@dataclass(frozen=True)
class RunJob:
    """A job of a workflow run as GitHub reports it (``elapsed_s`` None: not finished)."""

    name: str
    conclusion: str | None
    elapsed_s: float | None


def jobs_of(cell_id: str, jobs: Iterable[RunJob]) -> list[RunJob]:
    """The jobs a cell ran as: named after its id (``<id>``, ``<id>.shard-I-of-N``, ``<id>.link``),
    in a called workflow behind its caller's name (``build-0 / <id>``)."""
    return [job for job in jobs if (name := job.name.rsplit(" / ", 1)[-1]) == cell_id
            or name.startswith(cell_id + ".shard-") or name == cell_id + ".link"]


def classify(jobs: Sequence[RunJob], *, limit_s: float) -> tuple[str, RunJob, int] | None:
    """(outcome, the job that says so, the jobs the cell ran as) for a cell without a wheel, or
    None when its jobs say neither (a cancelled run, a job that never ran)."""
    done = [j for j in jobs if j.elapsed_s is not None]
    compile_jobs = max(1, sum(".shard-" in j.name for j in jobs))
    killed = [j for j in done if j.conclusion == "timed_out"
              or (j.conclusion in ("failure", "cancelled") and (j.elapsed_s or 0) >= KILLED_SHARE * limit_s)]
    if killed:
        return KILLED, max(killed, key=lambda j: j.elapsed_s or 0), compile_jobs
    failed = [j for j in done if j.conclusion == "failure"]
    if failed:
        return FAILED, failed[0], compile_jobs
    return None


def job_of(attempt: Attempt) -> str:
    """The job an attempt names, without its caller's prefix (``build-3 / ``: the shard a cell
    lands in changes from run to run)."""
    return attempt.job.rsplit(" / ", 1)[-1]


def refusal(history: Sequence[Attempt], unchanged: Callable[[Attempt], bool]) -> str | None:
    """Why a cell whose last build failed is not built again (None: it is): its failures with
    the recipe and defaults of today (``unchanged``) under the retry policy above."""
    if not history or history[-1].outcome != FAILED:
        return None
    failures = [a for a in history if a.outcome == FAILED and unchanged(a)]
    if not failures:
        return None
    job, same = Counter(job_of(a) for a in failures).most_common(1)[0]
    if same <= FAILED_RETRIES and len(failures) < FAILED_MOST:
        return None
    last = failures[-1]
    return (f"its build failed {len(failures)} times ({same} of them in {job}), last in run {last.run} after "
            f"{last.elapsed_s / 60:.0f} min: fix the recipe (any change to it or to _defaults.yml schedules it "
            "again), or `farm matrix --retry-failed` where the runners failed it")


def attempts_path(ledger: Path, package: str) -> Path:
    """Where a package's attempts are kept: beside its segments (a single-file ledger: one
    ``<name>.attempts.jsonl`` beside it)."""
    if single_file(ledger):
        return ledger.with_name(ledger.stem + "." + ATTEMPTS_FILE)
    return ledger / package / ATTEMPTS_FILE


def append(ledger: Path, attempts: Iterable[Attempt]) -> int:
    """Add ``attempts`` to their packages' files (each rewritten through a temp file)."""
    by_file: dict[Path, list[bytes]] = {}
    for a in attempts:
        by_file.setdefault(attempts_path(ledger, a.package), []).append(
            json.dumps(a.to_json(), sort_keys=True).encode() + b"\n")
    for path, lines in by_file.items():
        old = b"".join(read_chunks(path)) if path.is_file() else b""
        atomic_write(path, [old if not old or old.endswith(b"\n") else old + b"\n", *lines])
    return sum(len(v) for v in by_file.values())


def read(ledger: Path) -> dict[tuple[tuple[str, str, str, str, str], int], tuple[Attempt, ...]]:
    """(cell key, build epoch) -> its attempts, oldest first, from every attempts file of the
    ledger (none when there is none)."""
    ledger = Path(ledger)
    if single_file(ledger):
        files = [attempts_path(ledger, "")]
    else:
        files = sorted(ledger.glob(f"*/{ATTEMPTS_FILE}")) if ledger.is_dir() else []
    out: dict[tuple[tuple[str, str, str, str, str], int], tuple[Attempt, ...]] = {}
    for path in files:
        if not path.is_file() or path.is_symlink():
            continue
        with path.open("rb") as handle:
            for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE + 1), b""), 1):
                where = f"{path}:{number}"
                if len(raw) > MAX_LINE:
                    raise LedgerError("an attempt line longer than an attempt", where=where)
                try:
                    data = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    raise LedgerError("not JSON", where=where, hint="restore the file from git") from None
                a = Attempt.from_json(data, where)
                out[(a.key, a.build_epoch)] = (*out.get((a.key, a.build_epoch), ()), a)
    return out


Attempts = Mapping[tuple[tuple[str, str, str, str, str], int], Sequence[Attempt]]
