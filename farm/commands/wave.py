"""``farm wave --plan PLAN --artifacts DIR --dist DIST``: what a workflow run built and what comes next.

The publish job of ``build.yml`` runs it after the cell jobs, whatever their results: it copies the
built cells' wheels and ledger fragments into DIST for ``farm upload``, lists the failed cells
(table, ``--json``, the step summary), and with ``--github-output`` tells the workflow whether to
publish (something built) and whether to start the next wave (something built and cells deferred).
Exit 0 whenever the decision could be made: failed cells are listed, not fatal (they stay in the
queue); exit 2 for a plan or artifacts that do not belong together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from farm import jsonread
from farm.errors import UsageError
from farm.fsutil import atomic_write
from farm.schedule.outcome import decide, gather, github_outputs, read_artifacts, summary

MAX_PLAN_BYTES = 64 << 20  # the public farm's largest wave plan is a few MB


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="FILE",
                        help="the matrix JSON of this run (`farm matrix --plan FILE`)")
    parser.add_argument("--artifacts", type=Path, required=True, metavar="DIR",
                        help="the cell jobs' artifacts, one folder wheels-<cell id> each")
    parser.add_argument("--dist", type=Path, metavar="DIR",
                        help="copy the built cells' wheels and fragments here (for farm upload)")
    parser.add_argument("--report", type=Path, metavar="FILE", help="write the outcome as JSON here too")
    parser.add_argument("--github-output", action="store_true",
                        help="write publish/next_wave/built/failed/deferred to $GITHUB_OUTPUT, "
                             "the failed cells to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.github_output and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output needs $GITHUB_OUTPUT (GitHub Actions sets it)",
                         hint="run it in a workflow step, or set GITHUB_OUTPUT to a file")
    try:
        plan = jsonread.load_file(args.plan, MAX_PLAN_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{args.plan}: no such plan", hint="the matrix job uploads it as an artifact") from None
    except ValueError as exc:
        raise UsageError(f"{args.plan}: not a matrix plan farm wrote: {exc}",
                         hint="pass the plan `farm matrix --plan FILE` wrote") from None
    if not isinstance(plan, dict):
        raise UsageError(f"{args.plan}: not a matrix plan (a JSON object)")
    outcome = decide(plan, read_artifacts(args.artifacts, warn=lambda line: print(f"farm wave: {line}",
                                                                                  file=sys.stderr)))
    copied = gather(outcome, args.dist) if args.dist is not None else []
    report = {**outcome.to_json(), "dist": [p.name for p in copied]}
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
        for _package, ids in sorted(outcome.failed_by_package().items()):
            for cid in ids:
                print(f"failed: {cid}")
        print(f"publish: {'yes' if outcome.publish else 'no'}; next wave: {'yes' if outcome.next_wave else 'no'}")
    return 0
