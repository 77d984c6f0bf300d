"""``farm wave --plan PLAN --reports DIR``: what a workflow run published and what comes next.

The chain job of ``build.yml`` runs it after the publish jobs (``farm publish-shard``), whatever
their results: it reads their per-cell verdicts (small ``published-*`` reports, never the wheels),
lists the cells that did not make it (table, ``--json``, the step summary), and with
``--github-output`` tells the workflow whether to start the next wave (something published and
cells deferred). Exit 0 whenever the decision could be made: failed cells are listed, not fatal
(they stay in the queue); exit 2 for a plan or reports that do not belong together.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from farm.commands.slice import read_plan
from farm.errors import UsageError
from farm.fsutil import atomic_write
from farm.schedule.outcome import from_reports, github_outputs, summary
from farm.schedule.stream import REPORT_PREFIX, read_reports


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="FILE",
                        help="the matrix JSON of this run (`farm matrix --plan FILE`)")
    parser.add_argument("--reports", type=Path, required=True, metavar="DIR",
                        help=f"the publish jobs' reports: {REPORT_PREFIX}*.jsonl files anywhere under DIR "
                             "(missing: nothing was published)")
    parser.add_argument("--report", type=Path, metavar="FILE", help="write the outcome as JSON here too")
    parser.add_argument("--github-output", action="store_true",
                        help="write publish/next_wave/built/failed/deferred to $GITHUB_OUTPUT, "
                             "the failed cells to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.github_output and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output needs $GITHUB_OUTPUT (GitHub Actions sets it)",
                         hint="run it in a workflow step, or set GITHUB_OUTPUT to a file")
    plan = read_plan(args.plan)
    if args.reports.exists() and not args.reports.is_dir():
        raise UsageError(f"--reports {args.reports}: not a folder",
                         hint=f"pass the folder the publish jobs' {REPORT_PREFIX}* artifacts were downloaded into")
    paths = sorted(args.reports.rglob(f"{REPORT_PREFIX}*.jsonl")) if args.reports.is_dir() else []
    outcome = from_reports(plan, read_reports(paths))
    report = outcome.to_json()
    if args.report is not None:
        atomic_write(args.report, [(json.dumps(report, indent=2) + "\n").encode()])
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in github_outputs(outcome).items()))
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
                fh.write(summary(outcome))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(summary(outcome), end="")
        for c in outcome.failed:
            print(f"{c.status or 'failed'}: {c.id}")
        print(f"published: {len(outcome.built)}; next wave: {'yes' if outcome.next_wave else 'no'}")
    return 0
