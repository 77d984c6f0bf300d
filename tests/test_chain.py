"""The next wave's inputs merged with the run already waiting in the concurrency group: GitHub
keeps one pending run per group and a newer one replaces it, so the merge must cover both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from farm.cli import main
from farm.errors import UsageError
from farm.publish import ghrest
from farm.schedule.chain import ChainInputs, merge, parse_title, title
from tests.support import ghsim

NIGHTLY = ChainInputs()
FLASH = ChainInputs(package="flash_attn", cuda="12.8")


@pytest.mark.parametrize(
    ("mine", "pending", "merged"),
    [
        (FLASH, None, FLASH),  # nothing waits: my inputs
        (FLASH, FLASH, FLASH),
        (FLASH, NIGHTLY, NIGHTLY),  # the nightly covers every cell: the filtered chain's are in it
        (NIGHTLY, FLASH, NIGHTLY),
        # one list field differs: the lists join, the rest stays
        (FLASH, ChainInputs(package="natten", cuda="12.8"), ChainInputs(package="flash_attn natten", cuda="12.8")),
        (ChainInputs(platform="win_amd64"), ChainInputs(platform="linux_x86_64,win_amd64"),
         ChainInputs(platform="win_amd64,linux_x86_64")),
        # two fields differ: the product would miss cells, so both widen
        (FLASH, ChainInputs(package="natten", cuda="13.0"), ChainInputs()),
        (ChainInputs(cuda="12.8"), ChainInputs(cuda="13.0"), ChainInputs()),
    ],
)
def test_the_merge_covers_both_runs(mine: ChainInputs, pending: ChainInputs | None, merged: ChainInputs) -> None:
    assert merge(mine, pending) == merged


def covers(wide: ChainInputs, narrow: ChainInputs) -> bool:
    for k, v in wide.filters().items():
        if not v:
            continue
        w = set(v.replace(",", " ").split())
        n = set(narrow.filters()[k].replace(",", " ").split())
        if not n or not n <= w:
            return False
    return True


@pytest.mark.parametrize("a", [NIGHTLY, FLASH, ChainInputs(package="a b", platform="win_amd64"), ChainInputs(torch="2.8")])
@pytest.mark.parametrize("b", [NIGHTLY, FLASH, ChainInputs(package="b c", python="3.12"), ChainInputs(platform="linux_x86_64")])
def test_the_merge_is_a_superset_of_each_side(a: ChainInputs, b: ChainInputs) -> None:
    m = merge(a, b)
    assert covers(m, a)
    assert covers(m, b)


def test_runs_for_different_targets_do_not_merge() -> None:
    with pytest.raises(UsageError, match="one run cannot do both"):
        merge(ChainInputs(target="github"), ChainInputs(target="index"))


def test_the_title_carries_the_inputs_back() -> None:
    for inputs in (NIGHTLY, FLASH, ChainInputs(package="a b", platform="linux_x86_64,win_amd64", target="index")):
        assert parse_title(title(inputs)) == inputs
    # what build.yml's run-name renders for a scheduled run (no inputs)
    assert parse_title("build [package=*] [cuda=*] [torch=*] [python=*] [platform=*] [target=github]") == NIGHTLY
    assert parse_title("Update README") is None
    assert parse_title("build [package=*]") is None


def render_run_name(inputs: ChainInputs) -> str:
    """build.yml's run-name as GitHub renders it: ``${{ inputs.X || 'd' }}`` is X, else d."""
    return ghsim.render_run_name(build_workflow().run_name, {"target": inputs.target, **inputs.filters()})


@pytest.mark.parametrize("inputs", [NIGHTLY, FLASH, ChainInputs(package="a b", platform="linux_x86_64,win_amd64")])
def test_build_workflows_run_name_is_the_title(inputs: ChainInputs) -> None:
    assert render_run_name(inputs) == title(inputs)
    assert parse_title(render_run_name(inputs)) == inputs


def test_farm_chain_dry_run_prints_the_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chain", "--ref", "main", "--package", "flash_attn", "--cuda", "12.8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dispatch:  build [package=flash_attn] [cuda=12.8] [torch=*]" in out


# -- `farm chain` against the loopback GitHub ---------------------------------------------------------
# GitHub cannot be reached from the test machine: tests/support/ghsim.py simulates its documented Actions
# endpoints on 127.0.0.1 (runs listed by workflow, branch and status; workflow_dispatch answered 204;
# a concurrency group keeping one pending run). `farm chain` runs as its own process, as in build.yml.

WORKFLOW = Path(__file__).resolve().parent.parent / ".github/workflows/build.yml"


def build_workflow() -> ghsim.SimWorkflow:
    flow = yaml.safe_load(WORKFLOW.read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as True
    return ghsim.SimWorkflow(flow["run-name"], tuple(on["workflow_dispatch"]["inputs"]))


@pytest.fixture
def github() -> Iterator[ghsim.GitHubSim]:
    sim = ghsim.GitHubSim(repo="farm-wheels/farm", workflows={"build.yml": build_workflow()})
    with ghsim.serve(sim):
        yield sim


def farm_chain(sim: ghsim.GitHubSim, *argv: str, token: str | None = ghsim.TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN")}
    env.update(GITHUB_API_URL=sim.base.rstrip("/"), GITHUB_REPOSITORY=sim.repo)
    if token is not None:
        env["GITHUB_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "farm.cli", "chain", "--ref", "main", *argv], env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def inputs_of(run: ghsim.SimRun) -> ChainInputs:
    found = parse_title(run.title)
    assert found is not None, run.title
    return found


def waiting(sim: ghsim.GitHubSim) -> list[ghsim.SimRun]:
    return [r for r in sim.runs.values() if r.status == "pending"]


FLASH_ARGS = ("--package", "flash_attn", "--cuda", "12.8")


def test_chain_merges_the_waiting_nightly_and_replaces_it(github: ghsim.GitHubSim) -> None:
    github.add_run("build.yml", "main", "in_progress", {"package": "flash_attn", "cuda": "12.8"})  # this wave
    nightly = github.add_run("build.yml", "main", "pending")  # a scheduled run: no inputs
    proc = farm_chain(github, *FLASH_ARGS)
    assert proc.returncode == 0, proc.stderr
    assert "waiting:   build [package=*]" in proc.stdout
    # GitHub cancelled the older pending run; the one left covers both: the nightly's every cell
    assert nightly.status == "completed"
    assert nightly.conclusion == "cancelled"
    [new] = waiting(github)
    assert inputs_of(new) == NIGHTLY
    assert new.inputs == {"package": "", "cuda": "", "torch": "", "python": "", "platform": "", "target": "github"}
    assert [(r.method, r.status) for r in github.log if "dispatches" in r.path] == [("POST", 204)]


def test_chain_joins_a_waiting_chained_waves_packages(github: ghsim.GitHubSim) -> None:
    github.add_run("build.yml", "main", "in_progress", {"package": "flash_attn", "cuda": "12.8"})
    github.add_run("build.yml", "main", "pending", {"package": "natten", "cuda": "12.8"})
    github.add_run("build.yml", "other-branch", "pending", {"package": "vllm"})  # not this branch's group
    proc = farm_chain(github, *FLASH_ARGS)
    assert proc.returncode == 0, proc.stderr
    [new] = [r for r in waiting(github) if r.branch == "main"]
    assert inputs_of(new) == ChainInputs(package="flash_attn natten", cuda="12.8")
    # the runs were read by status, each waiting status once
    statuses = sorted(r.path for r in github.log if r.path.endswith("/runs"))
    assert len(statuses) == 4


def test_chain_with_nothing_waiting_dispatches_its_own_inputs(github: ghsim.GitHubSim) -> None:
    github.add_run("build.yml", "main", "in_progress", {"package": "flash_attn", "cuda": "12.8"})
    github.add_run("build.yml", "main", "completed", {"package": "natten"})  # finished: nothing to keep
    proc = farm_chain(github, *FLASH_ARGS)
    assert proc.returncode == 0, proc.stderr
    [new] = waiting(github)  # pending behind the run in progress, as the group holds it
    assert inputs_of(new) == FLASH


def test_the_next_wave_waits_for_the_run_before_so_at_most_two_are_in_flight(github: ghsim.GitHubSim) -> None:
    """The next-wave job starts a wave while its own run still links and publishes: it waits for
    any other run in progress to end first. One that is still in progress when the wait runs out
    (0 minutes here) dispatches nothing and exits 1: the run's chain job starts the next wave."""
    before = github.add_run("build.yml", "main", "in_progress", {"package": "natten"})  # still publishing
    this = github.add_run("build.yml", "main", "in_progress", {"package": "flash_attn", "cuda": "12.8"})
    proc = farm_chain(github, *FLASH_ARGS, "--wait-for-runs", "0", "--run-id", str(this.id))
    assert proc.returncode == 1
    assert f"run(s) {before.id} of build.yml on main still in progress after 0 min: nothing dispatched" in proc.stderr
    assert not waiting(github)
    assert not [r for r in github.log if "dispatches" in r.path]
    before.status, before.conclusion = "completed", "success"
    proc = farm_chain(github, *FLASH_ARGS, "--wait-for-runs", "0", "--run-id", str(this.id))
    assert proc.returncode == 0, proc.stderr
    [new] = waiting(github)
    assert inputs_of(new) == FLASH


def test_chain_refuses_to_merge_another_targets_run_and_dispatches_nothing(github: ghsim.GitHubSim) -> None:
    github.add_run("build.yml", "main", "in_progress")
    other = github.add_run("build.yml", "main", "pending", {"target": "index"})
    proc = farm_chain(github, *FLASH_ARGS)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "one run cannot do both" in proc.stderr
    assert other.status == "pending"
    assert not any("dispatches" in r.path for r in github.log)


def test_chain_without_a_token_says_so(github: ghsim.GitHubSim) -> None:
    proc = farm_chain(github, *FLASH_ARGS, token=None)
    assert proc.returncode == 3
    assert "GH_TOKEN or GITHUB_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert github.log == []


def test_chain_names_an_unknown_workflow(github: ghsim.GitHubSim) -> None:
    proc = farm_chain(github, *FLASH_ARGS, "--workflow", "nightly.yml")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "HTTP 404" in proc.stderr
    assert "workflow_dispatch" in proc.stderr  # the hint
    assert "Traceback" not in proc.stderr


def test_a_dispatch_past_the_secondary_limit_waits_as_github_asks() -> None:
    """GitHub answers a content-creating request past its per-minute limit with 403 and
    Retry-After (scaled time: a minute passes in a tenth of a second); the dispatch waits, then lands."""
    sim = ghsim.GitHubSim(repo="farm-wheels/farm", workflows={"build.yml": build_workflow()},
                          clock=ghsim.ScaledClock(600.0), limits=ghsim.Limits(content_per_minute=1))
    with ghsim.serve(sim):
        client = ghrest.actions_client(sim.repo, {"GITHUB_API_URL": sim.base.rstrip("/"), "GH_TOKEN": ghsim.TOKEN},
                                       clock=sim.clock)
        sim.add_run("build.yml", "main", "in_progress")
        client.dispatch("build.yml", "main", {"package": "a"})
        client.dispatch("build.yml", "main", {"package": "b"})
    assert sim.count(status=403) == 1
    assert client.rate_limited == 1
    assert [inputs_of(r).package for r in waiting(sim)] == ["b"]  # the newer pending run replaced the older
