"""Publishing real stamped wheels to GitHub Releases, one wheel at a time.

GitHub cannot be reached from here, so its documented behaviour is simulated on 127.0.0.1 by
:mod:`tests.support.ghsim` (422 on a duplicate asset name, the 1,000-asset cap, 403/429 with
Retry-After under the rate limits, redirects to signed storage), in scaled time. The wheels
are real: an nvcc-built extension, asserted and stamped by the real postbuild; the gate
re-inspects each one, and an asset found without a ledger record is downloaded and re-asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.load.recipes import load_config
from farm.provenance.judge import derive_from_config
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerbook import LedgerBook
from farm.publish import ghrest
from farm.publish.githubsettings import GithubSettings
from farm.publish.publish import UploadReport, upload
from farm.publish.ratelimit import Limit, Throttle, github_limits
from farm.publish.releases import github_client
from farm.publish.verdict import Verdict
from tests.support import ghsim
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.postbuildfix import builder_wheel
from tests.support.publishfix import stamped_fleet

PACKAGES = ["demo_a", "demo_b", "demo_c", "demo_d"]


@dataclass(frozen=True)
class Fleet:
    root: Path
    first: dict[str, Path]  # package -> wheel of run 1
    rebuilt: dict[str, Path]  # the same cells built again by run 2: other bytes, same names


@pytest.fixture(scope="module")
def fleet(cuda_fixtures: CudaFixtures, cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    work = tmp_path_factory.mktemp("ghfleet")
    so = cuda_fixtures.path("default")
    root, first = stamped_fleet(work, so, cuda_home, PACKAGES, arch=BASE, run_id="1")
    _, rebuilt = stamped_fleet(work, so, cuda_home, PACKAGES, arch=BASE, run_id="2")
    for p in PACKAGES:
        assert first[p].name == rebuilt[p].name
        assert first[p].read_bytes() != rebuilt[p].read_bytes()
    return Fleet(root, first, rebuilt)


def batch_dir(wheels: list[Path], dest: Path) -> Path:
    """A folder holding ``wheels`` and their fragments, as a build job's artifact would."""
    dest.mkdir(parents=True)
    for w in wheels:
        shutil.copy2(w, dest)
        shutil.copy2(w.with_name(w.name + ".ledger.json"), dest)
    return dest


def settings(sim: ghsim.GitHubSim) -> GithubSettings:
    return GithubSettings("github", sim.repo, api_url=sim.base.rstrip("/"), uploads_url=sim.base + "uploads")


def run(fleet: Fleet, sim: ghsim.GitHubSim, wheels_dir: Path, ledger: Path, *,
        limits: tuple[Limit, ...] | None = None, **options: object) -> UploadReport:
    def client(s: GithubSettings) -> ghrest.Client:
        throttle = Throttle(limits or github_limits(), clock=sim.clock)
        return github_client(s, {"GH_TOKEN": ghsim.TOKEN}, clock=sim.clock, throttle=throttle)

    return upload(wheels_dir, [settings(sim)], ledger=ledger, github_client=client, reader="native",
                  derive=derive_from_config(load_config(fleet.root)), **options)  # type: ignore[arg-type]


def verdicts(report: UploadReport) -> dict[str, Verdict]:
    return {v.wheel.split("-")[0]: v.verdict for v in report.verdicts}


def published(sim: ghsim.GitHubSim) -> dict[str, str]:
    """Asset name -> sha256 of every asset on every release."""
    import hashlib

    return {a.name: hashlib.sha256(a.data).hexdigest() for r in sim.releases.values() for a in r.assets.values()}


def recorded(ledger: Path) -> dict[str, str]:
    """File name -> sha256 of every ledger entry published to the github target."""
    return {e["filename"]: e["sha256"] for _, e in iter_entries(ledger)
            if any(p["target"] == "github" for p in e["published"])}


def test_each_wheel_is_published_and_recorded_and_a_rerun_sends_nothing(fleet: Fleet, sim: ghsim.GitHubSim,
                                                                       tmp_path: Path) -> None:
    out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
    report = run(fleet, sim, out, ledger)
    assert report.ok, [v.line() for v in report.verdicts]
    assert report.exit_code == 0, [v.line() for v in report.verdicts]
    assert set(verdicts(report).values()) == {Verdict.PUBLISHED}
    # a release per package, version, CUDA line and epoch
    assert sorted(sim.releases) == [f"{p}-0.1.0-cu130-e0" for p in PACKAGES]
    assert recorded(ledger) == published(sim)
    assert len(published(sim)) == 4
    (entry,) = [e for _, e in iter_entries(ledger) if e["package"] == "demo_a"]
    assert entry["published"] == [{"target": "github", "url": "https://github.com/farm-wheels/wheels/releases/"
                                   f"download/demo_a-0.1.0-cu130-e0/{fleet.first['demo_a'].name.replace('+', '%2B')}"}]
    uploads = sim.count(content=True)
    again = run(fleet, sim, out, ledger)
    assert again.ok
    assert set(verdicts(again).values()) == {Verdict.PRESENT}
    assert sim.count(content=True) == uploads  # nothing created or sent
    assert again.recorded == 0


def test_one_refused_wheel_does_not_stop_the_others(fleet: Fleet, sim: ghsim.GitHubSim, tmp_path: Path,
                                                    cuda_fixtures: CudaFixtures) -> None:
    out = batch_dir(list(fleet.first.values()), tmp_path / "out")
    builder_wheel(out, "demo_e", cuda_fixtures.path("default"), version="0.1.0+cu130")  # never stamped
    report = run(fleet, sim, out, tmp_path / "ledger.jsonl")
    got = verdicts(report)
    assert got.pop("demo_e") is Verdict.REFUSED
    assert set(got.values()) == {Verdict.PUBLISHED}
    assert report.exit_code == 1
    (refused,) = [v for v in report.verdicts if v.verdict is Verdict.REFUSED]
    assert refused.target == "gate"
    assert "stamped" in refused.message


def test_a_duplicate_asset_name_is_already_there(fleet: Fleet, sim: ghsim.GitHubSim, tmp_path: Path) -> None:
    """Another writer uploads the same wheel between this run's listing and its upload: GitHub
    answers 422 already_exists, and the run finds the same bytes there and records them."""
    wheel = fleet.first["demo_b"]

    def other_writer(method: str, path: str, status: int) -> None:
        if (method == "POST" and path.endswith("/releases") and "demo_b-0.1.0-cu130-e0" in sim.releases
                and wheel.name not in sim.asset_names("demo_b-0.1.0-cu130-e0")):
            sim.put_asset("demo_b-0.1.0-cu130-e0", wheel.name, wheel.read_bytes())

    sim.after_request = other_writer
    out, ledger = batch_dir([wheel], tmp_path / "out"), tmp_path / "ledger.jsonl"
    report = run(fleet, sim, out, ledger)
    assert verdicts(report) == {"demo_b": Verdict.PRESENT}
    assert sim.count(status=422) == 1
    assert recorded(ledger) == published(sim)


def test_an_asset_without_a_digest_is_read_before_it_is_judged(fleet: Fleet, sim: ghsim.GitHubSim,
                                                                tmp_path: Path) -> None:
    wheel = fleet.first["demo_a"]
    sim.put_asset("demo_a-0.1.0-cu130-e0", wheel.name, wheel.read_bytes(), digest=False)
    out, ledger = batch_dir([wheel], tmp_path / "out"), tmp_path / "ledger.jsonl"
    report = run(fleet, sim, out, ledger)
    assert verdicts(report) == {"demo_a": Verdict.PRESENT}
    assert any(r.path.startswith("/_storage/") for r in sim.log)  # it was downloaded, not trusted
    assert recorded(ledger) == published(sim)


def test_killed_between_upload_and_record_then_the_rebuild_adopts(fleet: Fleet, sim: ghsim.GitHubSim,
                                                                  tmp_path: Path, cuda_home: Path) -> None:
    """`farm upload` is killed (SIGKILL) right after GitHub stored its second asset, before the
    ledger recorded it. The cell is rebuilt (other bytes, the same name); the next run finds the
    first build's asset, downloads and re-asserts it, and records it instead of blocking."""
    root = tmp_path / "root"
    shutil.copytree(fleet.root, root)
    defaults = (root / "_defaults.yml").read_text()
    defaults = re.sub(r"(?m)^    repository: farm-wheels/farm-wheels.*$",
                      f"    repository: {sim.repo}\n    api_url: {sim.base}\n    uploads_url: {sim.base}uploads",
                      defaults)
    (root / "_defaults.yml").write_text(defaults)
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "GH_TOKEN": ghsim.TOKEN, "CUDA_HOME": str(cuda_home)}
    uploads: list[str] = []
    proc: subprocess.Popen[bytes] | None = None

    def kill_after_second(tag: str, name: str) -> None:
        uploads.append(name)
        if len(uploads) == 2 and proc is not None:
            os.kill(proc.pid, signal.SIGKILL)  # before GitHub's answer reaches it

    sim.on_upload = kill_after_second
    sim.clock = ghsim.ScaledClock(1.0)  # a real process, real time
    out = batch_dir(list(fleet.first.values()), tmp_path / "out")
    argv = [sys.executable, "-c", "from farm.cli import console; console()", "upload", str(out), "--target", "github", "--root", str(root),
            "--ledger", str(ledger), "--json"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    sim.on_upload = None
    assert len(published(sim)) == 2
    assert len(recorded(ledger)) == 1
    orphaned = next(n for n in published(sim) if n not in recorded(ledger))

    # The next wave: the cells the ledger does not hold are rebuilt (another run id, so other
    # bytes under the same names) and published.
    todo = [w for w in fleet.rebuilt.values() if w.name not in recorded(ledger)]
    assert len(todo) == 3
    out2 = batch_dir(todo, tmp_path / "out2")
    done = subprocess.run(argv[:4] + [str(out2)] + argv[5:], env=env, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    by = {v["wheel"]: v["verdict"] for v in report["verdicts"]}
    assert by.pop(orphaned) == "adopted"
    assert set(by.values()) == {"published"}
    # Every asset recorded, every record published, with the same bytes: nothing twice.
    assert recorded(ledger) == published(sim)
    assert len(published(sim)) == 4
    assert published(sim)[orphaned] == fleet_sha(fleet.first, orphaned)


def fleet_sha(wheels: dict[str, Path], name: str) -> str:
    import hashlib

    (path,) = [w for w in wheels.values() if w.name == name]
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_asset_that_fails_reassertion_is_an_orphan_then_replaced(fleet: Fleet, sim: ghsim.GitHubSim,
                                                                     tmp_path: Path) -> None:
    wheel = fleet.first["demo_c"]
    sim.put_asset("demo_c-0.1.0-cu130-e0", wheel.name, b"PK\x03\x04 not a wheel")
    out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
    report = run(fleet, sim, out, ledger)
    got = verdicts(report)
    assert got.pop("demo_c") is Verdict.ORPHAN
    assert set(got.values()) == {Verdict.PUBLISHED}
    (orphan,) = [v for v in report.verdicts if v.verdict is Verdict.ORPHAN]
    assert "--delete-orphans" in orphan.message
    assert report.exit_code == 1
    assert wheel.name not in recorded(ledger)
    again = run(fleet, sim, out, ledger, delete_orphans=True)
    assert verdicts(again)["demo_c"] is Verdict.REPLACED
    assert again.ok
    assert recorded(ledger) == published(sim)
    assert len(published(sim)) == 4


def test_rate_limited_mid_batch_waits_as_told_and_finishes(fleet: Fleet, tmp_path: Path) -> None:
    """The simulated secondary limit is 3 content-creating requests a minute; the client is
    told GitHub allows more, so it meets 403 + Retry-After mid-batch, waits, and finishes."""
    limits = ghsim.Limits(content_per_minute=3)
    with ghsim.serve(ghsim.GitHubSim(clock=ghsim.ScaledClock(600.0), limits=limits)) as sim:
        out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
        report = run(fleet, sim, out, ledger, limits=(Limit("generous", 10_000, 60.0, True),))
        assert report.ok, [v.line() for v in report.verdicts]
        (outcome,) = report.outcomes
        assert outcome.rate_limited >= 1
        assert sim.count(status=403) == outcome.rate_limited
        assert sim.busiest(60.0, content=True) <= 3
        assert recorded(ledger) == published(sim)
        assert len(published(sim)) == 4


def test_throttled_under_the_limits_no_rate_limit_answer_comes(fleet: Fleet, tmp_path: Path) -> None:
    limits = ghsim.Limits(primary_per_hour=40, content_per_minute=3, content_per_hour=20)
    with ghsim.serve(ghsim.GitHubSim(clock=ghsim.ScaledClock(60.0), limits=limits, secondary_status=429)) as sim:
        out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
        client_limits = (Limit("primary", 40, 3600.0), Limit("minute", 3, 60.0, True), Limit("hour", 20, 3600.0, True))
        report = run(fleet, sim, out, ledger, limits=client_limits)
        assert report.ok
        assert sim.count(status=403) == sim.count(status=429) == 0
        assert report.outcomes[0].throttled_s > 0  # it had to wait: 8 content-creating requests at 3 a minute
        assert sim.busiest(60.0, content=True) <= 3
        assert sim.busiest(3600.0) <= 40


def test_a_full_release_refuses_that_wheel_only(fleet: Fleet, sim: ghsim.GitHubSim, tmp_path: Path) -> None:
    for i in range(ghsim.ASSET_CAP):
        sim.put_asset("demo_d-0.1.0-cu130-e0", f"filler-{i}.whl", b"x")
    out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
    report = run(fleet, sim, out, ledger)
    got = verdicts(report)
    assert got.pop("demo_d") is Verdict.REFUSED
    assert set(got.values()) == {Verdict.PUBLISHED}
    (full,) = [v for v in report.verdicts if v.verdict is Verdict.REFUSED]
    assert "1000 assets" in full.message
    assert "tag" in full.message
    assert len(sim.asset_names("demo_d-0.1.0-cu130-e0")) == ghsim.ASSET_CAP  # nothing sent there
    assert fleet.first["demo_d"].name not in recorded(ledger)


def test_each_record_is_pushed_while_another_writer_pushes(fleet: Fleet, sim: ghsim.GitHubSim, tmp_path: Path) -> None:
    """The ledger lives in a clone of a bare remote; after every upload another writer (another
    publish job) pushes a record of its own, so each of this run's pushes is first rejected, then
    rebased (the two appends settled by the ledger's merge) and pushed. Nothing is lost."""
    from farm.provenance.ledgerline import dumps_entry
    from farm.publish.ledgerpush import commit_and_push
    from tests.support.gitremote import append, bare_remote, clone, git, pushed_ledger
    from tests.support.ledgermaker import make_entry

    remote = bare_remote(tmp_path / "remote.git")
    ours, theirs = clone(remote, tmp_path / "ours"), clone(remote, tmp_path / "theirs")
    other: list[str] = []

    def another_writer_pushes(tag: str, name: str) -> None:
        entry = make_entry(python=f"cp3{len(other) + 20}")
        other.append(entry["filename"])
        append(theirs, dumps_entry(entry) + "\n")
        commit_and_push(theirs, theirs / "ledger.jsonl", f"another writer {len(other)}")

    sim.on_upload = another_writer_pushes
    out = batch_dir(list(fleet.first.values()), tmp_path / "out")
    report = run(fleet, sim, out, ours / "ledger.jsonl", push_ledger="origin")
    assert report.ok, report.push_error
    assert report.push_error is None, report.push_error
    assert report.pushes == 4  # one commit per wheel
    assert git(remote, "log", "--format=%s", "main").count("ledger: ") == 4
    (tmp_path / "pushed.jsonl").write_bytes(pushed_ledger(ours, "ledger.jsonl"))
    assert recorded(tmp_path / "pushed.jsonl") == published(sim)
    assert {e["filename"] for _, e in iter_entries(tmp_path / "pushed.jsonl")} >= set(other)
    assert len(other) == 4
    assert git(ours, "status", "--porcelain", "--untracked-files=no").strip() == ""  # all committed


def test_a_second_github_target_records_its_wheels_in_one_ledger_rewrite(fleet: Fleet, sim: ghsim.GitHubSim,
                                                                         tmp_path: Path) -> None:
    """Every wheel of a batch already in the ledger reaches a second GitHub target (here the same
    simulated repository under another target name, so each asset is found there with the
    ledger's sha256): each is recorded, and the ledger is rewritten once for the pass, not once
    per wheel."""
    out, ledger = batch_dir(list(fleet.first.values()), tmp_path / "out"), tmp_path / "ledger.jsonl"
    assert run(fleet, sim, out, ledger).ok
    book = LedgerBook.open(ledger)
    mirror = GithubSettings("mirror", sim.repo, api_url=sim.base.rstrip("/"), uploads_url=sim.base + "uploads")

    def client(s: GithubSettings) -> ghrest.Client:
        return github_client(s, {"GH_TOKEN": ghsim.TOKEN}, clock=sim.clock,
                             throttle=Throttle(github_limits(), clock=sim.clock))

    report = upload(out, [mirror], ledger=ledger, github_client=client, reader="native", book=book,
                    derive=derive_from_config(load_config(fleet.root)))
    assert report.ok, [v.line() for v in report.verdicts]
    assert set(verdicts(report).values()) == {Verdict.PRESENT}
    assert report.recorded == len(PACKAGES)
    assert book.rewrites == 1
    assert [[p["target"] for p in e["published"]] for _, e in iter_entries(ledger)] == [["github", "mirror"]] * 4
