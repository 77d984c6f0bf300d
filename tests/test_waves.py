"""The matrix as a work queue at the public farm's scale: waves of at most 8 x 256 cells drain it,
a build_epoch bump refills it, failing cells never block the rest; and the publish decision of
each wave (``farm wave``) as a function of what the cell jobs handed back."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.load.recipes import load_config
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.schedule.matrix import PlannedCell, compute_matrix
from farm.schedule.outcome import from_reports
from farm.schedule.slices import SHARD_SIZE, slice_plan
from farm.schedule.stream import PUBLISHED, REFUSED, CellVerdict
from farm.schedule.waves import schedule
from tests.support.ledgermaker import make_entry

REPO = Path(__file__).resolve().parent.parent
MAX_SHARDS = 8
CAPACITY = MAX_SHARDS * SHARD_SIZE  # 2,048 cells per run, as build.yml has 8 shard jobs


def scale_root(root: Path) -> Path:
    """44 recipes on the repository's grid (29 (cuda, torch) rows, Python 3.10-3.15, 3 platforms),
    shaped like the public farm's: mostly torch extensions, some torch-free, some with min_torch
    or fewer platforms. ~14,400 cells to build, as the public farm has."""
    (root / "packages").mkdir(parents=True)
    (root / "_defaults.yml").write_text((REPO / "_defaults.yml").read_text())
    (root / "ledger.jsonl").write_text("")
    for i in range(44):
        lines = [f"name: pkg{i:02d}", "version: '1.0'",
                 f"source: {{git: {{repo: farm-test/pkg{i:02d}, ref: v1.0}}}}",
                 f"links_torch: {'false' if i % 11 == 5 else 'true'}"]
        if i % 9 == 1:
            lines.append("min_torch: '2.6'")
        if i % 11 == 3:
            lines.append("only: {platforms: [linux_x86_64, win_amd64]}")
        (root / "packages" / f"pkg{i:02d}.yml").write_text("\n".join(lines) + "\n")
    return root


def ledger_line(p: PlannedCell) -> str:
    """The ledger line a publish appends for a built cell (asserted, at the cell's epoch)."""
    c = p.cell
    return dumps_entry(make_entry(c.package, c.version, cuda=c.cuda, torch=c.torch, python=c.python,
                                  platform=c.platform, build_epoch=p.epoch, arch=p.archs.canonical(),
                                  filename=p.wheel)) + "\n"


class Queue:
    """The build queue of a farm root, driven in process: each wave is the matrix of the ledger as
    the previous wave's publish left it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scheduled: list[str] = []  # every cell id ever scheduled, in order
        self.waves = 0

    def wave(self, fails: Callable[[PlannedCell], bool] = lambda p: False) -> tuple[int, int, int]:
        """One run: matrix, schedule, 'build' (all but ``fails``), publish. (built, failed, deferred)."""
        config = load_config(self.root)
        matrix = compute_matrix(config, LedgerIndex.load(self.root / "ledger.jsonl"))
        wave = schedule(matrix, CAPACITY)
        assert len(wave.scheduled) <= CAPACITY
        assert len(wave.scheduled) + len(wave.deferred) == matrix.totals()["to_build"]
        self.waves += 1
        self.scheduled += [p.cell.id for p in wave.scheduled]
        built = [p for p in wave.scheduled if not fails(p)]
        with (self.root / "ledger.jsonl").open("a", encoding="utf-8") as fh:
            fh.writelines(ledger_line(p) for p in built)
        return len(built), len(wave.scheduled) - len(built), len(wave.deferred)

    def drain(self, fails: Callable[[PlannedCell], bool] = lambda p: False) -> int:
        """Waves as the workflow chains them: the next starts only when this one built something
        and deferred cells. The number of waves run."""
        start = self.waves
        while True:
            built, _, deferred = self.wave(fails)
            if not (built and deferred):
                return self.waves - start
            assert self.waves - start < 100, "the chain does not end"

    def to_build(self) -> set[str]:
        matrix = compute_matrix(load_config(self.root), LedgerIndex.load(self.root / "ledger.jsonl"))
        return {p.cell.id for p in matrix.cells}


@pytest.fixture(scope="module")
def all_cells(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    root = scale_root(tmp_path_factory.mktemp("all") / "farm")
    return Queue(root).to_build()


def test_the_scale_is_the_public_farms(all_cells: set[str]) -> None:
    # 44 recipes on the repository's grid: the public farm's 14,413 cells plus the torch 2.14 rows
    # upstream ships and the public farm's grid does not have yet
    assert 14_000 <= len(all_cells) <= 17_000


def test_waves_drain_the_queue_each_cell_once(tmp_path: Path, all_cells: set[str]) -> None:
    queue = Queue(scale_root(tmp_path / "farm"))
    waves = queue.drain()
    assert waves == math.ceil(len(all_cells) / CAPACITY)
    assert len(queue.scheduled) == len(set(queue.scheduled)), "a cell was scheduled twice"
    assert set(queue.scheduled) == all_cells, "a cell was lost"
    assert queue.to_build() == set()


def test_an_epoch_bump_in_the_middle_puts_every_cell_back(tmp_path: Path, all_cells: set[str]) -> None:
    root = scale_root(tmp_path / "farm")
    queue = Queue(root)
    queue.wave()
    queue.wave()
    assert len(queue.to_build()) == len(all_cells) - 2 * CAPACITY
    defaults = root / "_defaults.yml"
    defaults.write_text(re.sub(r"(?m)^build_epoch: 0$", "build_epoch: 1", defaults.read_text()))
    # cells built at epoch 0 are queued again under the new epoch, with the others
    assert queue.to_build() == all_cells
    queue.scheduled.clear()
    waves = queue.drain()
    assert waves == math.ceil(len(all_cells) / CAPACITY)
    assert sorted(queue.scheduled) == sorted(all_cells)
    index = LedgerIndex.load(root / "ledger.jsonl")
    assert sum(1 for r in index.records if r.key and r.key.build_epoch == 1) == len(all_cells)


def test_a_package_that_always_fails_does_not_block_the_others(tmp_path: Path, all_cells: set[str]) -> None:
    queue = Queue(scale_root(tmp_path / "farm"))
    # pkg00 sorts first: in a first-come order it would take the head of every wave
    broken = {c for c in all_cells if c.startswith("pkg00-")}
    queue.drain(fails=lambda p: p.cell.package == "pkg00")
    left = queue.to_build()
    assert left == broken, "every other cell is built; the failing ones are still queued"
    # the chain stopped: the last wave built nothing. A new run (the nightly) retries them and
    # stops at once again
    built, failed, deferred = queue.wave(fails=lambda p: p.cell.package == "pkg00")
    assert (built, failed, deferred) == (0, len(broken), 0)


def test_one_wave_through_the_cli_at_scale(tmp_path: Path, all_cells: set[str]) -> None:
    """The command the workflow runs, as a process: exit 0, <= 2,048 cells, nothing lost."""
    root = scale_root(tmp_path / "farm")
    output, plan = tmp_path / "gh_output", tmp_path / "plan.json"
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "farm.cli", "matrix", "--root", str(root), "--no-lint", "--github-output",
         "--max-shards", str(MAX_SHARDS), "--plan", str(plan)],
        capture_output=True, text=True, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(plan.read_text())
    totals = data["totals"]
    assert totals["scheduled"] == len(data["cells"]) == CAPACITY
    assert totals["scheduled"] + totals["deferred"] == totals["to_build"] == len(all_cells)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["shard_count"] == str(MAX_SHARDS)
    assert outputs["deferred"] == str(totals["deferred"])
    shard_ids = [e["id"] for i in range(MAX_SHARDS) for e in slice_plan(data, str(i))]
    assert shard_ids == [c["id"] for c in data["cells"]]
    assert set(shard_ids) | set(data["deferred_cells"]) == all_cells
    assert f"{totals['deferred']} deferred to the next run" in proc.stdout
    # every package advances in the first wave
    assert all(p["scheduled"] > 0 for p in data["packages"] if p["to_build"])


# -- the publish decision of a wave ------------------------------------------------------------
def plan_of(cells: list[tuple[str, str]], deferred: int) -> dict[str, Any]:
    return {"cells": [{"id": i, "package": p} for i, p in cells], "totals": {"deferred": deferred}}


CELLS = [("a-1.0-cu128-torch2.8-cp311-linux_x86_64", "a"), ("a-1.0-cu128-torch2.8-cp312-linux_x86_64", "a"),
         ("b-2.0-cu128-notorch-cp311-linux_x86_64", "b")]


@pytest.mark.parametrize(
    ("built", "deferred", "publish", "next_wave"),
    [
        ((0, 1, 2), 100, True, True),  # all built, more waiting: publish and chain
        ((0, 1, 2), 0, True, False),  # all built, queue empty: publish, stop
        ((0, 2), 100, True, True),  # one failed: the others still publish, the chain goes on
        ((0, 2), 0, True, True),  # one failed, nothing deferred: the next run retries it, not the nightly
        ((), 100, False, False),  # nothing built: nothing to publish, the chain stops
        ((), 0, False, False),
    ],
)
def test_the_publish_decision_follows_the_cells(built: tuple[int, ...], deferred: int, publish: bool,
                                                next_wave: bool) -> None:
    verdicts = {CELLS[i][0]: CellVerdict(CELLS[i][0], CELLS[i][1], PUBLISHED, (f"{CELLS[i][0]}.whl",)) for i in built}
    outcome = from_reports(plan_of(CELLS, deferred), verdicts)
    assert (outcome.publish, outcome.next_wave) == (publish, next_wave)
    assert {c.id for c in outcome.failed} == {CELLS[i][0] for i in range(3) if i not in built}


def report(folder: Path, shard: str, *verdicts: CellVerdict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"published-{shard}.jsonl").write_text("".join(json.dumps(v.to_json()) + "\n" for v in verdicts))


def test_farm_wave_decides_from_the_publish_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of(CELLS, deferred=5)))
    reports = tmp_path / "reports"
    good = CELLS[0][0]
    report(reports / "published-0", "0", CellVerdict(good, "a", PUBLISHED, ("a.whl",)),
           CellVerdict(CELLS[1][0], "a", REFUSED, ("a2.whl",), "gate: the wheel is not asserted"))
    # CELLS[2]'s publish job never reported (killed or cancelled): it stays in the queue
    output, summary, out = tmp_path / "out", tmp_path / "summary.md", tmp_path / "wave.json"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc = main(["wave", "--plan", str(plan), "--reports", str(reports), "--report", str(out), "--github-output"])
    assert rc == 0
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs == {"publish": "true", "next_wave": "true", "built": "1", "failed": "2", "deferred": "5"}
    text = summary.read_text()
    assert "1 cell(s) built, 2 failed, 5 deferred" in text
    assert f"| {CELLS[1][0]} | refused | gate: the wheel is not asserted |" in text
    data = json.loads(out.read_text())
    assert [(c["id"], c["status"]) for c in data["failed_cells"]] == [(CELLS[1][0], "refused"),
                                                                      (CELLS[2][0], "no verdict")]
    assert "refused: " + CELLS[1][0] in capsys.readouterr().out


def test_farm_wave_with_no_reports_published_nothing_and_stops(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of(CELLS, deferred=5)))
    output = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["wave", "--plan", str(plan), "--reports", str(tmp_path / "none"), "--github-output"]) == 0
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert (outputs["next_wave"], outputs["failed"]) == ("false", "3")


def test_farm_wave_refuses_a_verdict_the_plan_did_not_schedule(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of(CELLS[:1], deferred=0)))
    report(tmp_path / "reports", "0", CellVerdict("z-9-cu128-notorch-cp311-linux_x86_64", "z", PUBLISHED, ("z.whl",)))
    rc = main(["wave", "--plan", str(plan), "--reports", str(tmp_path / "reports")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "publish verdict(s) for cells this wave did not schedule: z-9-cu128-notorch-cp311-linux_x86_64" in err
    assert "download only this run's published-* artifacts" in err


def test_cells_an_earlier_run_held_start_the_next_wave() -> None:
    """A wave planned while the run before it still published left that run's cells out (``held``):
    when it ends, published or not, the next run takes what of them failed."""
    plan = {**plan_of(CELLS, 0), "held": 40}
    verdicts = {cid: CellVerdict(cid, package, PUBLISHED, (f"{cid}.whl",)) for cid, package in CELLS}
    outcome = from_reports(plan, verdicts)
    assert (outcome.held, outcome.next_wave) == (40, True)
    assert not from_reports(plan_of(CELLS, 0), verdicts).next_wave
