"""The drain-time model of an epoch bump: the repository's own recipes, wave after wave.

Runs ``farm matrix --max-shards 8 --json`` as a whole process on a copy of the repository's
``_defaults.yml`` and ``packages/`` with an empty ledger (an epoch bump: every cell queued),
records each scheduled cell as built (nothing fails), and runs it again until the queue is
empty, as the workflow chains its waves. Per wave it prints the cells, jobs, runner-hours and
wall time at N concurrent jobs that ``farm matrix`` itself estimates (recorded build durations
where the ledger has them, else 45 min per job, times the recipe's sharding for sharded
packages, times 1.5 on Windows), then the totals against the one-shot drain model ``farm
matrix`` prints for the whole queue, and against the anchor: the back-of-envelope estimate of a
45-minute mean per job over 29,210 jobs (~22,000 runner-hours, ~48 days at 20 concurrent jobs).

Usage: python benchmarks/bench_drain.py [--concurrency 20] [--max-shards 8] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matrix import _entry

REPO = Path(__file__).resolve().parent.parent
ANCHOR_RUNNER_HOURS = 22_000
ANCHOR_DAYS = 48


def farm_matrix(root: Path, args: list[str]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "matrix", "--root", str(root), "--no-lint", "--json",
                           *args], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"farm matrix exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--max-shards", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the temporary farm root")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="farm-drain-"))
    root = tmp / "farm"
    root.mkdir()
    shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(REPO / "packages", root / "packages")
    shutil.copytree(REPO / "examples", root / "examples")  # a recipe builds from a folder of its own
    ledger = root / "ledger.jsonl"
    ledger.write_text("")
    rng = random.Random(7)
    flags = ["--max-shards", str(args.max_shards), "--concurrency", str(args.concurrency)]
    rows: list[Any] = []
    model: dict[str, Any] | None = None
    refused = 0
    try:
        while True:
            data, wall = farm_matrix(root, flags)
            if model is None:
                model, refused = data["cost"]["drain"], data["totals"]["refused"]
            cells = data["cells"]
            if not cells:
                break
            w = data["cost"]["wave"]
            rows.append((len(rows) + 1, len(cells), w["jobs"], w["runner_hours"], w["wall_hours"], wall))
            with ledger.open("a", encoding="utf-8") as fh:
                for c in cells:
                    fh.write(json.dumps(_entry(c, c["version"], c["arch_list"], c["wheel"], rng)) + "\n")
            if len(rows) > 100:
                sys.exit("the queue does not drain")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'wave':>4} {'cells':>6} {'jobs':>6} {'runner-h':>9} {'wall h':>7} {'matrix s':>9}")
    for row in rows:
        print(f"{row[0]:>4} {row[1]:>6,} {row[2]:>6,} {row[3]:>9,.0f} {row[4]:>7,.1f} {row[5]:>9.2f}")
    cells = sum(r[1] for r in rows)
    jobs = sum(r[2] for r in rows)
    hours = sum(r[3] for r in rows)
    wall = sum(r[4] for r in rows)
    print(f"total: {len(rows)} waves, {cells:,} cells, {jobs:,} jobs, {hours:,.0f} runner-hours, "
          f"{wall:,.0f} h = {wall / 24:,.1f} days at {args.concurrency} concurrent jobs; "
          f"{refused} cell(s) refused (no hosted runner can finish them)")
    assert model is not None
    print(f"one-shot model (farm matrix on the full queue): {model['waves']} waves, {model['jobs']:,} jobs, "
          f"{model['runner_hours']:,.0f} runner-hours, {model['wall_hours'] / 24:,.1f} days")
    print(f"anchor (45 min x 29,210 jobs): ~{ANCHOR_RUNNER_HOURS:,} runner-hours, ~{ANCHOR_DAYS} days at 20; "
          f"ratio runner-hours {hours / ANCHOR_RUNNER_HOURS:.2f}, days {wall / 24 / ANCHOR_DAYS:.2f}"
          + (f" (at {args.concurrency}, not 20)" if args.concurrency != 20 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
