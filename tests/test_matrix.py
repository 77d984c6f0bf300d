from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT
from farm.load.recipes import load_config
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.schedule.matrix import Filters, compute_matrix
from farm.schedule.slices import slice_plan
from tests.support.ledgermaker import make_entry

REPO = Path(__file__).resolve().parent.parent

DEFAULTS = """\
build_epoch: {epoch}
cuda_lines: ['12.8', '13.0']
python: {{min: '3.10', max: '3.12'}}
platforms: [linux_x86_64, linux_aarch64, win_amd64]
grid:
  - {{cuda: '12.8', torch: '2.8.0', python: ['3.10', '3.11', '3.12']}}
  - {{cuda: '13.0', torch: '2.9.1', python: ['3.11', '3.12', '3.13']}}
phantoms:
  - {{cuda: '13.0', torch: '2.9', python: '3.11', platform: linux_aarch64}}
arch_policy:
  x86_64:
    '12.8': '7.5;8.0;9.0+PTX'
    '13.0': '7.5;8.0;9.0;12.0+PTX'
  aarch64:   # no 12.8 row: no aarch64 cells on CUDA 12.8
    '13.0': '8.0;9.0+PTX'
"""

ALPHA = """\
name: alpha
version: '1.0'
source: {{path: src/alpha}}
links_torch: true
{extra}"""

BETA = """\
name: beta
version: '2.0'
source: {{path: src/beta}}
links_torch: false
{extra}"""


def make_tree(root: Path, *, epoch: int = 0, alpha: str = "", beta: str = "") -> Path:
    """A small farm repository: 2 grid rows, 3 platforms, a torch package and a torch-free one."""
    (root / "packages").mkdir(parents=True, exist_ok=True)
    (root / "_defaults.yml").write_text(DEFAULTS.format(epoch=epoch))
    (root / "packages" / "alpha.yml").write_text(ALPHA.format(extra=alpha))
    (root / "packages" / "beta.yml").write_text(BETA.format(extra=beta))
    for name in ("alpha", "beta"):
        src = root / "src" / name
        src.mkdir(parents=True, exist_ok=True)
        (src / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    ledger = root / "ledger.jsonl"
    if not ledger.exists():
        ledger.write_text("")
    return root


def farm_matrix(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, Any, str]:
    """Run ``farm matrix --json --no-lint`` in process; (exit code, parsed JSON or None, stderr)."""
    rc = main(["matrix", "--root", str(root), "--json", "--no-lint", *args])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def ledger_from_cells(root: Path, cells: list[dict[str, Any]], *, epoch: int = 0, **kw: Any) -> None:
    """Record every cell as an asserted wheel built at ``epoch`` with the arch list it had."""
    entries = [
        make_entry(c["package"], c["version"], cuda=c["cuda"], torch=c["torch"], python=c["python_tag"],
                   platform=c["platform"], build_epoch=epoch, arch=c["arch_list"], filename=c["wheel"], **kw)
        for c in cells
    ]
    (root / "ledger.jsonl").write_text("".join(dumps_entry(e) + "\n" for e in entries))


def by_package(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["package"]: p for p in data["packages"]}


# -- cells and the subtraction order ---------------------------------------------------------
def test_buckets_follow_the_visible_order_and_add_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    rc, data, _ = farm_matrix(capsys, root)
    assert rc == 0
    pkgs = by_package(data)
    # alpha: 2 rows x 3 pythons x 3 platforms, minus Python 3.13 (max 3.12);
    # aarch64 has no 12.8 row (3 cells), one phantom on 13.0 aarch64.
    assert {k: pkgs["alpha"][k] for k in ("declared", "filtered", "recipe", "no_policy", "phantom",
                                          "built", "stale", "to_build")} == {
        "declared": 15, "filtered": 0, "recipe": 0, "no_policy": 3, "phantom": 1,
        "built": 0, "stale": 0, "to_build": 11}
    # beta links no torch: the torch axis collapses, and phantoms (torch gaps) do not apply.
    assert pkgs["beta"]["declared"] == 15
    assert pkgs["beta"]["phantom"] == 0
    assert pkgs["beta"]["to_build"] == 12
    for p in data["packages"]:
        assert p["declared"] == sum(p[k] for k in ("filtered", "recipe", "no_policy", "phantom",
                                                   "built", "stale", "to_build"))
    cells = {c["id"]: c for c in data["cells"]}
    assert len(cells) == len(data["cells"]) == 23
    a = cells["alpha-1.0-cu128-torch2.8-cp311-linux_x86_64"]
    assert a["wheel"] == "alpha-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl"
    assert a["torch_version"] == "2.8.0"
    assert a["arch_list"] == "sm_75;sm_80;sm_90;compute_90"
    assert a["arch_origin"] == "policy x86_64 12.8"
    b = cells["beta-2.0-cu130-notorch-cp312-linux_aarch64"]
    assert b["wheel"] == "beta-2.0+cu130-cp312-cp312-linux_aarch64.whl"
    assert b["torch"] == "none"
    assert b["torch_version"] is None
    assert b["arch_list"] == "sm_80;sm_90;compute_90"
    assert "alpha-1.0-cu130-torch2.9-cp311-linux_aarch64" not in cells  # the phantom


def test_recipe_restrictions_are_their_own_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path, alpha="min_torch: '2.9'\n")
    _, data, _ = farm_matrix(capsys, root)
    alpha = by_package(data)["alpha"]
    assert alpha["recipe"] == 9  # every 12.8/2.8 cell, before the no-policy check sees them
    assert alpha["no_policy"] == 0
    assert alpha["to_build"] == 5


def test_no_policy_row_means_no_cells_whatever_the_recipe_says(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path, alpha="arch: {list: '8.0;9.0+PTX', aarch64: {by_cuda: {'12.8': '9.0+PTX', "
                                     "'13.0': '9.0+PTX'}}}\n")
    _, data, _ = farm_matrix(capsys, root, "alpha", "--platform", "linux_aarch64")
    alpha = by_package(data)["alpha"]
    assert alpha["no_policy"] == 3
    assert alpha["phantom"] == 1
    assert alpha["to_build"] == 1
    # The platform block outranks the package-wide list where the policy has a row.
    assert data["cells"][0]["arch_list"] == "sm_90;compute_90"
    assert data["cells"][0]["arch_origin"] == "recipe arch.aarch64.by_cuda['13.0']"


# -- exists-keys, build_epoch, stale ---------------------------------------------------------
def test_built_cells_are_not_scheduled_until_the_epoch_moves(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root)
    n = len(first["cells"])
    ledger_from_cells(root, first["cells"], epoch=0)

    rc, built, _ = farm_matrix(capsys, root)
    assert rc == 0
    assert built["cells"] == []
    assert built["totals"]["built"] == n

    # A defaults-level epoch bump reschedules every cell, with build tag 1 in its wheel name.
    make_tree(root, epoch=1)
    _, bumped, _ = farm_matrix(capsys, root)
    assert len(bumped["cells"]) == n
    for cell in bumped["cells"]:
        assert cell["build_epoch"] == 1
        assert cell["wheel"].split("-")[2] == "1"  # {dist}-{version}+{local}-{build}-{py}-{abi}-{plat}
    assert {c["id"] for c in bumped["cells"]} == {c["id"] for c in first["cells"]}

    # A recipe-level epoch reschedules that package only.
    make_tree(root, epoch=0, alpha="build_epoch: 1\n")
    _, one, _ = farm_matrix(capsys, root)
    assert {c["package"] for c in one["cells"]} == {"alpha"}
    assert len(one["cells"]) == by_package(first)["alpha"]["to_build"]
    assert by_package(one)["beta"]["built"] == by_package(first)["beta"]["to_build"]
    assert all("+cu" in c["wheel"] and c["wheel"].split("-")[2] == "1" for c in one["cells"])


def test_inferred_entries_count_as_epoch_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root, "beta")
    ledger_from_cells(root, first["cells"], epoch=0, provenance="inferred")
    _, data, _ = farm_matrix(capsys, root, "beta")
    assert data["cells"] == []
    assert data["totals"]["built"] == 12
    make_tree(root, epoch=1)
    _, data, _ = farm_matrix(capsys, root, "beta")
    assert len(data["cells"]) == 12


def test_an_arch_override_change_reports_stale_cells_and_does_not_schedule_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root)
    ledger_from_cells(root, first["cells"], epoch=0)

    make_tree(root, alpha="arch: {list: '8.0;9.0+PTX'}\n")
    rc, data, _ = farm_matrix(capsys, root)
    assert rc == 0
    alpha = by_package(data)["alpha"]
    # x86 cells moved; the aarch64 cells resolve to the same list as before (policy row 13.0).
    assert alpha["stale"] == 10
    assert alpha["built"] == 1
    assert alpha["to_build"] == 0
    assert data["cells"] == []
    stale = alpha["stale_cells"][0]
    assert stale["built_with"] == "sm_75;sm_80;sm_90;compute_90"
    assert stale["config_now"] == "sm_80;sm_90;compute_90"
    assert stale["wheel"].startswith("alpha-1.0+")
    assert stale["ledger_line"] >= 1

    rc = main(["matrix", "--root", str(root), "--no-lint"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "config moved: alpha has 10 wheel(s) built at epoch 0" in out
    assert "bump build_epoch (packages/alpha.yml or _defaults.yml)" in out

    # farm build of the package says why there is nothing to build (exit 0), before building anything
    rc = main(["build", "alpha", "--root", str(root), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 0
    assert "nothing to build" in err
    assert "10 built with another arch list: stale" in err
    assert "bump build_epoch" in err
    assert not (tmp_path / "cache").exists()


def test_overwrite_ignores_the_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root)
    ledger_from_cells(root, first["cells"], epoch=0)
    _, data, _ = farm_matrix(capsys, root, "--overwrite")
    assert data["overwrite"] is True
    assert len(data["cells"]) == len(first["cells"])
    main(["matrix", "--root", str(root), "--no-lint", "--overwrite"])
    assert "--overwrite: the ledger was ignored" in capsys.readouterr().out


def test_a_malformed_ledger_line_is_exit_2_naming_the_line(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    good = [dumps_entry(make_entry("alpha", "1.0", python=py)) for py in ("cp310", "cp311")]
    (root / "ledger.jsonl").write_text(good[0] + "\n" + good[1] + "\n" + '{"filename": \n')
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "matrix", "--root", str(root), "--no-lint"],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == EXIT_BAD_INPUT
    assert "ledger.jsonl:3" in proc.stderr
    assert "not valid JSON" in proc.stderr
    assert proc.stdout == ""


# -- filters ---------------------------------------------------------------------------------
def test_filters_narrow_and_normalise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    rc, data, _ = farm_matrix(capsys, root, "alpha", "--cuda", "12.8", "--torch", "2.8.0",
                              "--python", "3.11,cp312", "--platform", "linux_x86_64")
    assert rc == 0
    assert data["filters"] == {"packages": ["alpha"], "cuda": ["12.8"], "torch": ["2.8"],
                               "python": ["cp311", "cp312"], "platform": ["linux_x86_64"]}
    assert sorted(c["id"] for c in data["cells"]) == [
        "alpha-1.0-cu128-torch2.8-cp311-linux_x86_64", "alpha-1.0-cu128-torch2.8-cp312-linux_x86_64"]
    assert by_package(data)["alpha"]["filtered"] == 13
    assert list(by_package(data)) == ["alpha"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cuda", "12.7"], "unknown CUDA line '12.7'"),
        (["--torch", "2.3"], "unknown torch version '2.3'"),
        (["--python", "3.9"], "unknown Python 'cp39'"),
        (["--python", "3.13"], "unknown Python 'cp313'"),  # in the grid, above python.max
        (["--platform", "linux_x86"], "did you mean 'linux_x86_64'"),
        (["gamma"], "unknown package 'gamma'"),
        (["--max-shards", "0"], "--max-shards must be >= 1"),
    ],
)
def test_an_unknown_filter_value_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            args: list[str], message: str) -> None:
    rc, data, err = farm_matrix(capsys, make_tree(tmp_path), *args)
    assert rc == EXIT_BAD_INPUT
    assert data["ok"] is False
    assert data["error"]["exit_code"] == EXIT_BAD_INPUT
    assert message in err


# -- GitHub Actions output -------------------------------------------------------------------
def big_tree(root: Path) -> Path:
    """4 packages x 10 torch rows x 5 pythons x 3 platforms = 600 cells, no phantoms."""
    rows = "\n".join(
        f"  - {{cuda: '12.8', torch: '2.{m}.0', python: ['3.10', '3.11', '3.12', '3.13', '3.14']}}"
        for m in range(1, 11)
    )
    (root / "packages").mkdir(parents=True)
    (root / "_defaults.yml").write_text(textwrap.dedent("""\
        build_epoch: 0
        cuda_lines: ['12.8']
        python: {min: '3.10', max: '3.14'}
        platforms: [linux_x86_64, linux_aarch64, win_amd64]
        arch_policy:
          x86_64: {'12.8': '8.0;9.0+PTX'}
          aarch64: {'12.8': '9.0+PTX'}
        grid:
        """) + rows + "\n")
    for name in ("p1", "p2", "p3", "p4"):
        (root / "src" / name).mkdir(parents=True)
        (root / "packages" / f"{name}.yml").write_text(
            f"name: {name}\nversion: '1.0'\nsource: {{path: src/{name}}}\nlinks_torch: true\n")
    (root / "ledger.jsonl").write_text("")
    return root


def read_outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_600_cells_make_3_shards_and_nothing_is_lost(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root = big_tree(tmp_path / "farm")
    output, summary = tmp_path / "gh_output", tmp_path / "gh_summary"
    output.write_text("earlier=kept\n")
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc, data, _ = farm_matrix(capsys, root, "--github-output")
    assert rc == 0
    assert len(data["cells"]) == 600
    assert data["shard_count"] == 3

    out = read_outputs(output)
    assert out["earlier"] == "kept"  # appended, not overwritten
    assert out["shard_count"] == "3"
    assert out["total"] == "600"
    # the outputs are counts; each shard's slice job reads its entries from the plan
    assert not any(k.startswith("shard_") and k != "shard_count" for k in out)
    parts = [slice_plan(data, str(i)) for i in range(3)]
    assert [len(p) for p in parts] == [256, 256, 88]
    ids = [entry["id"] for part in parts for entry in part]
    assert len(ids) == len(set(ids)) == 600
    assert ids == [c["id"] for c in data["cells"]]
    entry = parts[0][0]
    assert set(entry) == {"id", "package", "cuda", "torch", "python", "platform", "runner"}

    text = summary.read_text()
    assert "| p1 | 1.0 | 0 | 150 | 0 | 0 | 0 | 0 | 0 | 0 | 150 |" in text
    assert "LINT SKIPPED (--no-lint)" in text


def test_more_cells_than_the_workflow_runs_are_deferred_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = big_tree(tmp_path / "farm")
    output, summary = tmp_path / "gh_output", tmp_path / "gh_summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc, data, _ = farm_matrix(capsys, root, "--github-output", "--max-shards", "2")
    assert rc == 0
    totals = data["totals"]
    assert totals["to_build"] == 600
    assert totals["scheduled"] == 512
    assert totals["deferred"] == 88
    assert len(data["cells"]) == 512
    assert len(data["deferred_cells"]) == 88
    assert data["shard_count"] == 2
    scheduled = {c["id"] for c in data["cells"]}
    assert not scheduled & set(data["deferred_cells"])
    # round-robin across the 4 packages of 150 cells: each gets 128 of the 512
    by_package = {p["package"]: (p["scheduled"], p["deferred"]) for p in data["packages"]}
    assert by_package == dict.fromkeys(("p1", "p2", "p3", "p4"), (128, 22))

    out = read_outputs(output)
    assert out["shard_count"] == "2"
    assert out["total"] == "512"
    assert out["deferred"] == "88"
    assert json.loads(out["deferred_by_package"]) == {"p1": 22, "p2": 22, "p3": 22, "p4": 22}
    ids = [e["id"] for i in range(2) for e in slice_plan(data, str(i))]
    assert ids == [c["id"] for c in data["cells"]]
    text = summary.read_text()
    assert "| p1 | 1.0 | 0 | 150 | 0 | 0 | 0 | 0 | 0 | 0 | 150 | 128 | 22 |" in text
    assert "88 cell(s) deferred" in text

    # the same inputs give the same wave
    _, again, _ = farm_matrix(capsys, root, "--max-shards", "2")
    assert again["cells"] == data["cells"]
    assert again["deferred_cells"] == data["deferred_cells"]
    # the table says it too
    assert main(["matrix", "--root", str(root), "--no-lint", "--max-shards", "2"]) == 0
    table = capsys.readouterr().out
    assert "scheduled" in table
    assert "deferred" in table
    assert "88 deferred to the next run" in table


def test_fail_on_deferred_keeps_the_old_strictness_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = big_tree(tmp_path / "farm")
    output = tmp_path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    rc, data, err = farm_matrix(capsys, root, "--github-output", "--max-shards", "2", "--fail-on-deferred")
    assert rc == EXIT_BAD_INPUT
    assert data["ok"] is False
    assert "cells" not in data
    assert "600 cells" in err
    assert "88 cell(s) would be deferred" in err
    assert not output.exists()
    rc, data, _ = farm_matrix(capsys, root, "--max-shards", "3", "--fail-on-deferred")
    assert rc == 0
    assert data["totals"]["deferred"] == 0


def test_github_output_needs_the_variable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    rc, _, err = farm_matrix(capsys, make_tree(tmp_path), "--github-output")
    assert rc == EXIT_BAD_INPUT
    assert "$GITHUB_OUTPUT" in err


def test_nothing_to_build_writes_zero_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "farm")
    _, first, _ = farm_matrix(capsys, root)
    ledger_from_cells(root, first["cells"])
    output = tmp_path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    rc, data, _ = farm_matrix(capsys, root, "--github-output", "--max-shards", "1")
    assert rc == 0
    assert data["cells"] == []
    assert read_outputs(output) == {"shard_count": "0", "total": "0", "deferred": "0",
                                    "deferred_by_package": "{}", "link_count": "0", "lint_failed": "[]"}


# -- what the command loads ------------------------------------------------------------------
# Every CI run and every user pays for farm matrix's imports before any work.
UNUSED_BY_THE_MATRIX = ("farm.publish.ghrest", "farm.publish.releases", "farm.publish.twine",
                        "farm.publish.indextarget", "farm.publish.publish", "farm.binary.wheelfile",
                        "farm.schedule.outcome", "farm.commands.doctor", "jsonschema", "zstandard", "zipfile",
                        "difflib", "urllib.request", "http.client", "email")


def test_the_matrix_loads_no_publishing_wheel_or_schema_code(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A matrix over a ledger of built cells, in a fresh interpreter: the publish clients, the wheel
    and schema readers and the suggestion matcher are imported where they are used, never on its path."""
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root)
    ledger_from_cells(root, first["cells"][:5])
    code = ("import sys\nfrom farm.cli import main\n"
            f"rc = main(['matrix', '--root', {str(root)!r}, '--json', '--no-lint'])\n"
            f"print(rc, [m for m in {UNUSED_BY_THE_MATRIX!r} if m in sys.modules], file=sys.stderr)")
    # coverage's start-up in a measured child imports modules of its own
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert run.stderr.splitlines()[-1] == "0 []"


# -- lint in the loop ------------------------------------------------------------------------
def test_no_lint_is_said_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    assert main(["matrix", "--root", str(root), "--no-lint"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("!! LINT SKIPPED (--no-lint)")
    rc, data, err = farm_matrix(capsys, root)
    assert rc == 0
    assert data["lint"]["ran"] is False
    assert "LINT SKIPPED" in err


def test_an_unfetchable_source_is_exit_3_naming_the_package(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    missing = (tmp_path / "no-such-repo").as_uri()
    (root / "packages" / "alpha.yml").write_text(
        f"name: alpha\nversion: '1.0'\nsource: {{git: {{repo: '{missing}', ref: v1.0}}}}\nlinks_torch: true\n")
    rc = main(["matrix", "--root", str(root), "alpha", "--cache-dir", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    assert rc == EXIT_ENVIRONMENT
    assert "alpha" in err
    assert out == ""
    assert "--no-lint" in err
    assert "without the lint" in err


def test_nothing_to_build_needs_no_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path)
    _, first, _ = farm_matrix(capsys, root, "alpha")
    ledger_from_cells(root, first["cells"])
    (root / "packages" / "alpha.yml").write_text(
        "name: alpha\nversion: '1.0'\nsource: {git: {repo: 'file:///nonexistent', ref: v1.0}}\nlinks_torch: true\n")
    assert main(["matrix", "--root", str(root), "alpha", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lint"]["ran"] is True
    assert data["lint"]["results"] == []
    assert data["cells"] == []


CLEAN_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="alpha",
    ext_modules=[CUDAExtension("alpha._C", ["csrc/scale.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
"""
KERNEL = """\
__global__ void scale(float* x, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}
"""


def lintable_tree(root: Path, *, override: bool) -> Path:
    """alpha's source: a real torch CUDA extension; with ``override`` its setup.py assigns
    TORCH_CUDA_ARCH_LIST at import (the pointnet2_ops pattern)."""
    make_tree(root)
    src = root / "src" / "alpha"
    (src / "csrc").mkdir()
    (src / "csrc" / "scale.cu").write_text(KERNEL)
    head = 'import os\nos.environ["TORCH_CUDA_ARCH_LIST"] = "6.0;7.0;7.5"\n' if override else ""
    (src / "setup.py").write_text(head + CLEAN_SETUP)
    return root


def test_lint_runs_once_per_distinct_arch_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = lintable_tree(tmp_path / "farm", override=False)
    cache = tmp_path / "cache"
    assert main(["matrix", "--root", str(root), "alpha", "--json", "--cache-dir", str(cache)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lint"]["ran"] is True
    assert data["lint"]["passed"] is True
    # alpha's cells to build resolve to 3 lists: x86 12.8, x86 13.0, aarch64 13.0.
    assert sorted(r["arch_list"] for r in data["lint"]["results"]) == sorted({c["arch_list"] for c in data["cells"]})
    assert len(data["lint"]["results"]) == 3
    assert all(r["passed"] for r in data["lint"]["results"])
    cached = sorted((cache / "lint").iterdir())
    assert len(cached) == 3  # one cached report per (source, lint version, arch list, ignores)

    assert main(["matrix", "--root", str(root), "alpha", "--cache-dir", str(cache)]) == 0
    assert "lint: passed (1 package(s), 3 arch list(s))" in capsys.readouterr().out
    assert sorted((cache / "lint").iterdir()) == cached


def test_lint_errors_fail_the_matrix_with_the_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = lintable_tree(tmp_path / "farm", override=True)
    output, summary = tmp_path / "gh_output", tmp_path / "gh_summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc = main(["matrix", "--root", str(root), "alpha", "--github-output", "--cache-dir", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "lint: FAILED for alpha" in out
    assert "setup.py:2" in out
    assert "arch-override" in out
    assert "lint: FAILED for alpha" in err
    assert not output.exists()  # a failed lint publishes no matrix
    assert "**lint: FAILED for alpha**: no cells were scheduled" in summary.read_text()

    rc = main(["matrix", "--root", str(root), "alpha", "--json", "--cache-dir", str(tmp_path / "cache")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert data["lint"]["passed"] is False
    assert {e["rule"] for r in data["lint"]["results"] for e in r["errors"]} == {"arch-override"}


# -- the library API and the repository's own packages ---------------------------------------
def test_compute_matrix_is_usable_without_the_cli(tmp_path: Path) -> None:
    config = load_config(make_tree(tmp_path))
    m = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, cuda=["13.0"]))
    assert {p.cell.cuda for p in m.cells} == {"13.0"}
    assert m.totals()["to_build"] == len(m.cells) == 5 + 6  # alpha: one phantom
    assert all(pkg.lint_requests() for pkg in m.packages)  # every package with cells to build is linted


def test_the_repository_packages_with_the_committed_ledger(capsys: pytest.CaptureFixture[str]) -> None:
    rc, data, _ = farm_matrix(capsys, REPO)
    assert rc == 0
    assert {p["package"] for p in data["packages"]} == {p.stem for p in (REPO / "packages").glob("*.yml")}
    # without --max-shards every cell is scheduled but those no hosted runner can finish, which are
    # refused with the reason: the Windows cells of packages that shard their compile on Linux only,
    # and vllm, whose measured compile (its probe, recipe_times.json) is hours past the limit and
    # which has no sharding
    totals = data["totals"]
    assert totals["to_build"] == len(data["cells"]) + len(data["refused_cells"]) > 0
    assert totals["refused"] == len(data["refused_cells"]) > 0
    assert {r["id"].rsplit("-", 1)[1] for r in data["refused_cells"] if not r["id"].startswith("vllm-")} == {
        "win_amd64"}
    assert any(r["id"].startswith("vllm-") and "(measured)" in r["reason"] for r in data["refused_cells"])
    assert all("no hosted runner can finish it" in r["reason"] for r in data["refused_cells"])
    for p in data["packages"]:
        assert p["declared"] == sum(p[k] for k in ("filtered", "recipe", "no_policy", "phantom",
                                                   "built", "stale", "to_build"))


def test_a_list_the_packages_own_variable_cannot_carry_is_exit_2_naming_the_cell(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # beta reads its list from BETA_ARCHS as plain versions: the policy's +PTX cannot be passed
    make_tree(tmp_path, beta="build:\n  arch_env: {BETA_ARCHS: versions}\n")
    rc, _, err = farm_matrix(capsys, tmp_path, "beta")
    assert rc == EXIT_BAD_INPUT
    assert "cell beta-2.0-cu128-notorch-cp310-linux_x86_64: build.arch_env.BETA_ARCHS" in err
    assert "SASS arches only" in err
    make_tree(tmp_path, beta="arch:\n  list: '8.0;9.0'\nbuild:\n  arch_env: {BETA_ARCHS: versions}\n")
    rc, data, _ = farm_matrix(capsys, tmp_path, "beta")
    assert rc == 0
    assert data["packages"][0]["to_build"] > 0


SM120_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="alpha",
    ext_modules=[CUDAExtension("alpha._C", ["csrc/scale.cu"],
                               extra_compile_args={"nvcc": ["-gencode", "arch=compute_120,code=sm_120"]})],
    cmdclass={"build_ext": BuildExtension},
)
"""
SM120_IGNORE = """\
lint_ignore:
  - rule: arch-override
    path: setup.py
    reason: setup.py names its own targets (a test)
  - rule: explicit-target
    path: setup.py
    reason: sm_120 is added by setup.py; the 12.8 list does not declare it (a test)
"""


def test_a_filter_never_calls_an_ignore_stale_that_filtered_out_cells_need(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """setup.py adds sm_120: a finding under the lists without sm_120 (x86 12.8, aarch64 13.0),
    none under x86 13.0's. Linting only that list, the ignore matches nothing, yet the other
    cells still need it."""
    root = make_tree(tmp_path / "farm", alpha=SM120_IGNORE)
    src = root / "src" / "alpha"
    (src / "csrc").mkdir()
    (src / "csrc" / "scale.cu").write_text(KERNEL)
    (src / "setup.py").write_text(SM120_SETUP)
    cache = tmp_path / "cache"
    assert main(["matrix", "--root", str(root), "alpha", "--cuda", "13.0", "--platform", "linux_x86_64", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "lint: passed" in out
    assert "remove it" not in out
    assert main(["matrix", "--root", str(root), "alpha", "--cuda", "13.0", "--platform", "linux_x86_64", "--json", "--cache-dir", str(cache)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(r["stale_ignores"] == [] for r in data["lint"]["results"])
    # without the sm_120 flag the ignore is stale under every list: said, filter or not
    (src / "setup.py").write_text(CLEAN_SETUP)
    assert main(["matrix", "--root", str(root), "alpha", "--cuda", "13.0", "--platform", "linux_x86_64", "--cache-dir", str(cache)]) == 0
    assert "lint_ignore explicit-target 'setup.py' of alpha matches nothing under any of its arch lists" \
        in capsys.readouterr().out


def test_version_hints_are_by_value_and_in_version_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = farm_matrix(capsys, big_tree(tmp_path), "--torch", "2.11")
    assert rc == EXIT_BAD_INPUT
    assert "did you mean '2.10'?" in err
    assert "known: 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 2.10, none" in err
    rc, _, err = farm_matrix(capsys, big_tree(tmp_path / "b"), "--python", "3.15")
    assert "did you mean 'cp314'?" in err
    assert "known: cp310, cp311, cp312, cp313, cp314" in err


def test_a_package_failing_its_lint_is_withheld_and_the_others_are_scheduled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    root = lintable_tree(tmp_path / "farm", override=True)  # alpha fails, beta lints clean
    output, summary = tmp_path / "gh_output", tmp_path / "gh_summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    cache = str(tmp_path / "cache")
    rc = main(["matrix", "--root", str(root), "--github-output", "--withhold-lint-failures", "--cache-dir", cache,
               "--plan", str(tmp_path / "plan.json")])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "lint: FAILED for alpha (withheld" in out
    assert "setup.py:2" in out
    assert "lint: FAILED for alpha" in err
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert json.loads(outputs["lint_failed"]) == ["alpha"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    scheduled = [e for i in range(int(outputs["shard_count"])) for e in slice_plan(plan, str(i))]
    assert scheduled
    assert {e["package"] for e in scheduled} == {"beta"}
    assert "withheld" in summary.read_text()
    assert plan["lint"]["withheld"] == ["alpha"]
    assert {c["package"] for c in plan["cells"]} == {"beta"}

    # Without the flag: the old strictness, nothing scheduled.
    output.unlink()
    assert main(["matrix", "--root", str(root), "--github-output", "--cache-dir", cache]) == 1
    assert not output.exists()


def test_a_release_that_would_pass_githubs_asset_cap_is_refused_at_matrix_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A release per package (`tag: '{package}'`) holds every epoch's wheels: the ledger's 600 of an
    older epoch plus the 415 cells a bump queues pass GitHub's 1,000 assets per release."""
    root = tmp_path / "farm"
    root.mkdir()
    shutil.copytree(REPO / "packages", root / "packages")
    shutil.copytree(REPO / "examples", root / "examples")
    defaults = (REPO / "_defaults.yml").read_text()
    assert "tag: '{package}-{version}-{cu}-e{epoch}'" in defaults
    (root / "_defaults.yml").write_text(defaults.replace("tag: '{package}-{version}-{cu}-e{epoch}'", "tag: '{package}'"))
    old = [make_entry("cubvh", f"0.0.{i}", filename=f"cubvh-0.0.{i}-cp311-cp311-linux_x86_64.whl") for i in range(600)]
    (root / "ledger.jsonl").write_text("".join(dumps_entry(e) + "\n" for e in old))
    # a local look costs nothing extra and says nothing; the run's plan is checked
    assert main(["matrix", "--root", str(root), "--no-lint", "cubvh"]) == 0
    capsys.readouterr()
    rc = main(["matrix", "--root", str(root), "--no-lint", "cubvh", "--plan", str(tmp_path / "plan.json")])
    err = capsys.readouterr().err
    assert rc == EXIT_BAD_INPUT
    assert not (tmp_path / "plan.json").exists()
    assert "publish target 'github': release cubvh would hold 1015 assets, over GitHub's cap of 1000" in err
    assert "tag" in err
    # the default tag (package, version, CUDA line, epoch) keeps each release near a hundred
    (root / "_defaults.yml").write_text(defaults)
    assert main(["matrix", "--root", str(root), "--no-lint", "cubvh", "--plan", str(tmp_path / "plan.json")]) == 0


def test_the_cells_a_running_wave_holds_are_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The next wave is planned while the last one publishes: `--hold` its plan, and its cells (not
    in the ledger yet) are neither scheduled nor deferred, so no cell is built twice; the two plans
    cover the queue, and a cell is held only while a plan names it (none is lost)."""
    root = big_tree(tmp_path / "farm")
    first = tmp_path / "first.json"
    assert main(["matrix", "--root", str(root), "--no-lint", "--max-shards", "1", "--plan", str(first)]) == 0
    capsys.readouterr()
    one = json.loads(first.read_text())
    rc, two, _ = farm_matrix(capsys, root, "--max-shards", "1", "--hold", str(first))
    assert rc == 0
    ids = {c["id"] for c in one["cells"]}
    assert two["held"] == len(ids) == 256
    assert not ids & ({c["id"] for c in two["cells"]} | set(two["deferred_cells"]))
    assert len(two["cells"]) + len(two["deferred_cells"]) + len(ids) == len(one["cells"]) + len(one["deferred_cells"])
    rc, again, _ = farm_matrix(capsys, root, "--max-shards", "1")  # the run ended: nothing held
    assert (rc, again["held"], again["cells"]) == (0, 0, one["cells"])
    (tmp_path / "bad.json").write_text("{")
    rc, _, err = farm_matrix(capsys, root, "--hold", str(tmp_path / "bad.json"))
    assert rc == 2
    assert "not a wave plan" in err
