"""``farm publish-shard --plan FILE --shard I|link --run-id ID``: publish one build shard's wheels,
one artifact at a time.

The publish job of build shard I runs it after that shard's builds: for each cell it downloads the
cell's ``wheels-<id>`` artifact (``gh run download``), gates and publishes it (``farm upload``'s
path, into the checkout's ledger), commits the ledger record and pushes it, then deletes the
artifact before the next cell (farm/schedule/stream.py). Each cell's verdict is appended to
``--report`` as it comes; ``farm wave --reports`` reads the reports to decide the next wave.

Exit 0 whenever every cell got a verdict (a failed or refused cell is listed, not fatal: it stays
in the queue); exit 2 for a bad plan or shard.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from farm.commands.slice import read_plan
from farm.errors import ToolError, redact
from farm.model.config import LEDGER_FILE, load_config
from farm.schedule.outcome import ARTIFACT_PREFIX, CellResult
from farm.schedule.slices import slice_plan
from farm.schedule.stream import PUBLISHED, REFUSED, CellVerdict, Fetch, publish_shard, shard_cells

PUSH_ATTEMPTS = 8


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="FILE", help="the plan of this run")
    parser.add_argument("--shard", required=True, metavar="I", help="the build shard (0, 1, ...) or 'link'")
    parser.add_argument("--run-id", required=True, help="the workflow run whose artifacts to publish")
    parser.add_argument("--repository", default=os.environ.get("GITHUB_REPOSITORY"),
                        help="owner/name of the run (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--target", action="append", metavar="NAME", help="publish target(s) of _defaults.yml")
    parser.add_argument("--root", type=Path, default=Path("."), help="the farm repository checkout (default: .)")
    parser.add_argument("--scratch", type=Path, default=Path("scratch"),
                        help="where one artifact at a time is downloaded (emptied after each cell)")
    parser.add_argument("--report", type=Path, required=True, metavar="FILE",
                        help="append each cell's verdict here (one JSON object a line)")
    parser.add_argument("--no-push", action="store_true", help="record in the ledger file, commit nothing")


def gh_fetch(run_id: str, repository: str | None) -> Fetch:
    """fetch(cell id, folder) through ``gh run download``: one artifact, nothing else."""
    gh = shutil.which("gh")
    if gh is None:
        raise ToolError("`gh` is not on PATH", hint="install the GitHub CLI (https://cli.github.com)")

    def fetch(cell_id: str, folder: Path) -> bool:
        argv = [gh, "run", "download", run_id, "--name", f"{ARTIFACT_PREFIX}{cell_id}", "--dir", str(folder)]
        if repository:
            argv += ["--repo", repository]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
        if proc.returncode == 0:
            return True
        if "no valid artifacts" in proc.stderr or "no artifact matches" in proc.stderr:
            return False
        raise ToolError(f"`gh run download {run_id} --name {ARTIFACT_PREFIX}{cell_id}` exited {proc.returncode}",
                        hint=redact(proc.stderr.strip()[-300:]))
    return fetch


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, check=False)


def commit_and_push(root: Path, message: str, *, attempts: int = PUSH_ATTEMPTS) -> None:
    """Commit the ledger and push it; a rejected push (another writer was first) rebases on the
    branch head and tries again (``ledger.jsonl merge=union``: both writers' lines are kept)."""
    _git(root, "add", LEDGER_FILE)
    if _git(root, "diff", "--cached", "--quiet").returncode == 0:
        return
    proc = _git(root, "commit", "-q", "-m", message)
    if proc.returncode != 0:
        raise ToolError(f"git commit of the ledger failed: {proc.stderr.strip()[-300:]}")
    for attempt in range(attempts):
        if _git(root, "push", "-q", "origin", "HEAD").returncode == 0:
            return
        pull = _git(root, "pull", "-q", "--rebase", "origin", _git(root, "branch", "--show-current").stdout.strip())
        if pull.returncode != 0:
            _git(root, "rebase", "--abort")
            raise ToolError(f"the ledger could not be rebased on the branch head: {pull.stderr.strip()[-300:]}",
                            hint="a writer changed ledger.jsonl other than by appending; merge it by hand")
        time.sleep(min(2 ** attempt, 30))
    raise ToolError(f"the ledger push was rejected {attempts} times", hint="the next wave adopts the uploaded wheels")


def run(args: argparse.Namespace) -> int:
    from farm.commands.upload import configured_targets, render
    from farm.provenance.verdict import derive_from_config
    from farm.publish import upload

    root = args.root.resolve()
    cells = shard_cells(slice_plan(read_plan(args.plan), args.shard))
    targets = configured_targets(root, args.target)
    derive = derive_from_config(load_config(root))
    ledger = root / LEDGER_FILE

    def publish(cell: CellResult) -> tuple[str, str]:
        folder = cell.files[0].parent
        report = upload(folder, targets, ledger=ledger, derive=derive)
        if not report.ok:
            return REFUSED, render(report)
        if not args.no_push:
            commit_and_push(root, f"ledger: {cell.id} (run {args.run_id})")
        return PUBLISHED, ""

    args.report.parent.mkdir(parents=True, exist_ok=True)
    with open(args.report, "a", encoding="utf-8") as fh:
        def note(v: CellVerdict) -> None:
            fh.write(json.dumps(v.to_json()) + "\n")
            fh.flush()
            print(f"{v.status}: {v.id}" + (f" ({v.detail.splitlines()[0]})" if v.detail else ""))

        verdicts = publish_shard(cells, gh_fetch(args.run_id, args.repository), publish, args.scratch,
                                 on_verdict=note)
    published = sum(v.built for v in verdicts)
    print(f"shard {args.shard}: {published} of {len(verdicts)} cell(s) published", file=sys.stderr)
    return 0
