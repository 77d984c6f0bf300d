"""``farm publish-shard --plan FILE --shard I|link --run-id ID``: publish one build shard's wheels,
one artifact at a time.

The publish job of build shard I runs it after that shard's builds: for each cell it downloads the
cell's artifacts (its fragment, then its wheel, through GitHub's REST API at ``GITHUB_API_URL``
with the token of ``GH_TOKEN``/``GITHUB_TOKEN``: :mod:`farm.publish.ghrest`, throttled with the
job's uploads under one share of GitHub's limits), gates and publishes the wheel
(``farm upload``'s path, into the checkout's ledger, read once and each record appended;
``--push-ledger``: the records committed and pushed at most once a minute and at the end,
fetch-rebase-retry on a rejection), then deletes the artifacts before the next cell
(farm/schedule/stream.py). Each cell's verdict is appended to ``--report`` as it comes;
``farm wave --reports`` reads the reports to decide the next wave.

Exit 0 whenever every cell got a verdict (a failed or refused cell is listed, not fatal: it stays
in the queue); exit 2 for a bad plan or shard; exit 3 when the ledger's last push fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from farm.commands.slice import read_plan
from farm.commands.upload import check_publishers, configured_targets, publish_options, render
from farm.errors import EXIT_ENVIRONMENT, UsageError
from farm.load.recipes import load_config
from farm.model.config import LEDGER_FILE
from farm.provenance.judge import derive_from_config
from farm.provenance.ledgerbook import LedgerBook
from farm.publish import ghrest
from farm.publish.attestation import subject_lines
from farm.publish.github import ASSET_MAX_BYTES
from farm.publish.ledgerpush import LedgerPusher
from farm.publish.publish import UploadReport, upload
from farm.publish.releases import GithubSettings, github_client
from farm.publish.verdict import Verdict
from farm.schedule.outcome import ARTIFACT_PREFIX, FRAGMENT_SUFFIX, CellResult
from farm.schedule.slices import slice_plan
from farm.schedule.stream import ERROR, PUBLISHED, REFUSED, CellVerdict, not_the_cells, publish_shard, shard_cells

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
    parser.add_argument("--shard", required=True, metavar="I", help="the build shard (0, 1, ...) or 'link'")
    parser.add_argument("--run-id", required=True, help="the workflow run whose artifacts to publish")
    parser.add_argument("--repository", default=os.environ.get("GITHUB_REPOSITORY"),
                        help="owner/name of the run (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--target", action="append", metavar="NAME", help="publish target(s) of _defaults.yml")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository checkout (default: .)")
    parser.add_argument("--scratch", type=Path, default=Path("scratch"),
                        help="where one artifact at a time is downloaded (emptied after each cell)")
    parser.add_argument("--report", type=Path, required=True, metavar="FILE",
                        help="append each cell's verdict here (one JSON object a line)")
    parser.add_argument("--subjects", type=Path, metavar="FILE",
                        help="append each published wheel and its _build_info.json here (sha256  name), the "
                             "subjects GitHub's attestation action signs (docs/attestations.md)")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output: one object at the end (the verdicts go to stderr as they come)")
    publish_options(parser)


class RunArtifacts:
    """The artifacts of one workflow run through GitHub's REST API: listed once per job (100 a
    page), then each downloaded by id, streamed to disk under a cap. A cell's ``wheels-<id>``
    artifact is a small zip of its ledger fragment; its wheel is an artifact of its own, uploaded
    unzipped under the wheel's file name, so the job's disk holds the wheel once, never beside a
    zip of it."""

    def __init__(self, client: ghrest.Client, run_id: str) -> None:
        self.client, self.run_id = client, run_id
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
                artifacts = self.client.artifacts(self.run_id)
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
        self.client.download_artifact(artifact, dest, max_bytes=max_bytes)
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


def note_subjects(path: Path, report: UploadReport, files: Sequence[Path]) -> None:
    """The attestation's subjects for each wheel this publish placed on every target as these very
    bytes (published, or already there): an adopted earlier build is another file, not attested here."""
    placed = {v.wheel for v in report.verdicts if v.verdict in (Verdict.PUBLISHED, Verdict.PRESENT)}
    refused = {v.wheel for v in report.verdicts if v.verdict not in (Verdict.PUBLISHED, Verdict.PRESENT)}
    with open(path, "a", encoding="utf-8") as out:
        for wheel in files:
            if wheel.name.endswith(".whl") and wheel.name in placed - refused:
                out.writelines(subject_lines(wheel))


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    check_publishers(args.publishers)
    cells = shard_cells(slice_plan(read_plan(args.plan), args.shard))
    config = load_config(root)
    targets = configured_targets(config, args.target)
    derive = derive_from_config(config)
    ledger = root / LEDGER_FILE
    actions = ghrest.actions_client(args.repository, os.environ, publishers=args.publishers)

    def releases(settings: GithubSettings) -> ghrest.Client:
        # one throttle for the job's downloads and uploads: together they keep to its share
        return github_client(settings, throttle=actions.throttle, clock=actions.clock)

    # The ledger is read once for the shard and each record appended (farm/provenance/ledgerbook.py);
    # commits and pushes are batched (at most one a minute, and one at the end).
    book = LedgerBook.open(ledger)
    pusher = LedgerPusher(ledger, args.push_ledger, every_s=PUSH_EVERY_S) if args.push_ledger else None

    def publish(cell: CellResult) -> tuple[str, str]:
        foreign = [why for why in (not_the_cells(cell.id, f) for f in cell.files if f.name.endswith(".whl")) if why]
        if foreign:
            return REFUSED, "; ".join(foreign)
        report = upload(cell.files[0].parent, targets, ledger=ledger, derive=derive, publishers=args.publishers,
                        book=book, pusher=pusher, github_client=releases)
        if report.ok:
            if args.subjects is not None:
                note_subjects(args.subjects, report, cell.files)
            return PUBLISHED, ""
        # GitHub unreachable or past its limits: retried next wave; anything else is a finding
        return (ERROR if report.exit_code == EXIT_ENVIRONMENT else REFUSED), render(report)

    args.report.parent.mkdir(parents=True, exist_ok=True)
    with open(args.report, "a", encoding="utf-8") as fh:
        def note(v: CellVerdict) -> None:
            fh.write(json.dumps(v.to_json()) + "\n")
            fh.flush()
            print(f"{v.status}: {v.id}" + (f" ({v.detail.splitlines()[0]})" if v.detail else ""),
                  file=sys.stderr if args.json else sys.stdout)

        verdicts = publish_shard(cells, RunArtifacts(actions, args.run_id).fetch, publish, args.scratch,
                                 on_verdict=note)
    push_failed = pusher is not None and pusher.finish() is not None
    published = sum(v.built for v in verdicts)
    if args.json:
        print(json.dumps({"shard": args.shard, "published": published, "verdicts": [v.to_json() for v in verdicts],
                          "artifact_requests": actions.requests,
                          "ledger_push_error": str(pusher.error) if push_failed and pusher else None}, indent=2))
    if push_failed and pusher is not None:
        print(f"the ledger's last push failed (its commits stay in this checkout): {pusher.error}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    print(f"shard {args.shard}: {published} of {len(verdicts)} cell(s) published; "
          f"{actions.requests} artifact request(s)", file=sys.stderr)
    return 0
