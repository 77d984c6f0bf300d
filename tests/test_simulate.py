"""The drain simulation (farm/simulate/): GitHub's limits as a model, the inputs it rests on, and
small drains of the repository's own recipes through farm's planner, publish pattern and chain.

GitHub cannot be reached from here; what limits it is modelled from its documentation: the REST
budget one repository's token shares between concurrent jobs (primary 1,000 an hour; secondary 80
content-creating a minute and 500 an hour, 900 points a minute), the Actions cache (10 GB, least
recently used evicted, 7 days idle, writes past about 200 a minute dropped), artifact retention,
git's 100 MiB file limit, the 6 h job limit, N concurrent jobs. Left out: GitHub's 100 concurrent
requests (a publish job sends one at a time and at most nine publish at once), the network's own
failures (a build job's failure rate stands for them), the 35-day run limit (no run here lasts more
than days), runner images' differences beyond the Windows factor, and GitHub's queueing beyond a
fixed delay per job. The whole grid runs at the end (slow tier).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.errors import UsageError
from farm.load.recipes import load_config
from farm.provenance.ledger import LedgerIndex
from farm.schedule.cacheplan import DATA as SIZES
from farm.schedule.cacheplan import CacheSizes
from farm.schedule.matrix import Filters, compute_matrix
from farm.schedule.recipetimes import RecipeTimes
from farm.simulate.drain import Drain, Scenario, cell_requests, simulate
from farm.simulate.githubsim import CACHE_IDLE_S, GIT_REFUSE_BYTES, GIT_WARN_BYTES, ActionsCache, Rest, expired
from farm.simulate.inputs import Inputs
from farm.simulate.workflow import read_workflows

REPO = Path(__file__).resolve().parent.parent
SMALL = ("demo_ext", "fused_ssim")  # 510 cells: two shards of one wave, quick to drain


# -- GitHub's limits -------------------------------------------------------------------------------
def test_the_rest_budget_is_shared_and_answers_with_the_wait() -> None:
    rest = Rest()
    assert all(rest.ask(t * 0.5, "POST") == 0 for t in range(80))  # 80 content-creating in 40 s
    wait = rest.ask(40.0, "POST")
    assert wait == pytest.approx(20.0)  # the first of them leaves the minute's window at 60 s
    assert rest.ask(40.0, "GET") == 0  # a read is not content-creating
    assert rest.ask(60.5, "POST") == 0
    assert rest.refused == 1
    # the primary limit: 1,000 an hour whatever the method
    primary = Rest()
    assert all(primary.ask(t * 3.0, "GET") == 0 for t in range(1000))
    assert primary.ask(3000.0, "GET") == pytest.approx(600.0)
    assert primary.busiest(3600) == 1000
    assert primary.busiest(60) == 20


def test_secondary_points_count_a_write_five_times() -> None:
    rest = Rest()
    for n in range(79):
        assert rest.ask(n * 0.1, "POST") == 0  # 395 points
    for n in range(505):
        assert rest.ask(8.0 + n * 0.01, "GET") == 0  # 900 points in all
    assert rest.ask(14.0, "GET") > 0


def test_the_actions_cache_evicts_least_recently_used_and_idle_entries() -> None:
    cache = ActionsCache(capacity=10)
    assert cache.save("a", 4, 0.0) == 1.0
    assert cache.save("b", 4, 1.0) == 1.0
    assert cache.restore("a", 2.0) == 1.0  # a is now the most recently used
    assert cache.save("c", 4, 3.0) == 1.0  # over 10: b goes
    assert cache.restore("b", 4.0) == 0.0
    assert cache.save("a", 4, 5.0) == 0.0  # entries are immutable
    assert cache.save("huge", 11, 6.0) == 0.0
    assert cache.restore("c", 3.0 + CACHE_IDLE_S + 1) == 0.0  # unused for 7 days
    assert cache.used == 0


def test_cache_writes_past_the_services_rate_are_dropped() -> None:
    cache = ActionsCache()
    assert cache.save("x", 1000, 0.0, writes=150) == 1.0
    assert cache.save("y", 1000, 1.0, writes=100) == pytest.approx(0.5)  # 200 a minute
    assert cache.dropped_writes == 50
    assert cache.save("z", 1000, 61.0, writes=10) == 1.0


def test_artifacts_expire_after_their_retention() -> None:
    assert not expired(0.0, 3, 3 * 86400)
    assert expired(0.0, 3, 3 * 86400 + 1)


# -- what the simulation reads ----------------------------------------------------------------------
def test_the_workflows_own_numbers_are_read() -> None:
    wf = read_workflows(REPO)
    assert (wf.max_shards, wf.publishers) == (8, 0)  # 0: each publish job's share of the token by its cells
    assert (wf.objects_days, wf.wheel_days) == (7, 7)
    assert wf.build_timeout_s == wf.publish_timeout_s == 6 * 3600
    assert wf.nightly == (3, 17)
    assert wf.next_wave_wait_s == 300 * 60  # farm chain --wait-for-runs in the next-wave job


def test_a_workflow_without_a_literal_retention_is_refused(tmp_path: Path) -> None:
    flows = tmp_path / ".github" / "workflows"
    flows.mkdir(parents=True)
    for name in ("build.yml", "publish-shard.yml"):
        (flows / name).write_text((REPO / ".github/workflows" / name).read_text())
    text = (REPO / ".github/workflows/build-shard.yml").read_text().replace("retention-days: 7",
                                                                              "retention-days: ${{ inputs.days }}", 1)
    (flows / "build-shard.yml").write_text(text)
    with pytest.raises(UsageError, match="retention-days of the objects- upload"):
        read_workflows(tmp_path)
    with pytest.raises(UsageError, match="cannot read the workflow"):
        read_workflows(tmp_path / "nowhere")


def test_the_inputs_say_what_is_measured() -> None:
    inputs = Inputs.load()
    assert {i.basis for i in inputs.table.values()} == {"measured", "estimate"}
    assert inputs.v.queue_s > 0
    changed = inputs.with_values(queue_s=200)
    assert changed.v.queue_s == 200
    assert changed.table["queue_s"].basis == "estimate"
    with pytest.raises(UsageError, match="unknown simulation input"):
        inputs.with_values(speed=2)


@pytest.mark.parametrize("edit", [
    lambda d: d["values"].pop("queue_s"),
    lambda d: d["values"]["queue_s"].update(value=-1),
    lambda d: d["values"]["queue_s"].update(basis="guess"),
    lambda d: d["values"].update(extra={"value": 1, "basis": "estimate"}),
    lambda d: d["wheel_mb"].pop("default"),
])
def test_a_broken_inputs_table_is_refused(tmp_path: Path, edit: Any) -> None:
    data = json.loads((REPO / "farm/simulate/inputs.json").read_text())
    edit(data)
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a simulation input table"):
        Inputs.load(path)


def test_recipe_times_scale_with_the_cells_targets() -> None:
    times = RecipeTimes.load()
    row = times.recipes["fused_ssim"]
    assert row.basis == "measured"
    assert row.targets == 8
    assert times.seconds("fused_ssim", 4) == pytest.approx(row.seconds / 2)
    assert times.seconds("cumm", 3) == times.recipes["cumm"].seconds  # host code only: not scaled
    assert times.seconds("no_such_recipe", 8) is None
    assert times.runner_factor.value > 0
    assert times.build_fixed_s(linked=True) > times.build_fixed_s(linked=False) > 0
    data = json.loads((REPO / "farm/schedule/recipe_times.json").read_text())
    data["recipes"]["x"] = {"seconds": 0, "targets": 1, "basis": "measured"}
    with pytest.raises(UsageError, match="not a recipe time table"):
        RecipeTimes.from_json(data, "t.json")
    del data["recipes"]["x"], data["fixed"]["hit_cost"]
    with pytest.raises(UsageError, match="hit_cost"):
        RecipeTimes.from_json(data, "t.json")


def test_a_release_is_read_once_per_job_and_listed_only_to_adopt() -> None:
    assert cell_requests(False, False, 0) == ["POST", "POST"]  # created, then the upload
    assert cell_requests(False, True, 250) == ["GET", "POST"]  # looked up, then the upload
    assert cell_requests(True, True, 250) == ["POST"]  # known to the job: the upload alone
    assert cell_requests(True, True, 250, service=False) == ["GET", "GET", "POST"]  # another run's artifacts
    assert cell_requests(True, True, 250, adopt=True) == ["POST"] + ["GET"] * 4  # 422, three pages, the asset


# -- small drains -----------------------------------------------------------------------------------
def drain(*packages: str, runners: int = 20, **kwargs: Any) -> Drain:
    config = load_config(REPO, packages=list(packages) or None)
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, packages=list(packages)))
    inputs = Inputs.load().with_values(**kwargs.pop("values", {}))
    sizes = CacheSizes.from_json(json.loads(SIZES.read_text()), str(SIZES))
    return simulate(config, matrix, inputs, RecipeTimes.load(), read_workflows(REPO), sizes,
                    Scenario(runners, **kwargs))


@pytest.fixture(scope="module")
def today() -> Drain:
    return drain(*SMALL)


def test_publish_jobs_finish_inside_their_clock_and_nothing_is_built_again(today: Drain) -> None:
    """A shard's publish job asks about one request a cell (its upload; each release once; the
    artifacts from the artifact service) and takes a share of the token by its cells: 256 cells
    publish in about two hours, far inside GitHub's 6 (before, a ninth of the token at five
    requests a cell took 13 hours, and the cells a killed job had not reached were built again)."""
    [bump] = today.results
    assert bump.publish_jobs_killed == 0
    assert not bump.rebuilt
    assert bump.drained
    assert bump.lost == 0
    assert bump.published == bump.cells == 510
    assert today.requests / bump.published <= 1.2


def test_the_waves_are_the_planners(today: Drain) -> None:
    """The first run schedules what farm matrix schedules: every cell of the two packages (they fit
    one run), in two shards of 256 and 254, longest first."""
    first = today.runs[0]
    assert len(first.plan["cells"]) == 510
    assert [len(s) for s in first.shards] == [256, 254]
    assert first.plan["totals"]["deferred"] == 0


def test_a_ledger_file_per_package_and_epoch_stays_under_githubs_limit() -> None:
    """Records of 150 KB: one ledger.jsonl would pass GitHub's 100 MiB in the second bump and
    every push be refused (GH001); one file per package and epoch holds one package's bump, and
    both bumps drain. A package whose one epoch passes 100 MiB is still refused."""
    sim = drain(*SMALL, epochs=2, horizon_days=5, values={"ledger_record_bytes": 150_000})
    assert all(r.drained for r in sim.results)
    assert sim.ledger.largest_file() < GIT_REFUSE_BYTES < sum(sim.ledger.files.values())
    huge = drain(*SMALL, horizon_days=3, values={"ledger_record_bytes": 600_000})
    assert huge.results[0].rebuilt["ledger refused"] > 0


def test_a_cell_longer_than_a_job_is_refused_not_retried() -> None:
    """vllm has no sharding and nothing recorded: the planner starts from its measured probe (hours
    past GitHub's 6) and refuses its cells with the reason, instead of planning the 45-minute
    guess and having GitHub kill it every run."""
    sim = drain("vllm", compile_cache="gha", horizon_days=4, values={"compile_objects_mb": 100_000})
    [bump] = sim.results
    assert bump.cells == 0
    assert bump.refused == 10
    assert bump.timeouts == 0
    assert not bump.wasted_hours.get("timeout")


def test_the_bill_after_a_cold_bump_is_the_warm_ones() -> None:
    """farm matrix's bill at the start of a second bump (the ledger holding the first's durations
    and compile counts) expects a recorded cell to hit every step where the compiler cache keeps
    them (an S3 store), and so comes within a quarter of what the warm bump's builds take (the
    runner-hours of its build jobs, less the work redone); where the cache keeps nothing (the
    Actions cache at the farm's scale) it bills the cold build again, as that bump takes."""
    for backend in ("s3", "gha"):
        _, warm = drain("gsplat", runners=60, epochs=2, compile_cache=backend).results
        useful = warm.runner_hours_by_kind["build"] - sum(warm.wasted_hours.values())
        assert warm.planned_runner_hours == pytest.approx(useful, rel=0.25), backend
        if backend == "s3":
            kept = warm.planned_runner_hours
        else:
            assert warm.planned_runner_hours > 2 * kept


def test_a_sharded_cell_is_retried_at_once_and_built_warm_in_one_job() -> None:
    """llama_cpp_python splits each Linux cell over 10 compile jobs. A compile shard that fails
    (here 1 in 20) fails its cell's link job and the cell is built again: a failure, not an expired
    artifact, and by the very next run, not the nightly (the chain goes on while a run built
    something and cells wait, its own failed ones too). The shards compile disjoint units, so
    after the bump the S3 store holds every step of every cell, and the warm bump plans each
    cell in one job and no link job; the Actions cache keeps nothing and the cold fan-out stays.
    A cell of 11 jobs fails 43% of its builds here, each time in another job: the retry policy
    (farm matrix's, which the simulation plans by) builds it again until it is published."""
    sim = drain("llama_cpp_python", runners=60, epochs=2, values={"failure_rate": 0.05})
    cold, warm = sim.results
    assert cold.rebuilt["failure"] > 0
    assert not cold.rebuilt["artifact expired"]
    assert cold.runs > 2
    assert cold.days < 1  # the nightly would have started the first retry a day after the bump
    assert cold.drained
    assert warm.drained
    assert all(s.cached == pytest.approx(1.0) for s in sim.cells.values() if s.published)
    warm_runs = [r for r in sim.runs if r.epoch == 2]
    assert not any(r.links or any(e.get("shard") for s in r.shards for e in s) for r in warm_runs)
    kept_nothing = drain("llama_cpp_python", runners=60, epochs=2, compile_cache="gha")
    assert all(r.links for r in kept_nothing.runs if r.epoch == 2)


def test_a_cell_whose_publish_meets_the_rate_limit_is_handed_on_and_published_not_rebuilt() -> None:
    """Another client has spent the token's hour of content-creating requests when the wave's
    builds end: every upload is answered 403 with a wait near an hour. Each shard's publish job
    waits at most 30 minutes on such answers and hands its cells on; publish-rest, which hands on
    to no job, waits as long as its clock allows and publishes them. Nothing is built again."""
    config = load_config(REPO, packages=list(SMALL))
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, packages=list(SMALL)))
    sizes = CacheSizes.from_json(json.loads(SIZES.read_text()), str(SIZES))

    def quiet_until(spent: float) -> Drain:
        sim = Drain(config, matrix, Inputs.load().with_values(failure_rate=0), RecipeTimes.load(),
                    read_workflows(REPO), sizes, Scenario(20))
        for i in range(500):  # the other client's 500 writes, 75 a minute, ending when the first upload comes
            assert sim.rest.ask(spent - 400 + 0.8 * i, "POST") == 0
        return sim

    alone = quiet_until(-1e6)
    alone.bump(warm=False)
    first_upload = next(t for t, write in alone.rest.log if write and t > 0)
    sim = quiet_until(first_upload)
    bump = sim.bump(warm=False)
    (run,) = [r for r in sim.runs if r.plan]
    assert sim.rate_limited > 0
    assert bump.published == bump.cells == 510
    assert not bump.rebuilt
    assert all(s.builds == 1 for s in sim.cells.values())
    assert {v.status for v in run.verdicts.values()} == {"published"}
    assert bump.days > alone.results[0].days  # publish-rest waited the hour out


def test_farm_simulate_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--runners", "20", "--root", str(REPO), "--json", *SMALL])
    data = json.loads(capsys.readouterr().out)
    assert code == 0  # the goals asked of this scenario are met (the day goals are asked at 60 runners)
    for key in ("days", "runner_hours", "wasted_runner_hours", "rebuilt_cells", "lost_cells", "requests_per_asset",
                "ledger_largest_file_mb", "busiest_minute_writes", "busiest_hour_requests", "goals", "inputs"):
        assert key in data
    assert data["busiest_minute_writes"] <= 80
    assert data["busiest_hour_requests"] <= 1000
    assert {g["met"] for g in data["goals"][2:]} == {None}  # the day goals are asked at 60 runners


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--runners", "0", "--root", str(REPO)]) == 2
    assert main(["simulate", "--runners", "20", "--set", "queue_s=fast", "--root", str(REPO)]) == 2
    assert main(["simulate", "--runners", "20", "--runner-factor", "0", "--root", str(REPO)]) == 2
    assert "NAME=NUMBER" in capsys.readouterr().err


# -- the whole grid ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(("runners", "bumps", "failure_rate"), [(20, 1, 0.01), (60, 3, 0.01), (60, 1, 0.0)])
def test_the_whole_grid_drains_with_nothing_rebuilt_because_publishing_ran_out_of_time(
        runners: int, bumps: int, failure_rate: float) -> None:
    """The repository's grid (16,390 cells) as farm now publishes and records it: each publish job
    takes a share of the token by its cells and sends about one request a cell, so none is killed
    at 6 h and no cell is built again because publishing ran out of time or met the rate limit
    (what a publish job hands on, publish-rest publishes); the ledger is a file per package and
    epoch, so three bumps drain. With no build failing, the waves are others and two runs'
    publish jobs meet GitHub's hourly limit together. ``pytest -s`` prints the numbers (docs/ci.md)."""
    sim = drain(runners=runners, epochs=bumps, horizon_days=60 if bumps == 1 else 30,
                values={"failure_rate": failure_rate})
    for r in sim.results:
        print(f"{runners} runners, bump {r.epoch}: {r.days:.1f} days, {r.runs} runs, {r.runner_hours:,.0f} runner-h, "
              f"{sum(r.wasted_hours.values()):,.0f} wasted ({dict(r.wasted_hours)}), {r.published} published, "
              f"rebuilt {dict(r.rebuilt)}, {r.lost} lost, {r.refused} refused, {r.publish_jobs_killed} publish jobs "
              f"killed; the planner billed {r.planned_days:.1f} days, {r.planned_runner_hours:,.0f} runner-h; "
              f"{sim.requests / max(1, sum(b.published for b in sim.results)):.2f} requests per asset, the ledger's largest file "
              f"{sim.ledger.largest_file() / 2**20:.1f} MiB")
    first = sim.results[0]
    assert first.cells + first.refused == 16_390
    for r in sim.results:
        assert r.drained
        assert r.lost == 0
        assert r.publish_jobs_killed == 0
        assert r.rebuilt["publish killed"] == 0
        assert r.rebuilt["ledger refused"] == 0
        assert r.rebuilt["artifact expired"] == 0  # waves sized to the retention: a lost shard is a failure
        assert r.rebuilt["rate limit"] == 0
    assert sim.ledger.largest_file() < GIT_WARN_BYTES


def test_a_cell_that_fails_the_same_way_is_refused_by_the_retry_policy() -> None:
    """Every build job fails: each cell is built three times (the retry policy farm matrix
    applies to the attempts publish-rest records), then refused with the reason and counted
    lost, never built for ever."""
    sim = drain("demo_ext", runners=20, values={"failure_rate": 1.0})
    (bump,) = sim.results
    assert bump.published == 0
    assert bump.lost == bump.failed_out == bump.cells > 0
    assert all(len(sim.attempts[k]) == 3 for k in sim.attempts)
    assert bump.runs == 3


@pytest.mark.parametrize("failure_rate", [0.0, 0.05])
def test_the_next_wave_builds_while_the_last_publishes_and_no_cell_is_built_twice(failure_rate: float) -> None:
    """With one build shard a run (256 jobs), the two packages take several waves. Each next wave
    starts when the last one's build shards end (its next-wave job: cells were deferred), once no
    other run is in progress, its matrix holding back the running wave's cells: never more than
    two runs in progress, two at once never share a cell, a cell is built again only after its
    build failed, and every cell is published."""
    config = load_config(REPO, packages=list(SMALL))
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, packages=list(SMALL)))
    sizes = CacheSizes.from_json(json.loads(SIZES.read_text()), str(SIZES))
    sim = simulate(config, matrix, Inputs.load().with_values(failure_rate=failure_rate), RecipeTimes.load(),
                   replace(read_workflows(REPO), max_shards=1), sizes, Scenario(20))
    (bump,) = sim.results
    assert bump.drained
    assert bump.lost == 0
    runs = [r for r in sim.runs if r.plan]
    assert len(runs) >= 2
    assert runs[0].chained
    assert runs[1].started < runs[0].ended  # built while the first published
    assert 0 < runs[1].plan["held"] <= len(runs[0].plan["cells"])  # those not in the ledger yet
    for a in runs:
        assert sum(b.started <= a.started < b.ended for b in runs) <= 2
        for b in runs:
            if a is not b and a.started < b.started < a.ended:
                assert not {c["id"] for c in a.plan["cells"]} & {c["id"] for c in b.plan["cells"]}
    if not failure_rate:
        assert all(s.builds == 1 for s in sim.cells.values())
    else:  # failed builds were recorded and built again, by a later run
        assert sim.attempts
        assert not bump.rebuilt
