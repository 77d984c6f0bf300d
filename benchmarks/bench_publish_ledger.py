"""Publishing wheels into a large ledger: what each wheel's ledger record costs ``farm upload``.

A publish records each wheel as soon as it is out, so a crash loses at most one record. The
anchor (farm at commit ``5e0f196``) did that by rewriting the whole ledger twice per wheel (merge
the entry, then record where it went) and read it whole twice more per upload: O(ledger) per
wheel, ~0.3 s a wheel on the public farm's ledger. Now a publish reads the ledger once and appends
each new wheel's line (farm/provenance/ledgerbook.py).

Measured: ``farm upload DIR --target github`` as a whole process, as a maintainer types it,
publishing ``--wheels`` wheels of the repository's real cells (its recipes as of the anchor,
which both farms read) to a loopback GitHub (tests/support/ghsim.py: GitHub cannot be reached from here)
with the repository's configuration and a ledger of ``--lines`` lines (default 16,000, ~26 MB: an
epoch of the public farm). Each run gets a fresh copy of the ledger and an empty GitHub. Each farm
also publishes a 1-wheel folder, so the cost of one more wheel is (t_N - t_1) / (N - 1), taken
on the process's CPU time: its wall time also holds the client's throttle, which keeps a release
creation and an upload per wheel under GitHub's 80 content-creating requests a minute, the same
wait for both farms. Printed: the
series, the per-wheel cost of each farm, and the ratio anchor / this tree (goal: >= 5x).

Usage: python benchmarks/bench_publish_ledger.py [--wheels 60] [--lines 16000] [--runs 3] [--anchor REF]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Run, Series, installed_farm, measure, table
from bench_matrix import write_ledger

sys.path.insert(0, str(REPO))
from tests.support import ghsim
from tests.support.ledgermaker import make_entry
from tests.support.wheelmaker import stamped_wheel

ANCHOR = "5e0f196"  # the ledger rewritten twice per wheel


def make_root(where: Path, recipes: Path) -> Path:
    """A farm repository with the recipes of ``recipes`` (the anchor's: both farms read them)."""
    root = where / "root"
    root.mkdir()
    shutil.copy(recipes / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(recipes / "packages", root / "packages")
    shutil.copytree(recipes / "examples", root / "examples")
    (root / "ledger.jsonl").write_text("")
    return root


def plan_cells(farm: Path, root: Path, where: Path) -> list[dict[str, Any]]:
    plan = where / "plan.json"
    subprocess.run([str(farm), "matrix", "--root", str(root), "--no-lint", "--plan", str(plan)], check=True,
                   stdout=subprocess.DEVNULL)
    cells: list[dict[str, Any]] = json.loads(plan.read_text())["cells"]
    return [c for c in cells if not c.get("shard")]


def wheels_of(cells: list[dict[str, Any]], dest: Path) -> Path:
    for cell in cells:
        entry = make_entry(cell["package"], cell["version"], cuda=cell["cuda"], torch=cell["torch"],
                           python=cell["python_tag"], platform=cell["platform"], build_epoch=cell["build_epoch"],
                           arch=cell["arch_list"], filename=cell["wheel"])
        stamped_wheel(dest, entry)
    return dest


def point_at(root: Path, sim: ghsim.GitHubSim) -> None:
    """The repository's github target, pointed at the loopback GitHub."""
    path = root / "_defaults.yml"
    doc = yaml.safe_load(path.read_text())
    doc["publish"]["github"].update(repository=sim.repo, api_url=sim.base.rstrip("/"),
                                    uploads_url=sim.base + "uploads")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def publish_once(farm: Path, root: Path, folder: Path, ledger: Path, work: Path) -> Run:
    run_ledger = work / "ledger.jsonl"
    shutil.copy(ledger, run_ledger)
    with ghsim.serve(ghsim.GitHubSim()) as sim:
        point_at(root, sim)
        env = {**os.environ, "GH_TOKEN": ghsim.TOKEN}
        run = measure([str(farm), "upload", str(folder), "--root", str(root), "--ledger", str(run_ledger),
                       "--target", "github", "--json"], env=env)
        assert sim.count(status=201) > 0
    report = json.loads(run.stdout)
    if not report["ok"]:
        sys.exit(f"farm upload did not publish: {json.dumps(report['verdicts'])[:1500]}")
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=int, default=60)
    parser.add_argument("--lines", type=int, default=16_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--anchor", default=ANCHOR, help="the commit to compare with (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        work = Path(tmp)
        anchor_src = work / "anchor-src"
        anchor_src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.anchor], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(anchor_src)], input=archive, check=True)
        venvs = REPO / ".cache" / "bench-publish"  # kept: installing both farms takes minutes
        farms = {"this tree": installed_farm(venvs / "this"), f"anchor {args.anchor}": installed_farm(
            venvs / "anchor", anchor_src)}
        root = make_root(work, anchor_src)
        cells = plan_cells(farms["this tree"], root, work)
        chosen = cells[:: max(1, len(cells) // args.wheels)][: args.wheels]
        many = wheels_of(chosen, work / "many")
        one = wheels_of(chosen[:1], work / "one")
        names = {c["wheel"] for c in chosen}
        write_ledger(root, [c for c in cells if c["wheel"] not in names], args.lines)
        ledger = work / "big-ledger.jsonl"
        (root / "ledger.jsonl").rename(ledger)
        size = ledger.stat().st_size
        print(f"{len(chosen)} wheels into a ledger of {args.lines:,} lines ({size / 2**20:.1f} MB)")
        rows: list[Series] = []
        per_wheel: dict[str, float] = {}
        for label, farm in farms.items():
            n = [publish_once(farm, root, many, ledger, work) for _ in range(args.runs)]
            first = [publish_once(farm, root, one, ledger, work) for _ in range(args.runs)]
            rows += [Series(f"{label}: {len(chosen)} wheels", tuple(n)), Series(f"{label}: 1 wheel", tuple(first))]
            per_wheel[label] = (min(r.cpu_s for r in n) - min(r.cpu_s for r in first)) / (len(chosen) - 1)
        print(table(rows))
        for label, cost in per_wheel.items():
            print(f"{label}: {cost * 1000:.1f} ms CPU per additional wheel")
        this, anchor = per_wheel["this tree"], per_wheel[f"anchor {args.anchor}"]
        print(f"per-wheel cost, anchor / this tree: {anchor / this:.1f}x (goal >= 5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
