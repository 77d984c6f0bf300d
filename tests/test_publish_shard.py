"""``farm publish-shard``: a cell's small artifact read as ledger fragments only, flat, small
(anything else refuses the cell: an artifact is another job's output, checked, not believed); and
a shard published end to end from a run's artifacts on the loopback GitHub."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.commands.publish_shard import MAX_BUNDLE_BYTES, MAX_FRAGMENT_BYTES, _extract_fragments
from farm.errors import UsageError
from farm.publish import ghrest
from farm.publish.attestation import MAX_SUBJECTS, SUBJECT_PARTS
from farm.schedule.stream import HANDED_ON, CellVerdict
from tests.support import ghsim
from tests.support.ledgermaker import make_entry
from tests.support.wheelmaker import stamped_wheel

NAME = "a-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl.ledger.json"


def bundle(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_a_rest_shard_its_attest_job_cannot_name_is_refused_before_anything_is_published(tmp_path: Path,
                                                                                           capsys) -> None:
    """More cells handed on than SUBJECT_PARTS attestations name (a wave past build.yml's bound):
    exit 2 before the checkout, the token or any artifact is touched, saying what to do."""
    ids = [f"c{i}" for i in range(SUBJECT_PARTS * MAX_SUBJECTS // 2 + 1)]
    plan = tmp_path / "wave-plan.json"
    plan.write_text(json.dumps({"cells": [{"id": i} for i in ids], "matrix": {"build": [], "link": []}}))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "published-0.jsonl").write_text(
        "".join(json.dumps(CellVerdict(i, "a", HANDED_ON).to_json()) + "\n" for i in ids))
    subjects = tmp_path / "subjects-rest.txt"
    assert main(["publish-shard", "--plan", str(plan), "--shard", "rest", "--reports", str(reports), "--run-id", "1",
                 "--report", str(tmp_path / "published-rest.jsonl"), "--subjects", str(subjects),
                 "--root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert (f"{len(ids)} cells to publish: their wheels' {2 * len(ids)} subjects are more than the 4 attestations "
            "of 1024 subjects publish-shard.yml's attest job makes") in err
    assert "pass a smaller --max-shards to farm matrix in build.yml" in err
    assert not subjects.exists()
    assert not (tmp_path / "published-rest.jsonl").exists()


def test_fragments_are_extracted_flat(tmp_path: Path) -> None:
    out = tmp_path / "cell"
    out.mkdir()
    assert _extract_fragments(bundle(tmp_path / "b.zip", {NAME: b"{}"}), out) == [NAME]
    assert (out / NAME).read_bytes() == b"{}"


@pytest.mark.parametrize("members", [
    {"../" + NAME: b"{}"},  # a path out of the folder
    {"sub/" + NAME: b"{}"},
    {"a.whl": b"PK"},  # a wheel belongs in its own artifact
    {NAME: b"x" * (MAX_FRAGMENT_BYTES + 1)},
    {f"{i}{NAME}": b"{}" for i in range(9)},
])
def test_anything_else_refuses_the_cell(tmp_path: Path, members: dict[str, bytes]) -> None:
    out = tmp_path / "cell"
    out.mkdir()
    with pytest.raises(UsageError):
        _extract_fragments(bundle(tmp_path / "b.zip", members), out)
    assert list(out.iterdir()) == []


def test_not_a_zip_refuses_the_cell(tmp_path: Path) -> None:
    (tmp_path / "b.zip").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a zip"):
        _extract_fragments(tmp_path / "b.zip", tmp_path)


# -- `farm publish-shard` against the loopback GitHub ----------------------------------------------------
# GitHub cannot be reached from the test machine: tests/support/ghsim.py simulates its documented Actions and
# Releases endpoints on 127.0.0.1 (a run's artifacts listed 100 a page, each downloaded through a 302 to
# a signed storage URL that refuses a token, 410 for an expired one; release assets with 422 on a
# duplicate name). The branch is a bare git remote. `farm publish-shard` runs with the environment Actions
# gives build-shard.yml's publish job (in this process: its command line and environment are the job's).

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("torch_scatter", "torch_cluster")


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@dataclass(frozen=True)
class Published:
    """What a `farm publish-shard` said: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Run:
    sim: ghsim.GitHubSim
    root: Path  # the publish job's checkout
    remote: Path
    plan: Path
    run_id: int
    cells: list[dict[str, Any]]
    work: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def publish(self, shard: str = "0", *extra: str, token: str | None = ghsim.TOKEN, service: bool = False,
                ) -> Published:
        """The publish job's command (one publisher: a share of the token would keep this job to
        a few content-creating requests a minute, in real time here). ``service``: in the run,
        with its runtime token, as build-shard.yml's publish job (the artifact service)."""
        env = {"GITHUB_API_URL": self.sim.base.rstrip("/"), "GITHUB_REPOSITORY": self.sim.repo,
               "GIT_AUTHOR_NAME": "farm-bot", "GIT_AUTHOR_EMAIL": "bot@example.invalid",
               "GIT_COMMITTER_NAME": "farm-bot", "GIT_COMMITTER_EMAIL": "bot@example.invalid"}
        if service:
            env.update(ACTIONS_RUNTIME_TOKEN=self.sim.runtime_token(self.run_id),
                       ACTIONS_RESULTS_URL=self.sim.base + "results/", GITHUB_RUN_ID=str(self.run_id))
        if token is not None:
            env["GH_TOKEN"] = token
        self.capsys.readouterr()
        with self.monkeypatch.context() as job:
            for name in ("GH_TOKEN", "GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_RESULTS_URL"):
                job.delenv(name, raising=False)
            for name, value in env.items():
                job.setenv(name, value)
            code = main(["publish-shard", "--plan", str(self.plan), "--shard", shard, "--run-id", str(self.run_id),
                         "--root", str(self.root), "--target", "github", "--publishers", "1", "--push-ledger",
                         "origin", "--scratch", str(self.work / "scratch"),
                         "--report", str(self.work / f"published-{shard}.jsonl"), *extra])
        said = self.capsys.readouterr()
        return Published(code, said.out, said.err)

    def report(self, shard: str = "0") -> dict[str, dict[str, Any]]:
        lines = (self.work / f"published-{shard}.jsonl").read_text().splitlines()
        return {v["id"]: v for v in map(json.loads, lines)}

    def remote_ledger(self) -> list[dict[str, Any]]:
        files = git(self.work, "--git-dir", str(self.remote), "ls-tree", "-r", "--name-only", "main", "ledger")
        text = "".join(git(self.work, "--git-dir", str(self.remote), "show", f"main:{name}")
                       for name in files.split() if name.endswith(".jsonl"))
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def zipped(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def wave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Run]:
    sim = ghsim.GitHubSim(repo="farm-wheels/farm")  # the releases of the repository the run is in
    with ghsim.serve(sim):
        seed = tmp_path / "seed"
        seed.mkdir()
        defaults = (REPO / "_defaults.yml").read_text()
        line = "    repository: farm-wheels/farm-wheels   # token from GH_TOKEN (docs/upload.md)\n"
        assert line in defaults
        defaults = defaults.replace(line, f"    repository: {sim.repo}\n    api_url: {sim.base.rstrip('/')}\n"
                                          f"    uploads_url: {sim.base}uploads\n")
        (seed / "_defaults.yml").write_text(defaults)
        shutil.copytree(REPO / "packages", seed / "packages")
        shutil.copytree(REPO / "examples", seed / "examples")
        shutil.copytree(REPO / "ledger", seed / "ledger")  # the repository's ledger folder, empty
        remote = tmp_path / "remote.git"
        git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
        git(seed, "init", "-q", "-b", "main")
        git(seed, "add", "-A")
        git(seed, "-c", "user.name=m", "-c", "user.email=m@example.invalid", "commit", "-q", "-m", "recipes")
        git(seed, "remote", "add", "origin", str(remote))
        git(seed, "push", "-q", "origin", "main")
        root = tmp_path / "checkout"
        git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(root))
        plan = tmp_path / "wave-plan.json"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["matrix", *PACKAGES, "--root", str(root), "--no-lint", "--cuda", "12.8", "--torch", "2.8",
                         "--platform", "linux_x86_64", "--max-shards", "8", "--plan", str(plan)]) == 0
        cells = json.loads(plan.read_text())["cells"]
        run = sim.add_run("build.yml", "main", "in_progress")
        yield Run(sim, root, remote, plan, run.id, cells, tmp_path, monkeypatch, capsys)


def build(wave: Run, cell: dict[str, Any]) -> Path:
    """The build job's artifacts of ``cell``: its wheel unzipped under its name, its fragment zipped."""
    out = wave.work / "built" / cell["id"]
    entry = make_entry(cell["package"], cell["version"], cuda=cell["cuda"], torch=cell["torch"],
                       python=cell["python_tag"], platform=cell["platform"], build_epoch=cell["build_epoch"],
                       arch=cell["arch_list"], filename=cell["wheel"])
    wheel = stamped_wheel(out, entry, run_id=str(wave.run_id))
    wave.sim.add_artifact(wave.run_id, wheel.name, wheel.read_bytes())
    fragment = next(out.glob("*.ledger.json"))
    wave.sim.add_artifact(wave.run_id, f"wheels-{cell['id']}", zipped({fragment.name: fragment.read_bytes()}))
    return wheel


def test_a_shard_is_published_from_the_runs_artifacts(wave: Run) -> None:
    cells = wave.cells
    assert len(cells) >= 6
    built = {c["id"]: build(wave, c) for c in cells[:-1]}  # the last cell's build failed: no artifact
    # a compile shard's objects and the plan: artifacts enough for a second page of the listing
    for i in range(120):
        wave.sim.add_artifact(wave.run_id, f"objects-x-{i}", b"o")
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    assert {k: v["status"] for k, v in report.items()} == {
        **dict.fromkeys(built, "published"), cells[-1]["id"]: "failed"}
    assert sorted(a for tag in wave.sim.releases for a in wave.sim.asset_names(tag)) == sorted(
        w.name for w in built.values())
    # what each wheel's asset holds is the artifact's bytes
    for wheel in built.values():
        [asset] = [a for r in wave.sim.releases.values() for a in r.assets.values() if a.name == wheel.name]
        assert asset.data == wheel.read_bytes()
    # the ledger on the branch records every published wheel, with where it went
    ledger = {e["filename"]: e for e in wave.remote_ledger()}
    assert set(ledger) == {w.name for w in built.values()}
    assert all(e["published"][0]["target"] == "github" for e in ledger.values())
    # the listing was read once, in pages of 100; each artifact through a redirect to storage
    listings = [r for r in wave.sim.log if r.path.endswith(f"/runs/{wave.run_id}/artifacts")]
    assert len(listings) == 2
    downloads = [r for r in wave.sim.log if r.path.startswith("/_storage/artifacts/")]
    assert len(downloads) == 2 * len(built)
    assert all(r.status == 200 for r in downloads)
    assert not list((wave.work / "scratch").iterdir())  # each cell's download deleted after it

    # run again (a re-run of the job): every wheel is found on its release, nothing is sent twice
    uploads = wave.sim.count(content=True)
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert wave.sim.count(content=True) == uploads


def test_an_expired_or_hostile_artifact_is_that_cells_verdict(wave: Run) -> None:
    good, expired, hostile, oversized, notwheel = wave.cells[:5]
    build(wave, good)
    build(wave, expired)
    for a in wave.sim.artifacts.values():
        if a.name == expired["wheel"]:
            a.expired = True  # past its retention between the build and the publish
    # a fragment artifact carrying a path out of the scratch folder
    wave.sim.add_artifact(wave.run_id, f"wheels-{hostile['id']}",
                          zipped({"../" + hostile["wheel"] + ".ledger.json": b"{}"}))
    # a fragment artifact over the cap: refused before a byte is downloaded
    wave.sim.add_artifact(wave.run_id, f"wheels-{oversized['id']}", b"x" * (MAX_BUNDLE_BYTES + 1))
    # a "wheel" that is not a zip
    build(wave, notwheel)
    for a in wave.sim.artifacts.values():
        if a.name == notwheel["wheel"]:
            a.data = b"not a zip at all"
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    assert report[good["id"]]["status"] == "published"
    assert report[expired["id"]]["status"] == "error"
    assert "expired" in report[expired["id"]]["detail"]
    assert report[hostile["id"]]["status"] == "error"
    assert "other than ledger fragments" in report[hostile["id"]]["detail"]
    assert report[oversized["id"]]["status"] == "error"
    assert "more than" in report[oversized["id"]]["detail"]
    assert report[notwheel["id"]]["status"] == "error"
    assert "not a wheel" in report[notwheel["id"]]["detail"]
    assert [r for r in wave.sim.log if r.path == f"/_storage/artifacts/{oversized['id']}"] == []
    assert wave.sim.asset_names(next(iter(wave.sim.releases))) == [good["wheel"]]
    assert "Traceback" not in proc.stderr


def test_publish_shard_without_a_token_says_so(wave: Run) -> None:
    proc = wave.publish(token=None)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "GH_TOKEN or GITHUB_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert wave.sim.log == []


def test_artifact_download_is_capped_and_expired_is_410(wave: Run, tmp_path: Path) -> None:
    client = ghrest.actions_client(wave.sim.repo, {"GITHUB_API_URL": wave.sim.base.rstrip("/"),
                                                   "GITHUB_TOKEN": ghsim.TOKEN})
    wave.sim.add_artifact(wave.run_id, "big", b"y" * 5000)
    gone = wave.sim.add_artifact(wave.run_id, "old", b"z", expired=True)
    listed = {a.name: a for a in client.artifacts(str(wave.run_id))}
    assert listed["old"].expired
    assert client.download_artifact(listed["big"], tmp_path / "big", max_bytes=5000)
    assert (tmp_path / "big").read_bytes() == b"y" * 5000
    with pytest.raises(ghrest.GithubApiError, match="more than"):
        client.download_artifact(listed["big"], tmp_path / "big2", max_bytes=4999)
    # listed smaller than it is (a size GitHub misreports): the stream itself stops at the cap
    lying = ghrest.Artifact(listed["big"].id, "big", 10, False)
    with pytest.raises(ghrest.GithubApiError, match="4,999"):
        client.download_artifact(lying, tmp_path / "big3", max_bytes=4999)
    assert not (tmp_path / "big3").exists()
    with pytest.raises(ghrest.GithubApiError, match="410") as info:
        client.download_artifact(ghrest.Artifact(gone.id, "old", 1, False), tmp_path / "old", max_bytes=10)
    assert info.value.status == 410


def test_a_listing_that_fails_fails_the_shards_cells_at_once(wave: Run) -> None:
    for cell in wave.cells[:3]:
        build(wave, cell)
    wave.run_id = 999_999  # a run GitHub does not know: 404
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    assert {v["status"] for v in report.values()} == {"error"}
    assert all("HTTP 404" in v["detail"] for v in report.values())
    assert len([r for r in wave.sim.log if "/artifacts" in r.path]) == 1  # asked once, not once a cell


def rest_requests(sim: ghsim.GitHubSim) -> int:
    return sum(r.rest for r in sim.log)


def test_in_its_run_a_shard_costs_at_most_1_2_rest_requests_per_asset(wave: Run) -> None:
    """Inside the run that built them, the cells' artifacts come from the run's artifact service
    (the job's runtime token): no REST request. The job reads each release once and keeps it
    current; each asset costs its upload."""
    built = {c["id"]: build(wave, c) for c in wave.cells}
    proc = wave.publish(service=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {v["status"] for v in wave.report().values()} == {"published"}
    assets = sum(len(r.assets) for r in wave.sim.releases.values())
    assert assets == len(built) >= 6
    # exactly the job's plan: an upload per asset, a release created per tag (none recorded yet);
    # at a shard's scale (256 cells, ~30 releases) that is under 1.2 per asset (tests/test_drain.py)
    assert rest_requests(wave.sim) == assets + len(wave.sim.releases)
    assert not [r for r in wave.sim.log if "/actions/" in r.path]  # no REST listing, no REST download
    service = [r for r in wave.sim.log if r.path.startswith(ghsim.ARTIFACT_SERVICE)]
    assert len(service) == 1 + 2 * len(built)  # one listing, one signed URL per artifact
    assert "REST request(s) (1." in proc.stderr or "REST request(s) (0." in proc.stderr, proc.stderr


def test_a_job_out_of_time_hands_its_cells_on_and_the_rest_job_publishes_them(wave: Run) -> None:
    """A job that started long ago stops before its deadline: nothing is lost, nothing is
    rebuilt; the run's `rest` publish job publishes what it handed on."""
    built = {c["id"]: build(wave, c) for c in wave.cells}
    started = time.time() - (360 - 16) * 60  # 16 of its 360 minutes left, 15 kept for the last push:
    # a minute, not the two a cell is expected to take before one is timed
    proc = wave.publish("0", "--job-started", str(started), service=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    handed = [k for k, v in report.items() if v["status"] == "handed-on"]
    assert handed == list(built), report
    assert all("deadline" in report[k]["detail"] for k in handed)
    assert f"{len(handed)} handed on" in proc.stderr
    reports = wave.work / "reports"
    reports.mkdir()
    shutil.copy(wave.work / "published-0.jsonl", reports / "published-0.jsonl")
    proc = wave.publish("rest", "--reports", str(reports), service=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(wave.report("rest")) == set(handed)
    assert {v["status"] for v in wave.report("rest").values()} == {"published"}
    assert {e["filename"] for e in wave.remote_ledger()} == {w.name for w in built.values()}
    # read together, every cell is published: none goes back to the queue
    from farm.schedule.stream import read_reports
    best = read_reports([reports / "published-0.jsonl", wave.work / "published-rest.jsonl"])
    assert {v.status for v in best.values()} == {"published"}


def test_a_retry_after_of_3000_s_hands_the_rest_on_at_once(wave: Run) -> None:
    """Another client spends the token's hour of content-creating requests: GitHub answers each
    upload 403 with ``Retry-After`` near an hour. Obeying it six times is five hours of the job;
    past its cap on rate-limit waits the job hands the rest on and ends in seconds."""
    for cell in wave.cells[:3]:
        build(wave, cell)
    wave.sim.limits = ghsim.Limits(content_per_hour=1)
    wave.sim.log.append(ghsim.Request(wave.sim.clock.now(), "POST", "/elsewhere", 201))
    began = time.monotonic()
    proc = wave.publish(service=True)
    assert time.monotonic() - began < 120
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    assert {report[c["id"]]["status"] for c in wave.cells[:3]} == {"handed-on"}
    assert "cap" in report[wave.cells[0]["id"]]["detail"]
    assert wave.sim.count(status=403) == 1  # asked once; the 3,600 s it named were not waited


def test_a_cell_killed_or_failed_is_recorded_and_the_next_plan_shards_or_refuses_it(wave: Run, capsys) -> None:
    """The run's last publish job reads GitHub's account of the run's jobs: a cell killed at the
    6 h limit and a cell whose build failed are recorded with the time they ran; a cancelled one
    is not. The next plan refuses the killed one with the reason (these recipes cannot shard) and
    builds the failed one again; after its job's third failure it is refused with the count, and
    `--retry-failed` schedules it once more."""
    good, killed, failed, cancelled = wave.cells[:4]
    build(wave, good)
    wave.sim.add_job(wave.run_id, f"build-0 / {good['id']}", "success", 20)
    wave.sim.add_job(wave.run_id, f"build-0 / {killed['id']}", "cancelled", 360)
    wave.sim.add_job(wave.run_id, f"build-0 / {failed['id']}", "failure", 12)
    wave.sim.add_job(wave.run_id, f"build-0 / {cancelled['id']}", "cancelled", 3)
    assert wave.publish(service=True).returncode == 0
    reports = wave.work / "reports"
    reports.mkdir()
    shutil.copy(wave.work / "published-0.jsonl", reports / "published-0.jsonl")
    proc = wave.publish("rest", "--reports", str(reports), service=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 cell(s) recorded as attempts" in proc.stderr
    head = wave.work / "head"
    git(wave.work, "clone", "-q", "-b", "main", str(wave.remote), str(head))
    records = [json.loads(line) for path in sorted((head / "ledger").glob("*/attempts.jsonl"))
               for line in path.read_text().splitlines()]
    assert {(r["cell"], r["outcome"], r["elapsed_s"]) for r in records} == {
        (killed["id"], "killed", 360 * 60.0), (failed["id"], "failed", 12 * 60.0)}
    plan = wave.work / "next.json"

    def next_plan(*extra: str) -> dict[str, Any]:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["matrix", *PACKAGES, "--root", str(head), "--no-lint", "--cuda", "12.8", "--torch", "2.8",
                         "--platform", "linux_x86_64", "--plan", str(plan), *extra]) == 0
        return dict(json.loads(plan.read_text()))

    nxt = next_plan()
    refused = {r["id"]: r["reason"] for r in nxt["refused_cells"]}
    assert "killed at GitHub's job limit after 6.0 h" in refused[killed["id"]]
    scheduled = {c["id"] for c in nxt["cells"]}
    assert {cancelled["id"], failed["id"]} <= scheduled  # a failure is retried as it was
    assert good["id"] not in scheduled
    (attempts,) = [p for p in (head / "ledger").glob("*/attempts.jsonl") if failed["id"] in p.read_text()]
    line = next(x for x in attempts.read_text().splitlines() if failed["id"] in x)
    attempts.write_text(attempts.read_text() + line + "\n" + line + "\n")  # two more failed builds
    refused = {r["id"]: r["reason"] for r in next_plan()["refused_cells"]}
    assert f"its build failed 3 times (3 of them in {failed['id']}), last in run" in refused[failed["id"]]
    assert failed["id"] in {c["id"] for c in next_plan("--retry-failed")["cells"]}


def test_a_cell_publishes_only_its_own_wheel(wave: Run) -> None:
    """A cp312 cell's artifact that holds the cp311 cell's wheel (its fragment names it) was
    published and counted as the cp312 cell built: now it is refused, both cells named, and the
    cp311 wheel is published once, by its own cell."""
    c311 = next(c for c in wave.cells if c["python_tag"] == "cp311")
    c312 = next(c for c in wave.cells if c["python_tag"] == "cp312" and c["package"] == c311["package"])
    wheel = build(wave, c311)
    fragment = next((wave.work / "built" / c311["id"]).glob("*.ledger.json"))
    wave.sim.add_artifact(wave.run_id, f"wheels-{c312['id']}", zipped({fragment.name: fragment.read_bytes()}))
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = wave.report()
    assert report[c312["id"]]["status"] == "refused"
    assert report[c312["id"]]["detail"] == (f"{wheel.name} was built for cell {c311['id']}, not for cell "
                                            f"{c312['id']}: a cell publishes only its own wheel")
    assert report[c311["id"]]["status"] == "published"
    assert [a for tag in wave.sim.releases for a in wave.sim.asset_names(tag)] == [wheel.name]
    assert [e["filename"] for e in wave.remote_ledger()] == [wheel.name]
    assert "Traceback" not in proc.stderr


def test_the_drain_simulation_asks_what_the_publish_job_asks(wave: Run) -> None:
    """farm simulate's publish jobs send, per cell, the REST calls this command sends: the
    simulation's bill of requests is the real job's (farm/simulate/drain.py:cell_requests)."""
    from farm.simulate.drain import cell_requests
    cells = wave.cells[:5]
    for c in cells:
        build(wave, c)
    proc = wave.publish()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = [r for r in wave.sim.log if r.rest]
    listing = [r for r in api if r.path.endswith(f"/runs/{wave.run_id}/artifacts")]
    seen: set[tuple[str, ...]] = set()
    expected: list[str] = []
    for c in cells:  # one release per package, version, CUDA line and epoch (the default tag)
        tag = (c["package"], c["version"], c["cuda"], str(c["build_epoch"]))
        expected += cell_requests(tag in seen, False, 0, service=False)  # outside the run: REST artifacts
        seen.add(tag)
    assert len(listing) == 1
    assert sorted(r.method for r in api if r not in listing) == sorted(expected)
