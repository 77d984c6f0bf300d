"""``farm publish-shard --plan FILE --shard I|link|rest --run-id ID``: publish one build shard's
wheels, one artifact at a time, inside the job's clock.

The publish job of build shard I runs it after that shard's builds: for each cell it downloads the
cell's artifacts (its fragment, then its wheel: from the run's artifact service with the job's
runtime token, which costs no REST request, else through GitHub's REST API at ``GITHUB_API_URL``:
:mod:`farm.publish.artifacts`), gates and publishes the wheel (``farm upload``'s path with the
token of ``GH_TOKEN``/``GITHUB_TOKEN``, the releases it has read kept for the whole job; into the
checkout's ledger, read once and each record appended; ``--push-ledger``: the records committed
and pushed at most once a minute and at the end, fetch-rebase-retry on a rejection), then deletes
the artifacts before the next cell (farm/schedule/stream.py). Each cell's verdict is appended to
``--report`` as it comes; ``farm wave --reports`` reads the reports to decide the next wave.

The job takes a share of the token's limits in proportion to its cells among the wave's shards,
the link shard's included (the link shard's job, which runs after the others, and ``rest``
publish alone: the whole token), unless ``--publishers N`` says 1/N. It knows its deadline
(``--job-started`` plus ``--job-limit`` less ``--reserve``) and
stops before it, or once GitHub's rate-limit answers have cost it ``--max-rate-limit-wait`` in
all: the cells it has not published are reported ``handed-on`` and ``--shard rest`` (the run's
``publish-rest`` job, with the reports in ``--reports``) publishes them (farm/publish/budget.py),
waiting on GitHub's rate limit as long as its own clock allows: it hands on to no job, and a
cell it does not publish is built again.
That last job also records each cell of the wave that ended without a wheel, killed at the job
limit or failed, with the time its jobs ran, as GitHub's listing of the run's jobs says, into the
ledger's attempts (farm/schedule/attempts.py): the next plan shards or refuses it.

Exit 0 whenever every cell got a verdict (a failed, refused or handed-on cell is listed, not
fatal); exit 2 for a bad plan or shard; exit 3 when the ledger's last push fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from farm.commands.slice import read_plan
from farm.commands.upload import check_publishers, configured_targets, publish_options, render
from farm.errors import EXIT_ENVIRONMENT, UsageError
from farm.load.recipes import load_config
from farm.model.config import FarmConfig
from farm.provenance.judge import derive_from_config
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerfiles import ledger_location
from farm.publish import ghrest
from farm.publish.artifacts import Source, run_artifacts
from farm.publish.attestation import MAX_SUBJECTS, SUBJECT_PARTS, append_subjects, subject_lines
from farm.publish.budget import (
    MAX_RATE_LIMIT_WAIT_S,
    RESERVE_S,
    REST,
    CellPace,
    JobClock,
    job_share,
    next_cell_fits,
    rate_limit_wait_s,
)
from farm.publish.github import ASSET_MAX_BYTES
from farm.publish.githubsettings import GithubSettings
from farm.publish.ledgerpush import LedgerPusher
from farm.publish.publish import UploadReport, upload
from farm.publish.ratelimit import RealClock, Throttle, github_limits
from farm.publish.releases import ReleaseCache, github_client
from farm.publish.verdict import Verdict
from farm.schedule.attempts import Attempt, classify, jobs_of
from farm.schedule.attempts import append as append_attempts
from farm.schedule.cost import JOB_LIMIT_S
from farm.schedule.outcome import ARTIFACT_PREFIX, FRAGMENT_SUFFIX, CellResult
from farm.schedule.slices import slice_plan
from farm.schedule.stream import (
    ERROR,
    FAILED,
    HANDED_ON,
    PUBLISHED,
    REFUSED,
    REPORT_PREFIX,
    CellVerdict,
    handed_on,
    not_the_cells,
    publish_jobs,
    publish_shard,
    read_reports,
    shard_cells,
)

# A cell's fragment artifact: a zip of at most 8 fragments of at most 1 MiB each.
MAX_FRAGMENT_BYTES = 1 << 20
MAX_BUNDLE_BYTES = 9 * MAX_FRAGMENT_BYTES
# A wheel GitHub can publish is under 2 GiB: a larger artifact is refused before a byte is written.
MAX_WHEEL_BYTES = ASSET_MAX_BYTES
MAX_WHEEL_MEMBERS = 200_000
# A shard's records are committed and pushed at most this often (a commit hashes the whole ledger).
PUSH_EVERY_S = 60.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="FILE", help="the plan of this run")
    parser.add_argument("--shard", required=True, metavar="I",
                        help="the build shard (0, 1, ...), 'link', or 'rest': the cells the run's other publish "
                             "jobs handed on (their reports in --reports)")
    parser.add_argument("--reports", type=Path, metavar="DIR", help="with --shard rest: the run's publish reports")
    parser.add_argument("--run-id", required=True, help="the workflow run whose artifacts to publish")
    parser.add_argument("--repository", default=os.environ.get("GITHUB_REPOSITORY"),
                        help="owner/name of the run (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--target", action="append", metavar="NAME", help="publish target(s) of _defaults.yml")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository checkout (default: .)")
    parser.add_argument("--scratch", type=Path, default=Path("scratch"),
                        help="where one artifact at a time is downloaded (emptied after each cell)")
    parser.add_argument("--report", type=Path, required=True, metavar="FILE",
                        help="append each cell's verdict here (one JSON object a line)")
    parser.add_argument("--job-started", type=float, metavar="EPOCH",
                        help="when this job started, in epoch seconds (default: now)")
    parser.add_argument("--job-limit", type=float, default=JOB_LIMIT_S / 60, metavar="MIN",
                        help=f"when GitHub stops the job, in minutes after it started (default {JOB_LIMIT_S // 60})")
    parser.add_argument("--reserve", type=float, default=RESERVE_S / 60, metavar="MIN",
                        help="minutes kept for the last ledger push and the report: the job stops publishing "
                             f"this long before its limit (default {RESERVE_S // 60})")
    parser.add_argument("--max-rate-limit-wait", type=float, metavar="MIN",
                        help="minutes the job may wait in all on GitHub's rate-limit answers before it hands the "
                             f"rest on (default {MAX_RATE_LIMIT_WAIT_S // 60}; --shard rest, which hands on to no "
                             "job: its whole clock)")
    parser.add_argument("--subjects", type=Path, metavar="FILE",
                        help="append each published wheel and its _build_info.json here (sha256  name), the "
                             "subjects GitHub's attestation action signs, at most 1,024 a file: then in NAME-1.txt, "
                             "NAME-2.txt, ... (docs/attestations.md)")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output: one object at the end (the verdicts go to stderr as they come)")
    publish_options(parser)
    parser.set_defaults(publishers=None)  # default: a share of the token by the plan's cells


class RunArtifacts:
    """The artifacts of one workflow run: listed once per job, then each downloaded by name,
    streamed to disk under a cap. A cell's ``wheels-<id>`` artifact is a small zip of its ledger
    fragment; its wheel is an artifact of its own, uploaded unzipped under the wheel's file name,
    so the job's disk holds the wheel once, never beside a zip of it."""

    def __init__(self, source: Source, run_id: str) -> None:
        self.source, self.run_id = source, run_id
        self._listing: dict[str, ghrest.Artifact] | None = None
        self._failed: ghrest.GithubApiError | None = None

    def listing(self) -> dict[str, ghrest.Artifact]:
        """name -> artifact; of two under one name (a re-run's attempt), the newer. A listing that
        failed (after the client's bounded retries) fails every later cell at once, with the
        same message: a shard of 256 cells never retries it 256 times."""
        if self._failed is not None:
            raise self._failed
        if self._listing is None:
            try:
                artifacts = self.source.artifacts(self.run_id)
            except ghrest.GithubApiError as exc:
                self._failed = exc
                raise
            self._listing = {a.name: a for a in sorted(artifacts, key=lambda a: a.id)}
        return self._listing

    def download(self, name: str, dest: Path, *, max_bytes: int) -> bool:
        """The artifact ``name`` into the file ``dest`` (at most ``max_bytes``); False when the
        run has none."""
        artifact = self.listing().get(name)
        if artifact is None:
            return False
        if artifact.expired:
            raise ghrest.GithubApiError(f"artifact {name} of run {self.run_id} has expired",
                                        hint="the run's artifacts are past their retention; the next run builds "
                                             "the cell again")
        self.source.download_artifact(artifact, dest, max_bytes=max_bytes)
        return True

    def fetch(self, cell_id: str, folder: Path) -> bool:
        """A cell's fragment and wheel into ``folder`` (stream.Fetch)."""
        folder.mkdir(parents=True, exist_ok=True)
        bundle = folder / "fragment.zip"
        if not self.download(f"{ARTIFACT_PREFIX}{cell_id}", bundle, max_bytes=MAX_BUNDLE_BYTES):
            return False
        names = _extract_fragments(bundle, folder)
        bundle.unlink()
        for fragment in names:
            wheel = fragment.removesuffix(FRAGMENT_SUFFIX)
            if not self.download(wheel, folder / wheel, max_bytes=MAX_WHEEL_BYTES):
                return False  # the wheel's upload never happened: the cell failed
            _check_wheel_zip(folder / wheel)
        return bool(names)


def _check_wheel_zip(path: Path) -> None:
    """A downloaded wheel opens as a zip with a bounded member list (the gate then reads it
    whole); anything else is said before any of it is used."""
    try:
        with zipfile.ZipFile(path) as zf:
            count = len(zf.infolist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"{path.name}: the downloaded artifact is not a wheel (zip) ({exc})",
                         hint="a build job uploads its wheel unzipped (archive: false), named after it") from None
    if count > MAX_WHEEL_MEMBERS:
        raise UsageError(f"{path.name}: {count} members, more than {MAX_WHEEL_MEMBERS}")


def _extract_fragments(bundle: Path, folder: Path) -> list[str]:
    """The ledger fragments of a cell's small artifact, written flat into ``folder``; anything
    else in it (a path, a large member, another kind of file) refuses the cell."""
    try:
        with zipfile.ZipFile(bundle) as zf:
            infos = zf.infolist()
            if len(infos) > 8 or any("/" in i.filename or "\\" in i.filename or not i.filename.endswith(FRAGMENT_SUFFIX)
                                     or i.file_size > MAX_FRAGMENT_BYTES for i in infos):
                raise UsageError(f"{bundle.name}: holds something other than ledger fragments",
                                 hint="a build job uploads its wheel and its fragment, nothing else")
            for i in infos:
                (folder / i.filename).write_bytes(zf.read(i))
            return [i.filename for i in infos]
    except zipfile.BadZipFile as exc:
        raise UsageError(f"{bundle.name}: not a zip artifact ({exc})") from None


def _minutes(value: float, flag: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} {value}: a finite number of minutes, at least 0")
    return value * 60


def _reports(args: argparse.Namespace) -> list[Path]:
    if args.reports is None or not args.reports.is_dir():
        raise UsageError("--shard rest publishes what the run's publish jobs handed on: pass their reports "
                         "folder as --reports")
    return sorted(p for p in args.reports.rglob(f"{REPORT_PREFIX}*.jsonl") if p.is_file())


def _cells_and_share(args: argparse.Namespace, plan: Mapping[str, Any]) -> tuple[list[tuple[str, str]], float]:
    """The cells this job publishes, and its share of the token's limits."""
    jobs: dict[str, int] = {}  # the cells of each of the wave's publish jobs (rest runs alone: none)
    if args.shard == REST:
        scheduled = {str(c["id"]) for c in plan["cells"]}
        cells = [c for c in handed_on(read_reports(_reports(args))) if c[0] in scheduled]
    else:
        cells, jobs = shard_cells(slice_plan(plan, args.shard)), publish_jobs(plan)
    if args.publishers is not None:
        check_publishers(args.publishers)
    return cells, job_share(args.shard, jobs, args.publishers)


def note_subjects(path: Path, report: UploadReport, files: Sequence[Path]) -> None:
    """The attestation's subjects for each wheel this publish placed on every target as these very
    bytes (published, or already there): an adopted earlier build is another file, not attested here."""
    placed = {v.wheel for v in report.verdicts if v.verdict in (Verdict.PUBLISHED, Verdict.PRESENT)}
    refused = {v.wheel for v in report.verdicts if v.verdict not in (Verdict.PUBLISHED, Verdict.PRESENT)}
    for wheel in files:
        if wheel.name.endswith(".whl") and wheel.name in placed - refused:
            append_subjects(path, subject_lines(wheel))


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    limit_s = _minutes(args.job_limit, "--job-limit")
    reserve_s = _minutes(args.reserve, "--reserve")
    cap_s = (rate_limit_wait_s(args.shard, limit_s) if args.max_rate_limit_wait is None
             else _minutes(args.max_rate_limit_wait, "--max-rate-limit-wait"))
    if args.job_started is not None and not math.isfinite(args.job_started):
        raise UsageError(f"--job-started {args.job_started}: epoch seconds")
    plan = read_plan(args.plan)
    cells, share = _cells_and_share(args, plan)
    if args.subjects is not None and 2 * len(cells) > SUBJECT_PARTS * MAX_SUBJECTS:
        # refused before anything is published: no wheel goes out that the attest job cannot name
        raise UsageError(f"{len(cells)} cells to publish: their wheels' {2 * len(cells)} subjects are more than "
                         f"the {SUBJECT_PARTS} attestations of {MAX_SUBJECTS} subjects publish-shard.yml's attest "
                         "job makes", hint="pass a smaller --max-shards to farm matrix in build.yml, or give the "
                         "attest job more steps and raise SUBJECT_PARTS")
    config = load_config(root)
    targets = configured_targets(config, args.target)
    derive = derive_from_config(config)
    ledger = ledger_location(root)
    clock = RealClock()
    job = JobClock(args.job_started if args.job_started is not None else clock.now(), limit_s, reserve_s)
    # one throttle, one budget for every REST call of the job: downloads, lookups and uploads
    throttle = Throttle(github_limits(share=share), clock=clock, budget=job.budget(cap_s))
    actions = ghrest.actions_client(args.repository, os.environ, clock=clock, throttle=throttle)
    artifacts = run_artifacts(os.environ, actions, args.run_id, budget=throttle.budget)
    clients: dict[str, ghrest.Client] = {}
    caches: dict[str, ReleaseCache] = {}  # what the job has read of each target's releases

    def releases(settings: GithubSettings) -> ghrest.Client:
        if settings.name not in clients:
            clients[settings.name] = github_client(settings, throttle=throttle, clock=clock)
        return clients[settings.name]

    # The ledger is read once for the shard and each record appended (farm/provenance/ledgerbook.py);
    # commits and pushes are batched (at most one a minute, and one at the end).
    book = LedgerBook.open(ledger)
    pusher = LedgerPusher(ledger, args.push_ledger, every_s=PUSH_EVERY_S) if args.push_ledger else None

    def publish(cell: CellResult) -> tuple[str, str]:
        foreign = [why for why in (not_the_cells(cell.id, f) for f in cell.files if f.name.endswith(".whl")) if why]
        if foreign:
            return REFUSED, "; ".join(foreign)
        report = upload(cell.files[0].parent, targets, ledger=ledger, derive=derive, book=book, pusher=pusher,
                        github_client=releases, release_caches=caches)
        if report.ok:
            if args.subjects is not None:
                note_subjects(args.subjects, report, cell.files)
            return PUBLISHED, ""
        # GitHub unreachable or past its limits: retried next wave; anything else is a finding
        return (ERROR if report.exit_code == EXIT_ENVIRONMENT else REFUSED), render(report)

    pace = CellPace()

    def stop() -> str | None:
        """Why the job stops before the next cell: its clock has no room for it."""
        now = clock.now()
        slowest = pace.next_cell_s(now, throttle.waited_s)
        if next_cell_fits(job.left(now), slowest, throttle.delay("POST")):
            return None
        return (f"{max(0.0, job.left(now)) / 60:.0f} min left before this job's deadline, its slowest cell took "
                f"{slowest:.0f} s: handed to the run's next publish job")

    args.report.parent.mkdir(parents=True, exist_ok=True)
    with open(args.report, "a", encoding="utf-8") as fh:
        def note(v: CellVerdict) -> None:
            fh.write(json.dumps(v.to_json()) + "\n")
            fh.flush()
            print(f"{v.status}: {v.id}" + (f" ({v.detail.splitlines()[0]})" if v.detail else ""),
                  file=sys.stderr if args.json else sys.stdout)

        verdicts = publish_shard(cells, RunArtifacts(artifacts, args.run_id).fetch, publish, args.scratch,
                                 on_verdict=note, stop=stop)
    if args.shard == REST:
        _record_attempts(plan, read_reports([*_reports(args), args.report]), actions, args.run_id, ledger, config,
                         limit_s, pusher)
    push_failed = pusher is not None and pusher.finish() is not None
    published = sum(v.built for v in verdicts)
    rest = actions.requests + sum(c.requests for c in clients.values())
    service = artifacts.requests if artifacts is not actions else 0
    if args.json:
        print(json.dumps({"shard": args.shard, "published": published, "verdicts": [v.to_json() for v in verdicts],
                          "rest_requests": rest, "artifact_service_requests": service,
                          "handed_on": sum(v.status == HANDED_ON for v in verdicts),
                          "ledger_push_error": str(pusher.error) if push_failed and pusher else None}, indent=2))
    if push_failed and pusher is not None:
        print(f"the ledger's last push failed (its commits stay in this checkout): {pusher.error}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    per = f" ({rest / published:.2f} per published cell)" if published else ""
    waited = throttle.budget.rate_limit_waited_s
    print(f"shard {args.shard}: {published} of {len(verdicts)} cell(s) published, "
          f"{sum(v.status == HANDED_ON for v in verdicts)} handed on; {rest} REST request(s){per}, "
          f"{service} artifact-service request(s); {throttle.waited_s:.0f} s waited ({waited:.0f} s on GitHub's "
          f"rate-limit answers); {share:.0%} of the token's limits", file=sys.stderr)
    return 0


def _record_attempts(plan: Mapping[str, Any], verdicts: Mapping[str, CellVerdict], actions: ghrest.Client,
                     run_id: str, ledger: Path, config: FarmConfig, limit_s: float,
                     pusher: LedgerPusher | None) -> None:
    """Each cell of the wave that ended without a wheel, killed or failed as GitHub's listing of
    the run's jobs says, recorded in the ledger's attempts (once per wave: this is its last job)."""
    failed = [v for v in verdicts.values() if v.status == FAILED]
    if not failed:
        return
    cells = {str(c["id"]): c for c in plan["cells"]}
    try:
        jobs = actions.run_jobs(run_id)
    except ghrest.GithubApiError as exc:  # the wave is published; only the lesson is lost
        print(f"the run's jobs could not be read, no attempt recorded: {exc}", file=sys.stderr)
        return
    found = []
    for v in failed:
        cell = cells.get(v.id)
        said = classify(jobs_of(v.id, jobs), limit_s=limit_s) if cell is not None else None
        if cell is None or said is None:
            continue
        outcome, job, count = said
        recipe = config.recipes.get(str(cell["package"]))
        found.append(Attempt(v.id, str(cell["package"]), (str(cell["package"]), str(cell["cuda"]), str(cell["torch"]),
                                                          str(cell["python_tag"]), str(cell["platform"])),
                             int(cell["build_epoch"]), outcome, job.elapsed_s or 0.0, count, run_id, job.name,
                             recipe.sha256 if recipe else None, config.defaults.sha256))
    if found:
        append_attempts(ledger, found)
        print(f"{len(found)} cell(s) recorded as attempts: "
              + ", ".join(f"{a.cell} {a.outcome} after {a.elapsed_s / 60:.0f} min" for a in found[:10]),
              file=sys.stderr)
        if pusher is not None:
            pusher(f"{len(found)} attempt(s) of run {run_id}")
