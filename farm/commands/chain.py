"""``farm chain [--package ...] --ref REF``: start the next wave without losing a waiting run's cells.

The last job of a wave runs it when cells are deferred. It lists the runs of the wave workflow
that wait to start on the branch (GitHub's REST API at ``GITHUB_API_URL``, the token of
``GH_TOKEN``/``GITHUB_TOKEN``: each waiting status in turn, a run's title carries its inputs),
merges their inputs with this wave's (farm/schedule/chain.py) and dispatches the workflow with
the merge (``workflow_dispatch``), which replaces the waiting run with one that covers them all.
``--dry-run`` prints the merge and reads and dispatches nothing.

``--wait-for-runs MIN`` first waits, checking once a minute, until no run of the workflow on the
branch but this one (``--run-id``, default ``$GITHUB_RUN_ID``) is in progress: the next-wave job
starts a wave while its own run still links and publishes, so at most two runs are in flight.
When one still is after MIN minutes it dispatches nothing and exits 1 (the run's chain job then
starts the next wave).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import fields

from farm.errors import EXIT_DEFECT, UsageError
from farm.publish import ghrest
from farm.publish.ratelimit import Clock, RealClock
from farm.schedule.chain import ChainInputs, merge, parse_title, title

# A run that has not started: held by the concurrency group (pending), waiting for a runner or an
# environment's approval, or just created.
WAITING = ("pending", "queued", "waiting", "requested")
POLL_S = 60.0  # --wait-for-runs checks the runs in progress this often


def configure(parser: argparse.ArgumentParser) -> None:
    for f in fields(ChainInputs):
        parser.add_argument(f"--{f.name}", default=f.default, help=f"this wave's {f.name} input")
    parser.add_argument("--ref", required=True, help="the branch the waves run on")
    parser.add_argument("--workflow", default="build.yml", help="the wave workflow (default: build.yml)")
    parser.add_argument("--repository", default=os.environ.get("GITHUB_REPOSITORY"),
                        help="owner/name the workflow runs in (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--wait-for-runs", type=float, metavar="MIN",
                        help="first wait, at most MIN minutes, until no other run of the workflow on the branch is "
                             "in progress (at most two in flight: this one and the next); exit 1 if one still is")
    parser.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", ""),
                        help="this run, which --wait-for-runs does not wait for (default: $GITHUB_RUN_ID)")
    parser.add_argument("--dry-run", action="store_true", help="print the merged inputs; read and dispatch nothing")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def waiting_inputs(client: ghrest.Client, workflow: str, ref: str) -> list[ChainInputs]:
    """The inputs of every run of ``workflow`` on ``ref`` that waits to start, oldest first (a
    title farm did not write, such as a scheduled run's, is the widest: unfiltered)."""
    runs = {r.id: r for status in WAITING for r in client.workflow_runs(workflow, branch=ref, status=status)}
    return [found if (found := parse_title(r.title)) is not None else ChainInputs()
            for r in sorted(runs.values(), key=lambda r: r.id)]


def others_in_progress(client: ghrest.Client, workflow: str, ref: str, run_id: str, wait_s: float,
                       clock: Clock) -> list[int]:
    """The runs of ``workflow`` on ``ref`` in progress besides ``run_id``, once none is or after
    ``wait_s`` of checking every :data:`POLL_S` (then those still in progress)."""
    waited = 0.0
    while True:
        busy = [r.id for r in client.workflow_runs(workflow, branch=ref, status="in_progress") if str(r.id) != run_id]
        if not busy or waited >= wait_s:
            return busy
        clock.sleep(POLL_S)
        waited += POLL_S


def run(args: argparse.Namespace) -> int:
    say = (lambda _: None) if args.json else print  # --json: one object at the end instead
    if args.wait_for_runs is not None and not (math.isfinite(args.wait_for_runs) and args.wait_for_runs >= 0):
        raise UsageError(f"--wait-for-runs {args.wait_for_runs}: a finite number of minutes, at least 0")
    mine = ChainInputs(**{f.name: getattr(args, f.name) for f in fields(ChainInputs)})
    say(f"this wave: {title(mine)}")
    merged, waiting = mine, []
    if not args.dry_run:
        client = ghrest.actions_client(args.repository, os.environ)
        if args.wait_for_runs is not None:
            busy = others_in_progress(client, args.workflow, args.ref, args.run_id, args.wait_for_runs * 60,
                                      RealClock())
            if busy:
                print(f"run(s) {', '.join(map(str, busy))} of {args.workflow} on {args.ref} still in progress after "
                      f"{args.wait_for_runs:g} min: nothing dispatched (at most two runs in flight; this run's chain "
                      "job starts the next wave)", file=sys.stderr)
                return EXIT_DEFECT
        for pending in waiting_inputs(client, args.workflow, args.ref):
            say(f"waiting:   {title(pending)}")
            waiting.append(title(pending))
            merged = merge(merged, pending)
    say(f"dispatch:  {title(merged)}")
    if not args.dry_run:
        client.dispatch(args.workflow, args.ref, {f.name: getattr(merged, f.name) for f in fields(ChainInputs)})
        say(f"dispatched {args.workflow} on {args.ref}")
    if args.json:
        print(json.dumps({"this_wave": title(mine), "waiting": waiting, "dispatch": title(merged),
                          "dispatched": not args.dry_run, "workflow": args.workflow, "ref": args.ref}, indent=2))
    return 0
