"""The GitHub workflows: schema-valid (check-jsonschema's vendored GitHub schema) and consistent
with the matrix's sharding, so more than 256 cells run as several shards with nothing dropped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parent.parent / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_is_schema_valid(path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_workflow_runs_every_shard() -> None:
    build = yaml.safe_load((WORKFLOWS[0].parent / "build.yml").read_text())
    jobs = build["jobs"]
    shard_jobs = sorted(name for name in jobs if re.fullmatch(r"build-\d+", name))
    matrix_step = next(s for s in jobs["matrix"]["steps"] if s.get("id") == "matrix")
    max_shards = int(re.search(r"--max-shards (\d+)", matrix_step["run"])[1])
    # the matrix refuses more shards than there are shard jobs; each shard job reads its own output
    assert len(shard_jobs) == max_shards
    for i in range(max_shards):
        job = jobs[f"build-{i}"]
        assert job["uses"] == "./.github/workflows/build-shard.yml"
        assert job["with"]["cells"] == f"${{{{ needs.matrix.outputs.shard_{i} }}}}"
        assert f"> {i}" in job["if"]
        assert jobs["matrix"]["outputs"][f"shard_{i}"] == f"${{{{ steps.matrix.outputs.shard_{i} }}}}"
        # every cell builds the commit the matrix was computed from
        assert job["with"]["commit"] == "${{ needs.matrix.outputs.commit }}"
    # the matrix and the publish read the ledger at the branch head, where the last publish pushed it
    for name in ("matrix", "publish"):
        checkout = next(s for s in jobs[name]["steps"] if s.get("uses", "").startswith("actions/checkout"))
        assert checkout["with"]["ref"] == "${{ github.ref }}"
    assert set(jobs["publish"]["needs"]) == {"matrix", *shard_jobs, "link"}
    assert "--github-output" in matrix_step["run"]


def test_shard_workflow_fans_out_one_job_per_cell() -> None:
    shard = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())
    job = shard["jobs"]["build"]
    assert job["strategy"]["matrix"]["include"] == "${{ fromJSON(inputs.cells) }}"
    assert job["runs-on"] == "${{ matrix.runner }}"
    assert job["steps"][0]["with"]["ref"] == "${{ inputs.commit }}"
    assert any("nox -s build" in step.get("run", "") for step in job["steps"])


def test_sharded_cells_run_compile_jobs_then_link_jobs() -> None:
    """A cell with `sharding: N`: its compile jobs upload objects, its link job (in the link
    matrix, after every build shard) downloads them and uploads the wheel as any cell does."""
    jobs = yaml.safe_load((WORKFLOWS[0].parent / "build.yml").read_text())["jobs"]
    link = jobs["link"]
    assert link["uses"] == "./.github/workflows/build-shard.yml"
    assert link["with"]["cells"] == "${{ needs.matrix.outputs.link }}"
    assert set(link["needs"]) == {"matrix", *(n for n in jobs if re.fullmatch(r"build-\d+", n))}
    assert "always()" in link["if"] and "link_count" in link["if"]
    assert jobs["matrix"]["outputs"]["link"] == "${{ steps.matrix.outputs.link }}"
    steps = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())["jobs"]["build"]["steps"]
    build = next(s for s in steps if "nox -s build" in s.get("run", ""))
    assert "--link --shard-dir shards" in build["run"] and '--shard "$SHARD" --shard-dir shards' in build["run"]
    download = next(s for s in steps if s.get("uses", "").startswith("actions/download-artifact"))
    upload_objects = next(s for s in steps if s.get("name") == "Upload this compile shard's objects")
    # the compile job's artifact name is the link job's download pattern
    assert download["with"]["pattern"] == "objects-${{ matrix.id }}.shard-*"
    assert upload_objects["with"]["name"] == "objects-${{ matrix.name }}"
    assert download["with"]["path"] == "shards/${{ matrix.id }}/objects"
    assert upload_objects["with"]["path"] == "shards/${{ matrix.id }}/objects/"
    assert steps.index(download) < steps.index(build) < steps.index(upload_objects)


def test_build_workflow_runs_in_waves_and_publishes_what_built() -> None:
    build = yaml.safe_load((WORKFLOWS[0].parent / "build.yml").read_text())
    jobs = build["jobs"]
    # one wave at a time, never cancelling the one that is publishing
    assert build["concurrency"]["group"] == "build-${{ github.ref }}"
    assert build["concurrency"]["cancel-in-progress"] is False
    matrix_step = next(s for s in jobs["matrix"]["steps"] if s.get("id") == "matrix")
    assert "--plan wave-plan.json" in matrix_step["run"]
    assert "--fail-on-deferred" not in matrix_step["run"]  # a long queue is deferred, not an error

    publish = jobs["publish"]
    # a failed or cancelled shard does not stop the publish: farm wave decides per cell
    assert "always()" in publish["if"] and "failure" not in publish["if"]
    steps = publish["steps"]
    names = [s.get("id") or s.get("name") or s.get("uses") for s in steps]
    wave = steps[names.index("wave")]
    assert "nox -s wave --" in wave["run"] and "--github-output" in wave["run"] and "--dist dist" in wave["run"]
    upload = next(s for s in steps if "nox -s upload" in s.get("run", ""))
    assert upload["if"] == "${{ steps.wave.outputs.publish == 'true' }}"
    assert "nox -s upload -- dist" in upload["run"]
    # the next wave starts after the ledger is pushed, only when this one built and deferred
    commit = next(i for i, s in enumerate(steps) if "git push" in s.get("run", ""))
    chain = next(i for i, s in enumerate(steps) if "gh workflow run build.yml" in s.get("run", ""))
    assert commit < chain and steps[chain]["if"] == "${{ steps.wave.outputs.next_wave == 'true' }}"
    assert publish["permissions"]["actions"] == "write"
    # the failed cells are listed (summary + artifact) and the run still says something failed
    assert any(s.get("with", {}).get("path") == "wave.json" for s in steps)
    assert steps[-1]["if"] == "${{ steps.wave.outputs.failed != '0' }}"


def test_cell_jobs_free_disk_and_restore_caches_before_building() -> None:
    shard = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())
    steps = shard["jobs"]["build"]["steps"]
    build = next(i for i, s in enumerate(steps) if "nox -s build" in s.get("run", ""))
    before = steps[:build]
    assert any("rm -rf /usr/share/dotnet" in s.get("run", "") for s in before)
    caches = [s for s in before if s.get("uses", "").startswith("actions/cache@")]
    keys = [c["with"]["key"] for c in caches]
    assert any("toolkit-" in k and "matrix.cuda" in k and "hashFiles('farm/toolkit/*.py')" in k for k in keys)
    # every line and platform (12.x and win_amd64 included) gets farm's toolkit, cached by its manifest hash
    resolve = next(s for s in before if s.get("id") == "toolkit")
    assert "toolkit --cuda \"$CUDA\" --platform \"$PLATFORM\" --dry-run --json" in resolve["run"]
    assert any("steps.toolkit.outputs.hash" in k and "matrix.platform" in k for k in keys)
    assert any("torch-" in k and "matrix.torch" in k and "matrix.python" in k and "hashFiles('_defaults.yml')" in k
               for k in keys)


def test_audit_workflow_streams_the_fleet_in_shards() -> None:
    audit = yaml.safe_load((WORKFLOWS[0].parent / "audit.yml").read_text())
    job = audit["jobs"]["audit"]
    shards = job["strategy"]["matrix"]["shard"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "gh release download" not in runs, "no step downloads the whole fleet"
    assert "--from-ledger" in runs and "--max-scratch" in runs
    assert f"--shard ${{{{ matrix.shard }}}}/{len(shards)}" in runs and shards == list(range(len(shards)))


def test_build_jobs_use_the_shared_compiler_cache_configured_in_one_place() -> None:
    """The backend is chosen once, for every build job (build-shard.yml's job environment); no
    other workflow sets it."""
    shard = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())
    env = shard["jobs"]["build"]["env"]
    assert env["FARM_COMPILE_CACHE"] == "${{ vars.FARM_COMPILE_CACHE || 'gha' }}"
    assert env["AWS_SECRET_ACCESS_KEY"].startswith("${{ secrets.")
    steps = shard["jobs"]["build"]["steps"]
    expose = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/github-script"))
    build = next(i for i, s in enumerate(steps) if "nox -s build" in s.get("run", ""))
    assert expose < build and "ACTIONS_RUNTIME_TOKEN" in steps[expose]["with"]["script"]
    for path in WORKFLOWS:
        if path.name != "build-shard.yml":
            assert "FARM_COMPILE_CACHE" not in path.read_text(), path.name
