"""The GitHub workflows: schema-valid (check-jsonschema's vendored GitHub schema) and consistent
with the matrix's sharding (more than 256 cells run as several shards with nothing dropped), with
publishing where the wheels are (no job holds a wave), a cancel that stops the chain, actions on
current majors pinned by commit, no permission a job does not use, and nothing zizmor (offline) or
actionlint with shellcheck finds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.publish.attestation import MAX_SUBJECTS, SUBJECT_PARTS
from farm.schedule.slices import SHARD_SIZE

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
FOLDER = WORKFLOWS[0].parent
# The Node 24 majors (Node 20 is gone from the runners); the pins below are these tags' commits.
CURRENT = {"actions/checkout": "v7", "actions/setup-python": "v7", "actions/upload-artifact": "v7",
           "actions/download-artifact": "v8", "actions/cache": "v5", "actions/github-script": "v8",
           "actions/attest-build-provenance": "v4"}


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((FOLDER / name).read_text())
    return doc


def steps_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def all_jobs() -> list[tuple[str, str, dict[str, Any]]]:
    return [(p.name, name, job) for p in WORKFLOWS for name, job in yaml.safe_load(p.read_text())["jobs"].items()]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_is_schema_valid(path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _linter(name: str) -> Path:
    """A workflow linter the test extra installs beside this interpreter (pinned there, so its
    verdict moves only when the pin does)."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        reason = f"{name} is not installed here: pip install -e '.[test]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI the workflow linters must run: {reason}")
        pytest.skip(reason)
    return path


def _zizmor(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(_linter("zizmor")), "--offline", "--no-progress", "--format", "plain",
                           *sorted(str(p) for p in folder.glob("*.yml"))],
                          capture_output=True, text=True, check=False, cwd=REPO)


def _actionlint(folder: Path) -> subprocess.CompletedProcess[str]:
    """actionlint over a folder's workflows, with the shellcheck beside it for every `run:`."""
    shellcheck = _linter("shellcheck")
    return subprocess.run([str(_linter("actionlint")), "-shellcheck", str(shellcheck), "-pyflakes", "",
                           *sorted(str(p) for p in folder.glob("*.yml"))],
                          capture_output=True, text=True, check=False, cwd=REPO)


def test_zizmor_finds_nothing() -> None:
    """zizmor's offline audits (its default persona); a finding kept on purpose is suppressed in
    the workflow with its reason (`# zizmor: ignore[audit] why`)."""
    proc = _zizmor(FOLDER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_actionlint_with_shellcheck_finds_nothing() -> None:
    proc = _actionlint(FOLDER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_the_linters_find_what_they_are_run_for(tmp_path: Path) -> None:
    """The same runs over a copy of build.yml with the flaws they were added for put back: an
    expression in a `run:` script, `secrets: inherit`, a word-split variable."""
    text = (FOLDER / "build.yml").read_text()
    bad = text.replace('--ref "$REF"', '--ref "${{ github.ref_name }}"', 1)
    bad = bad.replace('read -ra args <<< "$PACKAGES"', "args=($PACKAGES)", 1)
    bad = re.sub(r"    secrets:  #[^\n]*\n(      [A-Z_]+: [^\n]*\n)+", "    secrets: inherit\n", bad, count=1)
    assert bad.count("secrets: inherit") == 1
    assert "args=($PACKAGES)" in bad
    assert 'github.ref_name }}"' in bad
    (tmp_path / "build.yml").write_text(bad)
    for called in ("build-shard.yml", "publish-shard.yml"):
        shutil.copy(FOLDER / called, tmp_path / called)
    zizmor = _zizmor(tmp_path)
    assert zizmor.returncode != 0
    assert "template-injection" in zizmor.stdout
    assert "secrets-inherit" in zizmor.stdout
    actionlint = _actionlint(tmp_path)
    assert actionlint.returncode != 0
    assert "SC2206" in actionlint.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_current_majors_pinned_by_commit(path: Path) -> None:
    for line in path.read_text().splitlines():
        m = re.search(r"uses: (actions/[\w-]+)@(\S+)(.*)", line)
        if m is None:
            continue
        action, ref, comment = m[1], m[2], m[3]
        assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{path.name}: {action}@{ref} is not pinned by commit"
        tag = re.search(r"#\s*(v\d+)(\.\d+)*", comment)
        assert tag, f"{path.name}: {action}@{ref} has no tag comment"
        assert tag[1] == CURRENT[action], f"{path.name}: {action} is {tag[1]}, the current major is {CURRENT[action]}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_permission_by_default_and_only_granted_per_job(path: Path) -> None:
    flow = yaml.safe_load(path.read_text())
    assert flow["permissions"] == {}, f"{path.name}: permissions must default to none"
    for name, job in flow["jobs"].items():
        grants = job.get("permissions", {})
        assert isinstance(grants, dict)
        assert set(grants.values()) <= {"read", "write"}
        # a job that checks the code out asks for it
        if any(s.get("uses", "").startswith("actions/checkout@") for s in job.get("steps", [])):
            assert grants.get("contents") in ("read", "write"), f"{path.name}:{name}"


def test_writes_are_granted_only_where_something_is_published_or_dispatched() -> None:
    writers = {(f, n): sorted(k for k, v in j.get("permissions", {}).items() if v == "write")
               for f, n, j in all_jobs() if "write" in j.get("permissions", {}).values()}
    assert writers == {
        ("publish-shard.yml", "publish"): ["contents"],
        ("publish-shard.yml", "attest"): ["attestations", "id-token"],
        ("publish-shard.yml", "record-attestations"): ["contents"],
        ("build.yml", "chain"): ["actions"],
        ("build.yml", "next-wave"): ["actions"],
        # the calls of publish-shard.yml grant what its publish and attest jobs use (a called
        # workflow narrows, never widens); the calls of build-shard.yml grant no write
        **{("build.yml", f"publish-{i}"): ["attestations", "contents", "id-token"] for i in (*range(8), "link", "rest")},
    }
    assert all(load("build.yml")["jobs"][n]["permissions"] == {"contents": "read"}
               for n in (*(f"build-{i}" for i in range(8)), "link"))
    # the jobs that run the packages' build code get no write and keep no credentials
    build = load("build-shard.yml")["jobs"]["build"]
    assert build["permissions"] == {"contents": "read"}
    checkout = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_a_cancel_stops_the_chain(path: Path) -> None:
    """``always()`` runs after a cancel; ``!cancelled()`` does not."""
    assert "always()" not in path.read_text()


def test_build_workflow_passes_only_shard_indices() -> None:
    build = load("build.yml")
    jobs = build["jobs"]
    shard_jobs = sorted(name for name in jobs if re.fullmatch(r"build-\d+", name))
    matrix_step = next(s for s in jobs["matrix"]["steps"] if s.get("id") == "matrix")
    max_shards_flag = re.search(r"--max-shards (\d+)", matrix_step["run"])
    assert max_shards_flag, matrix_step["run"]
    max_shards = int(max_shards_flag[1])
    assert len(shard_jobs) == max_shards
    # the matrix job outputs counts, never the entries (those are in the plan artifact)
    assert set(jobs["matrix"]["outputs"]) == {"commit", "shard_count", "lint_failed", "link_count", "deferred"}
    upload = next(s for s in jobs["matrix"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "wave-plan"
    assert "--plan wave-plan.json" in matrix_step["run"]
    for i in range(max_shards):
        job = jobs[f"build-{i}"]
        assert job["uses"] == "$/.github/workflows/build-shard.yml"  # GitHub's self-repository form
        assert set(job["secrets"]) == {"FARM_CACHE_KEY", "SCCACHE_AWS_ACCESS_KEY_ID", "SCCACHE_AWS_SECRET_ACCESS_KEY"}
        assert job["with"]["shard"] == str(i)
        assert job["if"] == f"${{{{ !cancelled() && needs.matrix.outputs.shard_count > {i} }}}}"
        assert job["with"]["commit"] == "${{ needs.matrix.outputs.commit }}"
    assert jobs["link"]["with"]["shard"] == "link"
    assert "link_count > 0" in jobs["link"]["if"]
    assert set(jobs["link"]["needs"]) == {"matrix", *shard_jobs}  # the builds, not their publishing
    for i in (*range(max_shards), "link"):  # each shard published once its builds ended
        job = jobs[f"publish-{i}"]
        assert job["uses"] == "$/.github/workflows/publish-shard.yml"
        assert set(job["needs"]) == {"matrix", f"build-{i}" if i != "link" else "link"}
        assert set(job["secrets"]) == {"FARM_CACHE_KEY"}
        assert job["with"]["shard"] == str(i)
    # the matrix reads the ledger at the branch head, where the publish jobs push it, after it
    # listed the runs still in progress (a run ending in between: its records are in the checkout)
    steps = jobs["matrix"]["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.ref }}"
    held = next(s for s in steps if s.get("uses", "").startswith("actions/github-script@"))
    assert steps.index(held) < steps.index(checkout)
    assert "status: 'in_progress'" in held["with"]["script"]
    assert "name: 'wave-plan'" in held["with"]["script"]
    assert 'args+=(--hold "${held%.zip}.json")' in matrix_step["run"]
    # the nightly plans nothing while a wave runs (its chain goes on), and the run stays green
    assert "context.eventName === 'schedule' && others.length > 0" in held["with"]["script"]
    assert matrix_step["if"] == upload["if"] == "${{ steps.held.outputs.busy != 'true' }}"
    assert "needs.matrix.outputs.lint_failed != ''" in jobs["lint-verdict"]["if"]
    assert jobs["matrix"]["permissions"] == {"contents": "read", "actions": "read"}


def test_shard_workflow_slices_builds_then_publishes_one_artifact_at_a_time() -> None:
    jobs = {**load("build-shard.yml")["jobs"], **load("publish-shard.yml")["jobs"]}
    slice_step = next(s for s in jobs["slice"]["steps"] if s.get("id") == "slice")
    assert 'nox -s slice -- --plan wave-plan.json --shard "$SHARD" --github-output' in slice_step["run"]
    build = jobs["build"]
    assert build["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.slice.outputs.cells) }}"
    assert build["runs-on"] == "${{ matrix.runner }}"
    assert build["timeout-minutes"] == 360
    assert build["steps"][0]["with"]["ref"] == "${{ inputs.commit }}"
    assert any("nox -s build" in s.get("run", "") for s in build["steps"])
    # the wheel unzipped under its own name (held once on the publisher's disk), its fragment as wheels-<id>
    fragment = next(s for s in build["steps"] if s.get("with", {}).get("name") == "wheels-${{ matrix.id }}")
    assert fragment["with"]["path"] == "wheelhouse/*.ledger.json"
    wheel = next(s for s in build["steps"] if s.get("with", {}).get("archive") is False)
    assert wheel["with"]["path"] == "${{ steps.wheel.outputs.path }}"
    assert "name" not in wheel["with"]
    publish = jobs["publish"]
    # no step downloads the shard's wheels at once: only the plan comes through download-artifact
    downloads = [s for s in publish["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert [d["with"] for d in downloads] == [{"name": "wave-plan", "path": "plan"},
                                              {"pattern": "published-*", "path": "reports"}]  # shard rest only
    run = next(s for s in publish["steps"] if "nox -s publish-shard" in s.get("run", ""))
    assert '--shard "$SHARD"' in run["run"]
    assert "--run-id" in run["run"]
    assert "--report" in run["run"]
    # the publish jobs share the token's limits by the plan's cells; each knows when it started,
    # takes this run's artifacts from the artifact service, and pushes each record as it is made
    assert "--publishers" not in run["run"]
    assert '--job-started "$FARM_JOB_STARTED"' in run["run"]
    clock = next(i for i, s in enumerate(publish["steps"]) if "FARM_JOB_STARTED=$(date +%s)" in s.get("run", ""))
    assert clock <= 1
    expose = next(s for s in publish["steps"] if s.get("uses", "").startswith("actions/github-script@"))
    assert "ACTIONS_RUNTIME_TOKEN" in expose["with"]["script"]
    assert "setSecret" in expose["with"]["script"]
    assert publish["steps"].index(expose) < publish["steps"].index(run)
    assert "--push-ledger origin" in run["run"]
    assert run["env"]["GH_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    report = next(s for s in publish["steps"] if s.get("with", {}).get("name") == "published-${{ inputs.shard }}")
    assert report["if"] == "${{ !cancelled() }}"
    # the publish checkout is the branch head (records go on top of the latest ledger); the token
    # that pushes is in the publish step's environment only, never in the checkout's .git/config
    checkout = publish["steps"][0]
    assert checkout["with"] == {"ref": "${{ github.ref }}", "persist-credentials": False}
    assert 'GIT_CONFIG_KEY_0="http.https://github.com/.extraheader"' in run["run"]


def test_a_waves_artifacts_are_kept_as_long_as_the_plan_sizes_waves_for() -> None:
    """The matrix sizes each wave so that it ends, published, inside the artifacts' retention: the
    workflows keep every artifact a wave's publish and link jobs read that long."""
    step = next(s for s in load("build.yml")["jobs"]["matrix"]["steps"] if s.get("id") == "matrix")
    days = re.search(r"--artifact-retention-days (\d+)", step["run"])
    assert days, step["run"]
    steps = load("build-shard.yml")["jobs"]["build"]["steps"]
    kept = [s["with"]["retention-days"] for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert kept
    assert set(kept) == {int(days[1])}


def test_every_publishing_job_goes_through_publish_shard_so_its_wheels_are_attested() -> None:
    """farm's attestation checks name publish-shard.yml as the signer workflow: a job of
    build.yml that publishes (pushes the ledger, uploads release assets) is a call of it, never
    an inline job, and the only job that runs the publisher is its publish job, which writes the
    subjects its attest job signs."""
    calls = {n for n, j in load("build.yml")["jobs"].items() if j.get("uses") == "$/.github/workflows/publish-shard.yml"}
    assert {n for n, j in load("build.yml")["jobs"].items()
            if j.get("permissions", {}).get("contents") == "write"} == calls
    assert calls == {f"publish-{i}" for i in (*range(8), "link", "rest")}
    runners = [(f, n) for f, n, j in all_jobs() if any("nox -s publish-shard" in s.get("run", "") for s in steps_of(j))]
    assert runners == [("publish-shard.yml", "publish")]
    jobs = load("publish-shard.yml")["jobs"]
    run = next(s["run"] for s in jobs["publish"]["steps"] if "nox -s publish-shard" in s.get("run", ""))
    assert '--subjects "subjects-$SHARD.txt"' in run
    assert jobs["attest"]["needs"] == ["publish"]
    assert jobs["record-attestations"]["needs"] == ["attest"]
    # shard rest reads what the others handed on from their reports, downloaded before it publishes
    steps = jobs["publish"]["steps"]
    reports = next(s for s in steps if s.get("with", {}).get("pattern") == "published-*")
    assert reports["if"] == "${{ inputs.shard == 'rest' }}"
    assert reports["with"]["path"] == "reports"
    assert 'if [ "$SHARD" = rest ]; then reports=(--reports reports); fi' in run
    assert '"${reports[@]}"' in run
    assert steps.index(reports) < next(i for i, s in enumerate(steps) if s.get("run") == run)


def test_sharded_cells_run_compile_jobs_then_link_jobs() -> None:
    """A cell with `sharding: N`: its compile jobs upload objects, its link job (in the link
    shard, after every build shard) downloads them and uploads the wheel as any cell does."""
    steps = load("build-shard.yml")["jobs"]["build"]["steps"]
    build = next(s for s in steps if "nox -s build" in s.get("run", ""))
    assert "--link --shard-dir shards" in build["run"]
    assert '--shard "$SHARD" --shard-dir shards' in build["run"]
    download = next(s for s in steps if s.get("uses", "").startswith("actions/download-artifact"))
    upload_objects = next(s for s in steps if s.get("name") == "Upload this compile shard's objects")
    assert download["with"]["pattern"] == "objects-${{ matrix.id }}.shard-*"
    assert upload_objects["with"]["name"] == "objects-${{ matrix.name }}"
    assert download["with"]["path"] == "shards/${{ matrix.id }}/objects"
    assert upload_objects["with"]["path"] == "shards/${{ matrix.id }}/objects/"
    assert steps.index(download) < steps.index(build) < steps.index(upload_objects)


def test_the_chain_reads_verdicts_and_merges_with_the_waiting_run() -> None:
    build = load("build.yml")
    jobs = build["jobs"]
    # waves overlap; plans are made one at a time, never cancelling the one planning
    assert "concurrency" not in build
    assert jobs["matrix"]["concurrency"] == {"group": "build-plan-${{ github.ref }}", "cancel-in-progress": False}
    # the run's title carries its inputs: `farm chain` reads the waiting run's back from it
    for name in ("package", "cuda", "torch", "python", "platform", "target"):
        assert f"[{name}=${{{{ inputs.{name} ||" in build["run-name"]
    chain = jobs["chain"]
    shard_jobs = {n for n in jobs if re.fullmatch(r"build-\d+", n)}
    publish_jobs = {n for n in jobs if re.fullmatch(r"publish-(\d+|link)", n)}
    assert set(chain["needs"]) == {"matrix", "next-wave", "publish-rest", *publish_jobs}
    # the next wave starts when the build shards' builds end (not the link jobs), while this one
    # links and publishes, once the run before this one has ended: two runs in flight at most
    nxt_wave = jobs["next-wave"]
    assert set(nxt_wave["needs"]) == {"matrix", *shard_jobs}
    assert "needs.matrix.outputs.deferred > 0" in nxt_wave["if"]
    dispatch = next(s["run"] for s in nxt_wave["steps"] if "nox -s chain" in s.get("run", ""))
    wait = re.search(r"--wait-for-runs (\d+)", dispatch)
    assert wait is not None
    assert int(wait.group(1)) < nxt_wave["timeout-minutes"] <= 360  # a wait that runs out ends the job, not GitHub
    # the cells the publish jobs handed on, published after all of them, before the verdicts are read
    rest = jobs["publish-rest"]
    assert set(rest["needs"]) == {"matrix", *publish_jobs}
    assert rest["if"].startswith("${{ !cancelled() && needs.matrix.result == 'success'")
    assert rest["uses"] == "$/.github/workflows/publish-shard.yml"
    assert rest["with"]["shard"] == "rest"
    assert chain["if"].startswith("${{ !cancelled() && needs.matrix.result == 'success'")
    steps = chain["steps"]
    downloads = [s["with"] for s in steps if s.get("uses", "").startswith("actions/download-artifact@")]
    assert downloads == [{"name": "wave-plan"}, {"pattern": "published-*", "path": "reports"}]
    wave = next(s for s in steps if s.get("id") == "wave")
    assert "nox -s wave -- --plan wave-plan.json --reports reports" in wave["run"]
    nxt = next(i for i, s in enumerate(steps) if "nox -s chain" in s.get("run", ""))
    # unless next-wave started it (that run's chain takes this one's failed cells); a next-wave
    # job skipped (nothing deferred) or whose wait ran out started none
    assert steps[nxt]["if"] == "${{ steps.wave.outputs.next_wave == 'true' && needs.next-wave.result != 'success' }}"
    assert chain["permissions"]["actions"] == "write"
    assert steps.index(wave) < nxt
    assert steps[-1]["if"] == "${{ steps.wave.outputs.failed != '0' }}"


def test_cell_jobs_free_disk_and_restore_caches_before_building() -> None:
    steps = load("build-shard.yml")["jobs"]["build"]["steps"]
    build = next(i for i, s in enumerate(steps) if "nox -s build" in s.get("run", ""))
    before = steps[:build]
    assert any("rm -rf /usr/share/dotnet" in s.get("run", "") for s in before)
    caches = [s for s in before if s.get("uses", "").startswith("actions/cache@")]
    keys = [c["with"]["key"] for c in caches]
    # the toolkit key is the request's key: release, platform and the component set (torch's, the recipe's)
    resolve = next(s for s in before if s.get("id") == "toolkit")
    assert '--package "$PACKAGE"' in resolve["run"]
    assert "args+=(--torch)" in resolve["run"]
    assert '["key"]' in resolve["run"]
    assert any("steps.toolkit.outputs.key" in k and "matrix.platform" in k and "hashFiles('farm/toolkit/*.py')" in k
               for k in keys)
    # torch is keyed per (platform, CUDA, torch), not per Python, and is the folder the build mounts
    torch = next(c for c in caches if c["with"]["key"].startswith("torch-"))
    assert "matrix.python" not in torch["with"]["key"]
    assert steps[build]["env"]["FARM_PIP_CACHE"].endswith("/" + torch["with"]["path"])


def test_audit_workflow_streams_the_fleet_in_shards() -> None:
    audit = load("audit.yml")
    job = audit["jobs"]["audit"]
    shards = job["strategy"]["matrix"]["shard"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "gh release download" not in runs, "no step downloads the whole fleet"
    assert "--from-ledger" in runs
    assert "--max-scratch" in runs
    assert f"--shard ${{{{ matrix.shard }}}}/{len(shards)}" in runs
    assert shards == list(range(len(shards)))


def test_build_jobs_use_the_shared_compiler_cache_configured_in_one_place() -> None:
    """The backend is chosen once, for every build job (build-shard.yml's job environment); no
    other workflow sets it."""
    shard = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())
    env = shard["jobs"]["build"]["env"]
    assert env["FARM_COMPILE_CACHE"] == "${{ vars.FARM_COMPILE_CACHE }}"  # empty: farm decides (s3 with a bucket)
    assert env["SCCACHE_BUCKET"] == "${{ vars.SCCACHE_BUCKET }}"
    assert env["AWS_SECRET_ACCESS_KEY"].startswith("${{ secrets.")
    steps = shard["jobs"]["build"]["steps"]
    expose = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/github-script"))
    build = next(i for i, s in enumerate(steps) if "nox -s build" in s.get("run", ""))
    assert expose < build
    assert "ACTIONS_RUNTIME_TOKEN" in steps[expose]["with"]["script"]
    for path in WORKFLOWS:
        if path.name != "build-shard.yml":
            assert "FARM_COMPILE_CACHE" not in path.read_text(), path.name


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_cache_key_never_reaches_package_code(path: Path) -> None:
    """FARM_CACHE_KEY seals the caches CI restores; a package's build code (the step that runs
    `nox -s build`) must not be able to read it, or it could seal a forged lint answer or
    toolkit stamp for later runs. So: no workflow- or job-level key, and none on a build step."""
    workflow = yaml.safe_load(path.read_text())
    assert "FARM_CACHE_KEY" not in (workflow.get("env") or {})
    for name, job in workflow["jobs"].items():
        builds = any("nox -s build" in str(step.get("run", "")) for step in steps_of(job))
        if builds:
            assert "FARM_CACHE_KEY" not in (job.get("env") or {}), name
        for step in steps_of(job):
            if "nox -s build" in str(step.get("run", "")):
                assert "FARM_CACHE_KEY" not in (step.get("env") or {}), (name, step.get("name"))
                assert "--cuda-home" in step["run"], "the build step takes the toolkit the keyed step verified"


def test_the_toolkit_is_verified_with_the_key_before_the_build() -> None:
    job = load("build-shard.yml")["jobs"]["build"]
    names = [step.get("name") for step in steps_of(job)]
    assemble = names.index("Assemble the CUDA toolkit")
    assert assemble < names.index("Build, assert, stamp")
    assert names.index("Restore the CUDA toolkit") < assemble
    assert "FARM_CACHE_KEY" in steps_of(job)[assemble]["env"]


def test_tests_workflow_runs_the_oldest_and_newest_supported_python() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    oldest = re.fullmatch(r">=(3\.\d+)", project["requires-python"].split("#")[0].strip())
    assert oldest, project["requires-python"]
    pythons = re.search(r"^PYTHONS = \[(.*)\]$", (REPO / "noxfile.py").read_text(), re.MULTILINE)
    assert pythons, "noxfile.py names PYTHONS"
    newest = max(re.findall(r'"(3\.\d+)"', pythons[1]), key=lambda v: int(v.split(".")[1]))
    jobs = load("tests.yml")["jobs"]
    assert jobs["tests"]["strategy"]["matrix"]["python"] == [oldest[1], newest]
    assert any("nox -s tests_lowest" in s.get("run", "") for s in jobs["lowest"]["steps"])


def test_published_wheels_are_attested_by_a_job_that_runs_no_package_code() -> None:
    """The publish job writes each published wheel's subjects (the wheel's sha256 and its
    _build_info.json's); a job with only the permissions the attestation needs signs them with
    GitHub's action, pinned by commit; another records the attestation in the ledger."""
    jobs = load("publish-shard.yml")["jobs"]
    publish = next(s for s in jobs["publish"]["steps"] if "publish-shard" in s.get("run", ""))
    assert '--subjects "subjects-$SHARD.txt"' in publish["run"]
    attest = jobs["attest"]
    assert attest["needs"] == ["publish"]
    assert attest["permissions"] == {"id-token": "write", "attestations": "write", "contents": "read"}
    actions = [s for s in attest["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    assert all(re.fullmatch(r"actions/attest-build-provenance@[0-9a-f]{40}", a["uses"]) for a in actions)
    # one attestation a subjects file farm writes: the file, then its parts past 1,024 subjects
    assert [a["with"] for a in actions] == [{"subject-checksums": "subjects-${{ inputs.shard }}.txt"}] + [
        {"subject-checksums": f"subjects-${{{{ inputs.shard }}}}-{i}.txt"} for i in range(1, SUBJECT_PARTS)]
    assert all(f"-{i}.txt" in a["if"] for i, a in enumerate(actions[1:], 1))
    assert [attest["outputs"][k] for k in ("url", *(f"url-{i}" for i in range(1, SUBJECT_PARTS)))] == [
        f"${{{{ steps.{a['id']}.outputs.attestation-url }}}}" for a in actions]
    assert not any("nox -s build" in s.get("run", "") or "pip install" in s.get("run", "") for s in attest["steps"])
    record = jobs["record-attestations"]
    assert record["needs"] == ["attest"]
    assert record["permissions"] == {"contents": "write"}
    step = next(s for s in record["steps"] if "attestation" in s.get("run", ""))
    assert "nox -s attestation -- record" in step["run"]
    assert "for part in " + " ".join(map(str, range(1, SUBJECT_PARTS))) + "; do" in step["run"]
    assert [step["env"][k] for k in ("URL", *(f"URL_{i}" for i in range(1, SUBJECT_PARTS)))] == [
        f"${{{{ needs.attest.outputs.{k} }}}}" for k in attest["outputs"]]


def test_the_attest_job_names_every_wheel_of_the_largest_wave() -> None:
    """The rest shard may publish a whole wave (every cell handed on): --max-shards shards of 256
    cells, a wheel and its _build_info.json each, within the attest job's attestations."""
    max_shards = re.search(r"--max-shards (\d+)", (FOLDER / "build.yml").read_text())
    assert max_shards is not None
    assert 2 * int(max_shards.group(1)) * SHARD_SIZE <= SUBJECT_PARTS * MAX_SUBJECTS
