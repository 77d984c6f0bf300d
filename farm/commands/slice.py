"""``farm slice --plan FILE --shard I|link``: one shard's build entries from the wave's plan.

The matrix job of ``build.yml`` outputs only the shard count and uploads the plan; each shard's
slice job runs this and hands its <= 256 entries to its build matrix. Exit 2 for a plan that is
not one, or a shard it does not have.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import UsageError
from farm.schedule.slices import LINK, slice_outputs, slice_plan

MAX_PLAN_BYTES = 64 << 20  # the public farm's largest wave plan is a few MB


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="FILE",
                        help="the plan of this run (`farm matrix --plan FILE`)")
    parser.add_argument("--shard", required=True, metavar="I",
                        help=f"the build shard's index (0, 1, ...) or {LINK!r} for the link jobs")
    parser.add_argument("--github-output", action="store_true",
                        help="write cells (the entries, JSON) and count to $GITHUB_OUTPUT")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def read_plan(path: Path) -> dict[str, Any]:
    """A plan file as JSON, bounded (``farm wave`` and ``farm publish-shard`` read it too): an
    artifact of the run, so read as untrusted input."""
    try:
        plan = jsonread.load_file(path, MAX_PLAN_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such plan", hint="the matrix job uploads it as the wave-plan artifact") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not a wave plan farm wrote: {exc}",
                         hint="pass the plan `farm matrix --plan FILE` wrote") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the plan ({exc.strerror or exc})") from None
    if not isinstance(plan, dict):
        raise UsageError(f"{path}: not a wave plan (a JSON object)")
    return plan


def run(args: argparse.Namespace) -> int:
    if args.github_output and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output needs $GITHUB_OUTPUT (GitHub Actions sets it)",
                         hint="run it in a workflow step, or set GITHUB_OUTPUT to a file")
    entries = slice_plan(read_plan(args.plan), args.shard)
    outputs = slice_outputs(entries)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in outputs.items()))
    if args.json:
        print(json.dumps({"shard": args.shard, "count": len(entries), "entries": entries}, indent=2))
    else:
        print(outputs["cells"] if not args.github_output else f"shard {args.shard}: {len(entries)} job(s)")
    return 0
