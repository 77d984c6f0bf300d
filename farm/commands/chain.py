"""``farm chain [--package ...] --ref REF``: start the next wave without losing a waiting run's cells.

The last job of a wave runs it when cells are deferred. It reads the run already waiting in the
concurrency group (``gh run list``: its title carries its inputs), merges both runs' inputs
(farm/schedule/chain.py) and dispatches build.yml with the merge, which replaces the waiting run
with one that covers both. ``--dry-run`` prints the merge and dispatches nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from dataclasses import fields

from farm.errors import ToolError, redact
from farm.schedule.chain import Inputs, merge, parse_title, title

WAITING = ("pending", "queued", "waiting", "requested")


def configure(parser: argparse.ArgumentParser) -> None:
    for f in fields(Inputs):
        parser.add_argument(f"--{f.name}", default=f.default, help=f"this wave's {f.name} input")
    parser.add_argument("--ref", required=True, help="the branch the waves run on")
    parser.add_argument("--workflow", default="build.yml", help="the wave workflow (default: build.yml)")
    parser.add_argument("--dry-run", action="store_true", help="print the merged inputs; dispatch nothing")


def _gh(*argv: str) -> str:
    gh = shutil.which("gh")
    if gh is None:
        raise ToolError("`gh` is not on PATH", hint="install the GitHub CLI (https://cli.github.com)")
    proc = subprocess.run([gh, *argv], capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise ToolError(f"`gh {' '.join(argv[:3])}` exited {proc.returncode}", hint=redact(proc.stderr.strip()[-300:]))
    return proc.stdout


def waiting_inputs(workflow: str, ref: str) -> Inputs | None:
    """The inputs of the newest run of ``workflow`` on ``ref`` that waits to start, if any."""
    runs = json.loads(_gh("run", "list", "--workflow", workflow, "--branch", ref, "--limit", "50",
                          "--json", "status,displayTitle,databaseId") or "[]")
    waiting = sorted((r for r in runs if r.get("status") in WAITING), key=lambda r: r.get("databaseId", 0))
    if not waiting:
        return None
    found = parse_title(str(waiting[-1].get("displayTitle", "")))
    return found if found is not None else Inputs()  # an unknown title: assume the widest


def run(args: argparse.Namespace) -> int:
    mine = Inputs(**{f.name: getattr(args, f.name) for f in fields(Inputs)})
    pending = None if args.dry_run else waiting_inputs(args.workflow, args.ref)
    merged = merge(mine, pending)
    print(f"this wave: {title(mine)}")
    if pending is not None:
        print(f"waiting:   {title(pending)}")
    print(f"dispatch:  {title(merged)}")
    if not args.dry_run:
        flags = [x for f in fields(Inputs) for x in ("-f", f"{f.name}={getattr(merged, f.name)}")]
        _gh("workflow", "run", args.workflow, "--ref", args.ref, *flags)
    return 0
