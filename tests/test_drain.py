"""An epoch bump of the repository's own recipes drains on a simulated GitHub with nothing lost,
nothing stuck and nothing published twice, through disk-full publish jobs, rate limits, a
publisher killed between upload and ledger record, rejected ledger pushes and a cancelled run.

GitHub cannot be reached from here: its Releases API (422 on a duplicate asset name, the
1,000-asset cap, 403/429 with Retry-After under the primary and secondary limits) is simulated on
127.0.0.1 in scaled time (tests/support/ghsim.py), the repository's branch is a bare git remote other
writers push to, and a hosted runner's disk is a quota per publish job. The build jobs are
simulated (valid wheels carrying each cell's provenance, no nvcc); planning, slicing, streaming,
publishing, recording and chaining are farm's own code (tests/support/drainsim.py).

The drain runs the repository's whole grid, as the nightly does after an epoch bump: every
package, CUDA line, torch row, Python and platform (16,390 cells; sharded cells with their
compile and link jobs; the cells no hosted runner can finish refused), in waves of ``farm matrix
--max-shards 8``, until the queue holds only the refused cells, each wheel through the full
per-wheel publish path. ``pytest tests/test_drain.py -s`` prints the numbers (docs/ci.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from farm.cli import main
from farm.schedule.stream import ERROR, PUBLISHED
from tests.support import ghsim
from tests.support.drainsim import MB, Farm, Faults, RunResult, Sim

pytestmark = pytest.mark.slow

FILTERS: tuple[str, ...] = ()
MAX_SHARDS = 8


def flaky(run: int, cell: str) -> bool:
    """About 1 cell in 60 fails its build in the first three runs (the nightly retries it)."""
    return run <= 3 and hashlib.sha256(f"{run}/{cell}".encode()).digest()[0] < 4


FAULTS = Faults(
    fail_build=flaky,
    push_race={1, 2},  # the publish jobs of these runs check out one head and push over each other
    maintainer_push={(1, "0"), (3, "link")},  # a maintainer pushes while those jobs record
    small_disk={(2, "1")},  # that job's disk fills at its first artifact
    rate_burst={2, 4},  # another client spent the token's minute of content-creating requests
    kill_after_upload={(3, "0")},  # the publisher dies right after an upload lands
    cancel_after={4: 1},  # run 4 is cancelled after its first shard
)


@pytest.fixture(scope="module")
def drained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Farm, list[RunResult], Sim]]:
    work = tmp_path_factory.mktemp("drain")
    with ghsim.serve(Sim(clock=ghsim.ScaledClock(3600.0))) as sim:
        assert isinstance(sim, Sim)
        farm = Farm(work, sim, FAULTS, filters=FILTERS, max_shards=MAX_SHARDS, push_every=64)
        runs: list[RunResult] = []
        while True:
            runs.append(farm.run())
            assert len(runs) < 40, "the drain does not end"
            last = runs[-1]
            if last.cancelled or last.next_wave:
                continue  # a cancel stops the chain: the nightly starts the next run
            if last.scheduled == 0:
                break  # nothing left but the refused cells
        for r in runs:  # shown with -s or on a failure
            print(f"run {r.number}: {r.scheduled} scheduled, {r.deferred} deferred, {r.refused} refused, "
                  f"next wave {r.next_wave}, cancelled {r.cancelled}; jobs: "
                  + ", ".join(f"{j.shard} {j.verdicts}" for j in r.jobs))
        peak = max(j.peak_bytes for r in runs for j in r.jobs)
        jobs = [j for r in runs for j in r.jobs]
        print(f"{sum(r.scheduled for r in runs)} cells scheduled, {len(jobs)} publish jobs, "
              f"{sum(j.ledger_reads for j in jobs)} whole-ledger reads")
        print(f"{len(sim.stored)} assets published in {len(runs)} runs; {len(sim.log)} requests, the busiest hour "
              f"{sim.busiest(3600)} (content-creating {sim.busiest(3600, content=True)}), the busiest minute "
              f"{sim.busiest(60, content=True)} content-creating; {sim.count(status=403) + sim.count(status=429)} "
              f"rate-limit answers obeyed; {len(farm.pushes)} ledger pushes, {sum(p.rebased for p in farm.pushes)} "
              f"rebased; the largest publish job peak {peak / MB:.0f} MB")
        yield farm, runs, sim


def matrix_now(farm: Farm) -> dict[str, Any]:
    head = farm.checkout("check")
    out = farm.work / "check.json"
    assert main(["matrix", "--root", str(head), "--no-lint", "--plan", str(out), *FILTERS]) == 0
    plan: dict[str, Any] = json.loads(out.read_text())
    return plan


def test_the_drain_completes_and_every_cell_is_published_once(drained, capsys) -> None:
    farm, runs, sim = drained
    capsys.readouterr()
    final = matrix_now(farm)
    capsys.readouterr()
    # nothing left to build but the cells no hosted runner can finish, each with its reason
    assert final["totals"]["to_build"] == final["totals"]["refused"] > 0
    assert final["cells"] == []
    ledger = farm.ledger_lines()
    names = [e["filename"] for e in ledger]
    assert len(names) == len(set(names)), "a wheel is recorded twice"
    assets = {name for release in sim.releases.values() for name in release.assets}
    published = {e["filename"] for e in ledger if e["published"]}
    assert published == assets == set(names), "the ledger and the releases disagree"
    # each asset was stored once: never replaced, never deleted, never uploaded twice
    assert set(sim.stored) == assets
    assert set(sim.stored.values()) == {1}
    assert sim.count(status=204) == 0
    # the whole epoch: every cell of the first plan's queue is published, or refused with its reason
    assert len(assets) + final["totals"]["refused"] == runs[0].to_build > 16_000
    assert sum(r.scheduled for r in runs) >= len(assets)
    assert len(runs) >= 15


def test_peak_disk_per_publish_job_is_one_artifact(drained) -> None:
    _, runs, _ = drained
    jobs = [j for r in runs for j in r.jobs]
    assert jobs
    assert all(j.peak_bytes <= j.largest_bytes for j in jobs)
    assert max(j.largest_bytes for j in jobs) >= 400 * MB  # flash_attn and vllm wheels went through
    full = next(j for j in jobs if (j.run, j.shard) == (2, "1"))
    assert full.verdicts.get(ERROR, 0) > 0
    assert full.peak_bytes == 0


def test_each_publish_job_reads_its_ledger_once(drained) -> None:
    """Records are appended: a job reads its ledger whole once, and again only after a push
    whose rebase rewrote the file (never once per wheel)."""
    _, runs, _ = drained
    jobs = [j for r in runs for j in r.jobs]
    assert all(1 <= j.ledger_reads <= 1 + j.pushes for j in jobs)
    assert sum(j.cells for j in jobs) > 10 * sum(j.ledger_reads for j in jobs)


def test_requests_stay_under_githubs_limits(drained) -> None:
    _, _, sim = drained
    assert sim.busiest(3600) <= 1000
    assert sim.busiest(3600, content=True) <= 500
    assert sim.busiest(60, content=True) <= 80
    # the bursts were met with GitHub's answer and waited out, not ignored
    assert sim.count(status=403) + sim.count(status=429) > 0


def test_the_faults_happened_and_healed(drained) -> None:
    farm, runs, sim = drained
    # the killed publisher's asset was found next wave without a record, re-asserted and adopted:
    # the ledger holds the bytes GitHub has, not the rebuild's
    assert farm.killed
    _, _, asset = farm.killed[0]
    entry = next(e for e in farm.ledger_lines() if e["filename"] == asset)
    stored = next(r.assets[asset] for r in sim.releases.values() if asset in r.assets)
    assert entry["sha256"] == hashlib.sha256(stored.data).hexdigest()
    # rejected pushes were rebased and retried, the ledger merged by record
    assert any(p.rebased for p in farm.pushes)
    assert all(p.pushed for p in farm.pushes)
    # the cancelled run published only its first shard and started no wave
    cancelled = next(r for r in runs if r.cancelled)
    assert [j.shard for j in cancelled.jobs] == ["0"]
    assert not cancelled.next_wave
    assert any(j.verdicts.get(PUBLISHED) for j in cancelled.jobs)
