"""Cells planned by their build time: recorded durations first, long cells first, compile jobs
added where one would near GitHub's 6 h job limit, cells no hosted runner can finish refused
with the reason; a wave's bill and the drain of the whole queue."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.cli import main
from farm.load.recipes import load_config
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.schedule.cost import (
    DEFAULT_JOB_S,
    JOB_LIMIT_S,
    LINK_JOB_S,
    NEAR_LIMIT,
    TARGET_JOB_S,
    Durations,
    Estimate,
    cost_matrix,
    drain_model,
    estimate,
    job_setup_s,
    longest_first,
    makespan,
    plan_cell,
    wave_cost,
)
from farm.schedule.durations import durations_of, recorded_builds
from farm.schedule.matrix import compute_matrix
from tests.support.ledgermaker import make_entry

from .test_matrix import make_tree

LINUX = ("flash_attn", "12.8", "2.8", "cp312", "linux_x86_64")
WINDOWS = ("flash_attn", "12.8", "2.8", "cp312", "win_amd64")


def test_a_recorded_duration_beats_the_packages_which_beats_the_default() -> None:
    other = ("flash_attn", "12.6", "2.7", "cp311", "linux_x86_64")
    durations = Durations.of([(LINUX, 3000.0), (other, 1000.0), (other, 2000.0)])  # a later record wins
    assert estimate(LINUX, durations) == Estimate(3000.0, "recorded")
    # a cell never built: the median of its package on its platform
    assert estimate(("flash_attn", "13.0", "2.9", "cp313", "linux_x86_64"), durations) == Estimate(2500.0, "package")
    # nothing of the package on Windows: the default, times the declared sharding, times Windows' factor
    assert estimate(WINDOWS, durations, sharding=20) == Estimate(DEFAULT_JOB_S * 20 * 1.5, "estimate")
    assert estimate(WINDOWS, Durations.of([(WINDOWS, 0.0)])).source == "estimate"  # a zero is no record


def test_a_cell_that_fits_is_left_as_declared() -> None:
    plan = plan_cell(Estimate(20 * 3600.0, "recorded"), declared_jobs=20, shard_platforms=("linux_x86_64",))
    assert (plan.compile_jobs, plan.job_s, plan.link_s, plan.refused) == (20, 3600.0, LINK_JOB_S, None)
    assert plan.jobs == 21
    assert plan.runner_s == 20 * 3600.0 + LINK_JOB_S + 21 * job_setup_s()  # each job's set-up too
    plan = plan_cell(Estimate(3600.0, "estimate"), declared_jobs=1)
    assert (plan.compile_jobs, plan.jobs, plan.refused) == (1, 1, None)


def test_a_sharded_cell_nearing_the_limit_gets_more_compile_jobs() -> None:
    seconds = 20 * 0.9 * JOB_LIMIT_S  # 5.4 h per job in the declared 20: too close to 6 h
    plan = plan_cell(Estimate(seconds, "recorded"), declared_jobs=20, shard_platforms=("linux_x86_64",))
    assert plan.refused is None
    assert plan.compile_jobs == -(-int(seconds) // TARGET_JOB_S)
    assert plan.job_s <= TARGET_JOB_S < NEAR_LIMIT * JOB_LIMIT_S


def test_a_cell_no_runner_can_finish_is_refused_with_the_reason() -> None:
    # Windows: the compile cannot be split there
    plan = plan_cell(Estimate(10 * 3600.0, "recorded"), declared_jobs=1, shard_platforms=("linux_x86_64",))
    assert plan.refused
    assert "10.0 h in one job (recorded)" in plan.refused
    assert "shards the compile only on linux_x86_64" in plan.refused
    assert "self-hosted" in plan.refused
    # a recipe without sharding
    plan = plan_cell(Estimate(5 * 3600.0, "package"), declared_jobs=1)
    assert plan.refused
    assert "no `sharding:`" in plan.refused
    # just under the margin: scheduled
    assert plan_cell(Estimate(NEAR_LIMIT * JOB_LIMIT_S, "recorded"), declared_jobs=1).refused is None


def test_makespan_and_the_order_longest_first() -> None:
    assert makespan([1, 1, 1, 1, 4], 2) == 6  # the long job last waits for a runner, then runs alone
    jobs = [1.0, 1.0, 1.0, 1.0, 4.0]
    assert [jobs[i] for i in longest_first(jobs)] == [4, 1, 1, 1, 1]
    assert makespan([jobs[i] for i in longest_first(jobs)], 2) == 4  # first: the short ones fill in beside it
    assert makespan([], 20) == 0


@given(st.lists(st.floats(min_value=1, max_value=30_000), max_size=60), st.integers(min_value=1, max_value=25))
def test_makespan_is_between_its_bounds(jobs: list[float], runners: int) -> None:
    wall = makespan(jobs, runners)
    total = sum(jobs)
    assert wall >= max(jobs, default=0) - 1e-6
    assert wall >= total / runners - 1e-6
    assert wall <= total / runners + max(jobs, default=0) + 1e-6


def test_a_waves_bill() -> None:
    plans = [plan_cell(Estimate(3600.0, "recorded"), declared_jobs=1) for _ in range(40)]
    plans.append(plan_cell(Estimate(10 * 3600.0, "estimate"), declared_jobs=10,
                           shard_platforms=("linux_x86_64",)))
    bill = wave_cost(plans, concurrency=20)
    assert bill.jobs == 40 + 10 + 1
    assert bill.uploads == 41
    assert bill.estimated == 1
    setup = job_setup_s() / 3600  # every job's, before farm build
    assert bill.runner_hours == pytest.approx(40 + 10 + LINK_JOB_S / 3600 + 51 * setup)
    # 50 one-hour jobs on 20 runners: 3 rounds, the 41 uploads at 500 an hour, then the link job
    assert bill.wall_hours == pytest.approx(3 + 41 / 500 + LINK_JOB_S / 3600 + 4 * setup)
    assert "51 job(s)" in bill.line()
    assert "at 20 concurrent jobs" in bill.line()


def test_the_matrix_is_costed_from_the_ledgers_durations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path / "farm", beta="sharding: {jobs: 3, platforms: [linux_x86_64]}\n")
    rc = main(["matrix", "--root", str(root), "--json", "--no-lint", "beta"])
    cells = json.loads(capsys.readouterr().out)["cells"]
    linux = next(c for c in cells if c["platform"] == "linux_x86_64")
    windows = next(c for c in cells if c["platform"] == "win_amd64")
    # beta was built once before (another version): one Linux cell took 20 h, one Windows cell 7 h
    old = [make_entry("beta", "1.0", cuda=c["cuda"], torch=c["torch"], python=c["python_tag"], platform=c["platform"],
                      filename=f"beta-1.0-{i}.whl") for i, c in enumerate((linux, windows))]
    old[0]["duration_s"], old[1]["duration_s"] = 20 * 3600.0, 7 * 3600.0
    (root / "ledger.jsonl").write_text("".join(dumps_entry(e) + "\n" for e in old))
    durations = durations_of(recorded_builds(LedgerIndex.load(root / "ledger.jsonl")))
    assert durations.cells[(linux["package"], linux["cuda"], linux["torch"], linux["python_tag"], "linux_x86_64")] == 72000

    config = load_config(root)
    matrix = compute_matrix(config, LedgerIndex.load(root / "ledger.jsonl"))
    costed = cost_matrix(matrix, {n: config.recipe(n).sharding for n in config.recipes}, durations)
    beta = next(p for p in costed.matrix.packages if p.package == "beta")
    # every Windows cell of beta: 7 h in one job (its package's median there), refused with the reason
    refused = {r.cell.cell.id for r in costed.refused}
    assert refused == {p.cell.id for p in matrix.packages[1].to_build if p.cell.platform == "win_amd64"}
    # every Linux cell: 20 h in 3 declared jobs is 6.7 h each, so 7 jobs of <= 3 h; longest first
    assert all(p.compile_jobs == 7 for p in beta.to_build if p.cell.platform == "linux_x86_64")
    assert beta.to_build[0].cell.platform == "linux_x86_64"
    # the CLI says it: refused cells with the reason, the wave's cost, nothing refused without the limit
    rc = main(["matrix", "--root", str(root), "--no-lint", "beta", "--max-shards", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "refused: no hosted runner can finish them" in out
    assert "this wave's cost:" in out
    rc = main(["matrix", "--root", str(root), "--json", "--no-lint", "beta", "--no-time-limit"])
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["refused"] == 0
    assert len(data["cells"]) == data["totals"]["to_build"]


def test_the_drain_model_covers_the_queue_once(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "farm")
    config = load_config(root)
    matrix = compute_matrix(config, LedgerIndex.empty())
    costed = cost_matrix(matrix, {n: config.recipe(n).sharding for n in config.recipes}, Durations({}, {}))
    waves = drain_model(costed, capacity=10, concurrency=4)
    assert sum(w.uploads for w in waves) == len(costed.matrix.cells)
    assert len(waves) == -(-len(costed.matrix.cells) // 10)
    assert sum(w.runner_hours for w in waves) == pytest.approx(sum(p.runner_s for p in costed.plans.values()) / 3600)


def test_a_duration_that_does_not_decode_is_left_out(tmp_path: Path) -> None:
    """The line stays in the ledger's index (its key, its wheel); only its duration is unknown."""
    ledger = tmp_path / "ledger.jsonl"
    entries = [make_entry("a", "1.0", python=py, filename=f"a-1.0-{py}.whl") for py in ("cp311", "cp312", "cp313")]
    entries[0]["duration_s"], entries[1]["duration_s"] = 60.0, "x"
    entries[2]["duration_s"] = -1.0
    ledger.write_text("".join(dumps_entry(e) + "\n" for e in entries))
    index = LedgerIndex.load(ledger)
    assert len(index) == 3
    assert durations_of(recorded_builds(index)).cells == {("a", "12.8", "2.8", "cp311", "linux_x86_64"): 60.0}


def _beta_recorded_cold_then_warm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, ...]:
    """Three cells of a package with 3 declared compile jobs in the ledger: the first recorded cold
    (20 h, no hits), the others at 90% hits. The matrix, the recipes' sharding, the durations and hit
    rates read back, the first cell's plan and its key."""
    from farm.schedule.hitrate import hit_rates_of

    root = make_tree(tmp_path / "farm", beta="sharding: {jobs: 3, platforms: [linux_x86_64]}\n")
    main(["matrix", "--root", str(root), "--json", "--no-lint", "beta"])
    cells = [c for c in json.loads(capsys.readouterr().out)["cells"] if c["platform"] == "linux_x86_64"][:3]
    old = [make_entry("beta", "1.0", cuda=c["cuda"], torch=c["torch"], python=c["python_tag"], platform=c["platform"],
                      filename=f"beta-1.0-{i}.whl") for i, c in enumerate(cells)]
    old[0]["duration_s"] = 20 * 3600.0
    for entry, hits in zip(old, (0, 90, 90), strict=True):
        entry["toolchain"]["compile_cache"] = {"tool": "sccache", "compiles": 100, "hits": hits, "misses": 100 - hits}
    (root / "ledger.jsonl").write_text("".join(dumps_entry(e) + "\n" for e in old))
    config = load_config(root)
    matrix = compute_matrix(config, LedgerIndex.load(root / "ledger.jsonl"))
    sharding = {n: config.recipe(n).sharding for n in config.recipes}
    recorded = list(recorded_builds(LedgerIndex.load(root / "ledger.jsonl")))
    durations, rates = durations_of(recorded), hit_rates_of(recorded)
    first = next(p for p in matrix.packages[1].to_build
                 if (p.cell.cuda, p.cell.torch, p.cell.python, p.cell.platform)
                 == (cells[0]["cuda"], cells[0]["torch"], cells[0]["python_tag"], "linux_x86_64"))
    key = ("beta", cells[0]["cuda"], cells[0]["torch"], cells[0]["python_tag"], "linux_x86_64")
    return matrix, sharding, durations, rates, first, key


def test_recorded_hit_rates_scale_the_jobs_not_the_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cell recorded cold (20 h, no hits) of a package whose builds hit 90% of their compile steps:
    its jobs are costed at the expected hit share, its split into compile jobs stays the cold one's."""
    from farm.schedule.recipetimes import recipe_times

    matrix, sharding, durations, rates, first, _ = _beta_recorded_cold_then_warm(tmp_path, capsys)
    cold = cost_matrix(matrix, sharding, durations)
    warm = cost_matrix(matrix, sharding, durations, hit_rates=rates)
    a, b = cold.plans[first.cell.id], warm.plans[first.cell.id]
    assert a.compile_jobs == b.compile_jobs == 7
    saved = 1 - recipe_times().value("hit_cost")
    assert b.job_s == pytest.approx(a.job_s * (1 - 0.9 * saved))  # a compile job: all compile


def test_a_wave_is_sized_so_its_artifacts_outlive_it(tmp_path: Path) -> None:
    """Cells of four hours each on one runner: the wave takes as many as end, with its last
    publish job, inside the artifacts' retention, and no more."""
    from farm.schedule.cost import PUBLISH_TAIL_S, fit_retention

    root = make_tree(tmp_path / "farm")
    config = load_config(root)
    matrix = compute_matrix(config, LedgerIndex.empty())
    hours4 = replace(Durations({}, {}), typical={(n, p): 4 * 3600.0 for n in config.recipes  # each package's record
                                                 for p in ("linux_x86_64", "linux_aarch64", "win_amd64")})
    costed = cost_matrix(matrix, {n: config.recipe(n).sharding for n in config.recipes}, hours4)
    cells = len(costed.matrix.cells)
    assert cells > 12
    cap = fit_retention(costed, cells, 1, retention_days=2)
    assert cap == (2 * 86400 - PUBLISH_TAIL_S) // (4 * 3600)  # 10 cells: 40 h, and 6 h to publish the last
    assert fit_retention(costed, cells, 1, retention_days=90) == cells
    waves = drain_model(costed, cells, 1, retention_days=2)
    assert all(w.wall_hours * 3600 + PUBLISH_TAIL_S <= 2 * 86400 for w in waves)
    assert sum(w.uploads for w in waves) == cells


def test_a_warm_plan_shards_by_the_warm_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cell of the test above, planned warm: 20 h cold at the package's 90% hit share is a few
    hours, which 2 of its recipe's 3 declared compile jobs hold (each under the 3 h a compile job
    aims at; a job more would pay its set-up for nothing); cold, it needs 7. A store that keeps
    every step and recorded the cell's last build plans it warm unasked: one job."""
    matrix, sharding, durations, rates, first, key = _beta_recorded_cold_then_warm(tmp_path, capsys)
    plan = cost_matrix(matrix, sharding, durations, hit_rates=rates, warm=True).plans[first.cell.id]
    assert plan.estimate.seconds == pytest.approx(rates.seconds(key, 20 * 3600.0))
    assert plan.compile_jobs == math.ceil(plan.estimate.seconds / TARGET_JOB_S) == 2
    kept = cost_matrix(matrix, sharding, durations, hit_rates=replace(rates, retained=True)).plans[first.cell.id]
    assert kept.compile_jobs == 1  # the store holds all of it: 20 h at the cost of a hit
    assert kept.estimate.seconds == pytest.approx(replace(rates, retained=True).seconds(key, 20 * 3600.0))


def test_the_plan_starts_from_a_recipes_measured_time() -> None:
    """Where the ledger records nothing of a package, its recipe's build measured on the
    reference host (for the cell's targets), times the factor to a hosted runner."""
    from farm.schedule.recipetimes import RecipeTimes

    times = RecipeTimes.load()
    durations = Durations(cells={}, typical={}, measured=times, runner_factor=0.5)
    key = ("gsplat", "12.8", "2.8", "cp311", "linux_x86_64")
    est = estimate(key, durations, targets=8)
    assert est.source == "measured"
    assert est.seconds == pytest.approx((times.seconds("gsplat", 8) or 0) * 0.5)
    assert estimate(key, durations, targets=4).seconds == pytest.approx(est.seconds / 2)  # half the targets
    assert estimate(("no_such", *key[1:]), durations).source == "estimate"
    recorded = Durations.of([(("gsplat", "12.8", "2.8", "cp310", "linux_x86_64"), 700.0)])
    assert estimate(key, replace(recorded, measured=times), targets=8).source == "package"


def test_a_failed_cell_is_built_again_until_the_same_job_failed_three_times(tmp_path: Path) -> None:
    """The retry policy: a failed build is built again as it was; once the same job of the cell
    failed FAILED_RETRIES + 1 times (a recipe's error), or the cell FAILED_MOST times whichever
    its jobs (runners that keep failing), the plan refuses it with the counts and the last run; a
    changed recipe (or --retry-failed: ``unchanged`` says no) schedules it again, a kill is no
    failure."""
    from farm.schedule.attempts import FAILED, FAILED_MOST, FAILED_RETRIES, KILLED, Attempt

    root = make_tree(tmp_path / "farm")
    config = load_config(root)
    matrix = compute_matrix(config, LedgerIndex.empty())
    sharding = {n: config.recipe(n).sharding for n in config.recipes}
    p = matrix.cells[0]
    c = p.cell
    key = (c.package, c.cuda, c.torch, c.python, c.platform)

    def failed(n: int, job: str = "shard-3-of-20", outcome: str = FAILED, recipe: str = "a" * 64) -> Attempt:
        return Attempt(c.id, c.package, key, p.epoch, outcome, 600.0, 20, f"run{n}", f"build-{n % 8} / {c.id}.{job}",
                       recipe, None)

    def refusal(history: list[Attempt], unchanged: bool = True) -> str | None:
        costed = cost_matrix(matrix, sharding, Durations({}, {}), attempts={(key, p.epoch): tuple(history)},
                             unchanged=lambda a: unchanged and a.recipe_sha256 == "a" * 64)
        return next((r.reason for r in costed.refused if r.cell.cell.id == c.id), None)

    retried = [failed(n) for n in range(FAILED_RETRIES)]
    assert refusal(retried) is None
    assert refusal([*retried, failed(9)]) == (
        f"its build failed {FAILED_RETRIES + 1} times ({FAILED_RETRIES + 1} of them in {c.id}.shard-3-of-20), last in "
        "run run9 after 10 min: fix the recipe (any change to it or to _defaults.yml schedules it again), or `farm "
        "matrix --retry-failed` where the runners failed it")
    assert refusal([*retried, failed(9)], unchanged=False) is None  # --retry-failed
    assert refusal([*retried, failed(9, recipe="b" * 64)]) is None  # a failure of another recipe is not counted
    assert refusal([*retried, failed(8), failed(9, outcome=KILLED)]) is None  # killed last: planned longer
    spread = [failed(n, f"shard-{n}-of-20") for n in range(FAILED_MOST)]  # a different compile job each time
    assert refusal(spread[:-1]) is None
    assert f"failed {FAILED_MOST} times (1 of them in" in (refusal(spread) or "")
