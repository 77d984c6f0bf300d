"""``farm publish-shard --plan FILE --shard I|link --run-id ID``: publish one build shard's wheels,
one artifact at a time.

The publish job of build shard I runs it after that shard's builds: for each cell it downloads the
cell's artifacts (its fragment, then its wheel, through ``gh api``), gates and publishes the wheel
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
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from farm.commands.slice import read_plan
from farm.commands.upload import configured_targets, render
from farm.errors import EXIT_ENVIRONMENT, ToolError, UsageError, redact
from farm.model.config import LEDGER_FILE, load_config
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.verdict import derive_from_config
from farm.publish import upload
from farm.publish.ledgerpush import LedgerPusher
from farm.schedule.outcome import ARTIFACT_PREFIX, FRAGMENT_SUFFIX, CellResult
from farm.schedule.slices import slice_plan
from farm.schedule.stream import ERROR, PUBLISHED, REFUSED, CellVerdict, publish_shard, shard_cells

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
    parser.add_argument("--publishers", type=int, default=1, metavar="N",
                        help="publish jobs that may run at once with the same token: each takes 1/N of "
                             "GitHub's limits (build.yml: its shard jobs plus the link job)")
    parser.add_argument("--push-ledger", metavar="REMOTE",
                        help="commit and push the ledger as records are made (at most once a minute, and at the "
                             "end; fetch, rebase and retry on a rejected push); without it the records stay in "
                             "the checkout's ledger file")


class RunArtifacts:
    """The artifacts of one workflow run through GitHub's REST API (``gh api``): listed once per
    job (100 a page), then each downloaded by id. A cell's ``wheels-<id>`` artifact is a small zip
    of its ledger fragment; its wheel is an artifact of its own, uploaded unzipped under the
    wheel's file name, so the job's disk holds the wheel once, never beside a zip of it."""

    def __init__(self, run_id: str, repository: str | None) -> None:
        if not repository:
            raise UsageError("--repository (or $GITHUB_REPOSITORY) names the run's repository")
        self.run_id, self.repository = run_id, repository
        self._ids: dict[str, int] | None = None

    def _api(self, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[Any]:
        gh = shutil.which("gh")
        if gh is None:
            raise ToolError("`gh` is not on PATH", hint="install the GitHub CLI (https://cli.github.com)")
        proc = subprocess.run([gh, "api", *args], stdout=stdout, stderr=subprocess.PIPE, check=False, timeout=3600)
        if proc.returncode != 0:
            raise ToolError(f"`gh api {args[-1]}` exited {proc.returncode}",
                            hint=redact(proc.stderr.decode("utf-8", "replace").strip()[-300:]))
        return proc

    def ids(self) -> dict[str, int]:
        if self._ids is None:
            proc = self._api("--paginate", "--jq", '.artifacts[] | select(.expired | not) | "\\(.id)\\t\\(.name)"',
                             f"repos/{self.repository}/actions/runs/{self.run_id}/artifacts?per_page=100")
            pairs = (line.split("\t", 1) for line in proc.stdout.decode().splitlines() if "\t" in line)
            self._ids = {name: int(i) for i, name in pairs}
        return self._ids

    def download(self, name: str, dest: Path) -> bool:
        """The artifact ``name`` into the file ``dest``; False when the run has none."""
        artifact = self.ids().get(name)
        if artifact is None:
            return False
        with open(dest, "wb") as fh:
            self._api(f"repos/{self.repository}/actions/artifacts/{artifact}/zip", stdout=fh)
        return True

    def fetch(self, cell_id: str, folder: Path) -> bool:
        """A cell's fragment and wheel into ``folder`` (stream.Fetch)."""
        folder.mkdir(parents=True, exist_ok=True)
        bundle = folder / "fragment.zip"
        if not self.download(f"{ARTIFACT_PREFIX}{cell_id}", bundle):
            return False
        names = _extract_fragments(bundle, folder)
        bundle.unlink()
        for fragment in names:
            wheel = fragment.removesuffix(FRAGMENT_SUFFIX)
            if not self.download(wheel, folder / wheel):
                return False  # the wheel's upload never happened: the cell failed
        return bool(names)


MAX_FRAGMENT_BYTES = 1 << 20


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


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    cells = shard_cells(slice_plan(read_plan(args.plan), args.shard))
    targets = configured_targets(root, args.target)
    derive = derive_from_config(load_config(root))
    ledger = root / LEDGER_FILE

    if args.publishers < 1:
        raise UsageError(f"--publishers must be >= 1, got {args.publishers}")

    # The ledger is read once for the shard and each record appended (farm/provenance/ledgerbook.py);
    # commits and pushes are batched (at most one a minute, and one at the end).
    book = LedgerBook.open(ledger)
    pusher = LedgerPusher(ledger, args.push_ledger, every_s=PUSH_EVERY_S) if args.push_ledger else None

    def publish(cell: CellResult) -> tuple[str, str]:
        report = upload(cell.files[0].parent, targets, ledger=ledger, derive=derive, publishers=args.publishers,
                        book=book, pusher=pusher)
        if report.ok:
            return PUBLISHED, ""
        # GitHub unreachable or past its limits: retried next wave; anything else is a finding
        return (ERROR if report.exit_code == EXIT_ENVIRONMENT else REFUSED), render(report)

    args.report.parent.mkdir(parents=True, exist_ok=True)
    with open(args.report, "a", encoding="utf-8") as fh:
        def note(v: CellVerdict) -> None:
            fh.write(json.dumps(v.to_json()) + "\n")
            fh.flush()
            print(f"{v.status}: {v.id}" + (f" ({v.detail.splitlines()[0]})" if v.detail else ""))

        verdicts = publish_shard(cells, RunArtifacts(args.run_id, args.repository).fetch, publish, args.scratch,
                                 on_verdict=note)
    if pusher is not None and pusher.finish() is not None:
        print(f"the ledger's last push failed (its commits stay in this checkout): {pusher.error}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    published = sum(v.built for v in verdicts)
    print(f"shard {args.shard}: {published} of {len(verdicts)} cell(s) published", file=sys.stderr)
    return 0
