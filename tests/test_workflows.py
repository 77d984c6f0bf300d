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
    max_shards = int(re.search(r"--max-shards (\d+)", jobs["matrix"]["steps"][-1]["run"])[1])
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
    assert set(jobs["publish"]["needs"]) == {"matrix", *shard_jobs}
    assert "--github-output" in jobs["matrix"]["steps"][-1]["run"]


def test_shard_workflow_fans_out_one_job_per_cell() -> None:
    shard = yaml.safe_load((WORKFLOWS[0].parent / "build-shard.yml").read_text())
    job = shard["jobs"]["build"]
    assert job["strategy"]["matrix"]["include"] == "${{ fromJSON(inputs.cells) }}"
    assert job["runs-on"] == "${{ matrix.runner }}"
    assert job["steps"][0]["with"]["ref"] == "${{ inputs.commit }}"
    assert any("nox -s build" in step.get("run", "") for step in job["steps"])
