"""Compile sharding: the pure partition and nvcc-argv reading, and real sharded builds of a
four-TU CUDA extension with nvcc (N=2): the link job's wheel asserts and carries the targets of the
unsharded build's; a shard built with another arch list fails the per-TU check; a missing shard
or object stops the link job, naming it."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from farm.build import shard, shardjob
from farm.build.builders import BuilderKind, BuildSettings, build_cell
from farm.build.shard import (
    CompileUnit,
    ShardJob,
    assign,
    compile_unit,
    stable_owner,
    tree_tus,
    tu_path,
)
from farm.cli import main
from farm.errors import DefectError, UsageError
from farm.model.cells import Cell

from . import buildroot
from .buildroot import REPO, make_root

pypi_toolkit = buildroot.pypi_toolkit

CELL = Cell("shard_ext", "1.0.0", "13.0", "none", "cp311", "linux_x86_64")
TUS = ["csrc/add.cu", "csrc/ops/fill.cu", "csrc/ops/negate.cu", "csrc/scale.cu"]
RECIPE = """\
name: shard_ext
version: '1.0.0'
source:
  path: src/shard_ext
links_torch: false
sharding: 2
arch:
  list: '{arch}'
"""
ARCHS = "8.0;9.0"  # two SASS targets keep nvcc cheap
SO = "shard_ext/_C.cpython-311-x86_64-linux-gnu.so"


# -- pure ------------------------------------------------------------------------------------------
def test_shard_job_parse() -> None:
    assert ShardJob.parse("3/20") == ShardJob(20, 3) and ShardJob.parse("0/2").label == "0/2"
    assert ShardJob(4).is_link and ShardJob(4).label == "link"
    for bad in ("3", "20/20", "0/1", "a/2", "-1/2"):
        with pytest.raises(ValueError):
            ShardJob.parse(bad)


def test_sorted_round_robin_is_deterministic_and_balanced() -> None:
    tus = [f"csrc/k{i:02d}.cu" for i in range(41)] + [f"other/x{i}.cu" for i in range(7)]
    table = assign(reversed(tus), 20)
    assert table == assign(tus, 20)  # the order the tree is walked in does not matter
    loads = [list(table.values()).count(s) for s in range(20)]
    assert max(loads) - min(loads) <= 1
    assert assign(TUS, 2) == {"csrc/add.cu": 0, "csrc/ops/fill.cu": 1, "csrc/ops/negate.cu": 0, "csrc/scale.cu": 1}
    # a TU the tree did not list: a stable hash, the same in every process
    assert stable_owner("build/gen/x.cu", 20) == stable_owner("build/gen/x.cu", 20) < 20


def test_tree_tus_skips_cmake_checks_and_vcs(tmp_path: Path) -> None:
    for rel in ("b/k.cu", "a.cu", "build/CMakeFiles/3.28/CompilerIdCUDA/CMakeCUDACompilerId.cu", ".git/x.cu", "a.cpp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert tree_tus(tmp_path) == ["a.cu", "b/k.cu"]


def test_compile_unit_reads_torch_and_setuptools_command_lines() -> None:
    # torch's ninja rule: $nvcc --generate-dependencies-with-compile --dependency-output $out.d ... -c $in -o $out
    torch = ["--generate-dependencies-with-compile", "--dependency-output", "/b/t/a.o.d", "-I/src/csrc",
             "-DTORCH_EXTENSION_NAME=_C", "--compiler-options", "'-fPIC'", "-gencode=arch=compute_80,code=sm_80",
             "-c", "/src/csrc/a.cu", "-o", "/b/t/a.o", "-O3", "-std=c++17"]
    assert compile_unit(torch) == CompileUnit("/src/csrc/a.cu", "/b/t/a.o", "/b/t/a.o.d")
    assert compile_unit(["-c", "csrc/x.cu", "-o", "b/x.o", "-Xcompiler", "-fPIC", "-I", "inc.cu"]) == \
        CompileUnit("csrc/x.cu", "b/x.o", None)
    for other in (["--version"], ["-shared", "a.o", "-o", "x.so"], ["-dlink", "a.o", "-o", "l.o"],
                  ["-E", "-c", "a.cu", "-o", "a.i"], ["-c", "a.cu", "b.cu"], ["a.cu", "-o", "a"]):
        assert compile_unit(other) is None, other


def test_tu_path_is_relative_to_the_source_root() -> None:
    assert tu_path("csrc/a.cu", "/p", "/p") == "csrc/a.cu"
    assert tu_path("../csrc/a.cu", "/p", "/p/build") == "csrc/a.cu"
    assert tu_path("/tmp/x.cu", "/p", "/p") is None
    assert tu_path("CMakeFiles/CMakeScratch/T/a.cu", "/p", "/p/build") is None


# -- real builds -----------------------------------------------------------------------------------
def _root(root: Path, arch: str = ARCHS):
    return make_root(root, {"shard_ext": RECIPE.format(arch=arch)},
                     {"src/shard_ext": REPO / "tests" / "data" / "shard_ext"})


def _settings(root: Path, toolkit, shards: Path, job: ShardJob | None) -> BuildSettings:
    return BuildSettings(builder=BuilderKind.NATIVE, out_dir=root / "upload", work_root=root / "work",
                         source_cache=root / "sources", cuda_home=toolkit.cuda_home, shard=job, shard_dir=shards)


def _found_per_tu(wheel: Path, tmp: Path) -> list[str]:
    """Each fatbin's targets in the wheel's extension (one fatbin per TU), sorted."""
    from farm.binary.fatbin import read_fatbins

    so = tmp / "x.so"
    with zipfile.ZipFile(wheel) as zf:
        so.write_bytes(zf.read(SO))
    return sorted(fb.targets.canonical() for fb in read_fatbins(so))


@pytest.fixture(scope="session")
def sharded(tmp_path_factory, pypi_toolkit):
    """The unsharded build, then compile shards 0/2 and 1/2 and the link job, in one farm root."""
    root = tmp_path_factory.mktemp("shard")
    config = _root(root)
    recipe = config.recipe("shard_ext")
    shards = root / "shards"
    plain = build_cell(config, recipe, CELL, _settings(root / "plain", pypi_toolkit, shards, None))
    compiled = [build_cell(config, recipe, CELL, _settings(root, pypi_toolkit, shards, ShardJob(2, i)))
                for i in range(2)]
    link = build_cell(config, recipe, CELL, _settings(root / "linked", pypi_toolkit, shards, ShardJob(2)))
    return root, plain, compiled, link


def test_compile_shards_split_the_tus(sharded) -> None:
    root, _, compiled, _ = sharded
    records = [c.shard for c in compiled]
    assert [r["tus"] for r in records] == [["csrc/add.cu", "csrc/ops/negate.cu"], ["csrc/ops/fill.cu", "csrc/scale.cu"]]
    assert all(c.passed and not c.postbuild for c in compiled)  # objects, no wheel postbuilt
    objects = root / "shards" / CELL.id / "objects"
    assert sorted(p.name.split("-")[0] for p in objects.glob("*.o")) == ["0", "0", "1", "1"]
    assert sorted(p.name for p in objects.glob("done-*.json")) == ["done-0.json", "done-1.json"]
    # each compile job ran nvcc on its own TUs only; the others got empty host objects
    log0 = [json.loads(line) for line in (root / "shards" / CELL.id / "log" / "0-of-2.jsonl").read_text().splitlines()]
    assert sorted((r["tu"], r["status"]) for r in log0) == [
        ("csrc/add.cu", "compiled"), ("csrc/ops/fill.cu", "skipped"), ("csrc/ops/negate.cu", "compiled"),
        ("csrc/scale.cu", "skipped")]


def test_link_wheel_asserts_and_matches_the_unsharded_build(sharded, tmp_path) -> None:
    _, plain, _, link = sharded
    assert plain.passed, "\n".join(r.report.render() for r in plain.postbuild)
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    (a,), (b,) = plain.asserted, link.asserted
    assert a.name == b.name  # the same wheel name: the same cell, version and tags
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        ia = json.loads(za.read("shard_ext-1.0.0+cu130.dist-info/_build_info.json"))
        ib = json.loads(zb.read("shard_ext-1.0.0+cu130.dist-info/_build_info.json"))
        assert sorted(za.namelist()) == sorted(zb.namelist())
    assert ia["found"] == ib["found"] == {SO: "sm_80;sm_90"} == ib["expected"]
    assert ib["assertion"]["result"] == "passed"
    # four TUs, each fatbin with both targets, in both wheels
    per_tu = _found_per_tu(b, tmp_path)
    assert len(per_tu) == 4 and per_tu == _found_per_tu(a, tmp_path)
    log = [json.loads(x) for x in (sharded[0] / "shards" / CELL.id / "log" / "link.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in log) == ["served"] * 4


def test_a_shard_built_with_another_arch_list_fails_the_assertion(sharded, pypi_toolkit, tmp_path) -> None:
    """Shard 1 rebuilt from a config that says 8.0 only: the link job's wheel has the cell's union
    (sm_80, sm_90) but two TUs lack sm_90: the per-TU check fails it."""
    root = sharded[0]
    shards = tmp_path / "shards"
    shutil.copytree(root / "shards", shards)
    other = _root(tmp_path / "other", arch="8.0")
    build_cell(other, other.recipe("shard_ext"), CELL, _settings(tmp_path / "other", pypi_toolkit, shards, ShardJob(2, 1)))
    config = _root(tmp_path / "main")
    result = build_cell(config, config.recipe("shard_ext"), CELL,
                        _settings(tmp_path / "main", pypi_toolkit, shards, ShardJob(2)))
    assert not result.passed and not result.asserted
    text = result.postbuild[0].report.render()
    assert "sm_90" in text
    report = result.postbuild[0].to_json()["assertion"]
    (ext,) = report["extensions"]
    assert ext["found"] == "sm_80;sm_90"  # the union looks right; the per-TU check does not
    assert not (tmp_path / "main" / "upload").exists() or not any((tmp_path / "main" / "upload").iterdir())


def test_link_refuses_a_missing_shard_and_names_it(sharded, pypi_toolkit, tmp_path) -> None:
    shards = tmp_path / "shards"
    shutil.copytree(sharded[0] / "shards", shards)
    (shards / CELL.id / "objects" / "done-1.json").unlink()
    config = _root(tmp_path / "r")
    with pytest.raises(UsageError, match=r"compile shard 1/2 has no output"):
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "r", pypi_toolkit, shards, ShardJob(2)))


def test_link_names_the_tu_and_shard_of_a_missing_object(sharded, pypi_toolkit, tmp_path) -> None:
    shards = tmp_path / "shards"
    shutil.copytree(sharded[0] / "shards", shards)
    done = json.loads((shards / CELL.id / "objects" / "done-1.json").read_text())
    gone = min(done["objects"])
    (shards / CELL.id / "objects" / gone).unlink()
    config = _root(tmp_path / "r")
    with pytest.raises(DefectError, match=r"no compile shard made: csrc/\S+\.cu \(compile shard 1/2\)"):
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "r", pypi_toolkit, shards, ShardJob(2)))


def test_cli_checks_the_shard_against_the_recipe(tmp_path, pypi_toolkit, capsys) -> None:
    _root(tmp_path)
    base = ["build", "shard_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
            "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(pypi_toolkit.cuda_home)]
    assert main([*base, "--shard", "0/3"]) == 2
    assert f"splits cell {CELL.id} into 2 compile shards" in capsys.readouterr().err
    assert main([*base, "--shard", "2/2"]) == 2
    assert "need 0 <= I < N" in capsys.readouterr().err


def test_launcher_is_the_module_itself() -> None:
    """The launcher copied into shard folders runs with the standard library alone."""
    source = Path(shard.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "hashlib", "json", "os", "shutil", "subprocess", "sys", "collections",
                       "dataclasses", "pathlib"}
    assert shardjob.CONTAINER_ROOT == "/project"


# -- schedule: compile jobs and link jobs ----------------------------------------------------------
def test_matrix_expands_sharded_cells_into_compile_and_link_jobs(tmp_path, capsys, monkeypatch) -> None:
    from .test_matrix import farm_matrix, make_tree, read_outputs

    root = make_tree(tmp_path, beta="sharding: {jobs: 3, platforms: [linux_x86_64]}\n")
    output = tmp_path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    rc, data, _ = farm_matrix(capsys, root, "beta", "--platform", "linux_x86_64,win_amd64", "--github-output")
    assert rc == 0
    linux = [c for c in data["cells"] if c["platform"] == "linux_x86_64"]
    windows = [c for c in data["cells"] if c["platform"] == "win_amd64"]
    assert linux and windows and all(c["compile_jobs"] == 3 for c in linux)
    assert all("compile_jobs" not in c for c in windows)  # Windows cells build unsharded
    out = read_outputs(output)
    build, link = json.loads(out["shard_0"]), json.loads(out["link"])
    assert data["jobs"] == {"build": 3 * len(linux) + len(windows), "link": len(linux)} == {
        "build": len(build), "link": int(out["link_count"])}
    cid = linux[0]["id"]
    assert [(e["shard"], e["name"]) for e in build if e["id"] == cid] == [
        (f"{i}/3", f"{cid}.shard-{i}-of-3") for i in range(3)]
    assert [e for e in link if e["id"] == cid] == [{**next(e for e in build if e["id"] == cid),
                                                   "shard": "link", "name": f"{cid}.link"}]
    assert all("shard" not in e for e in build if e["platform"] == "win_amd64")


def test_a_wave_counts_every_compile_and_link_job(tmp_path, capsys) -> None:
    """--max-shards 1 is 256 jobs: sharded cells cost N + 1 each and are never split across waves."""
    from farm.schedule.actions import SHARD_SIZE
    from farm.schedule.jobs import cost

    from .test_matrix import farm_matrix, make_tree

    root = make_tree(tmp_path, alpha="sharding: 60\n")
    rc, data, _ = farm_matrix(capsys, root, "alpha", "--platform", "linux_x86_64", "--max-shards", "1")
    assert rc == 0 and data["deferred_cells"]
    n = len(data["cells"])
    assert data["jobs"] == {"build": 60 * n, "link": n}
    assert 61 * n <= SHARD_SIZE < 61 * (n + 1)  # as many whole sharded cells as fit, the rest deferred
    assert cost.__module__ == "farm.schedule.jobs"


def test_plans_route_nvcc_through_the_launcher(tmp_path) -> None:
    """Container plan: the shard folder is mounted and the build sees it there; the native builder
    swaps in this host's paths (farm/build/builders.py:_native_plan)."""
    from farm.build.builders import _native_plan
    from farm.build.plan import PlanOptions, plan_build
    from farm.toolkit.assemble import Toolkit

    config = _root(tmp_path)
    src = tmp_path / "src" / "shard_ext"
    setup = shardjob.prepare(tmp_path / "shards", ShardJob(2, 1), CELL.id, src)
    assert setup.table == assign(TUS, 2) and (setup.directory / "bin" / "farm-nvcc").stat().st_mode & 0o111
    plan = plan_build(config, config.recipe("shard_ext"), CELL, src,
                      PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w", shard=setup))
    env = dict(plan.native.environment)
    assert env["FARM_SHARD_DIR"] == "/opt/farm/shard" and env["FARM_SHARD_ROOT"] == "/project"
    assert env["PYTORCH_NVCC"] == "/opt/farm/shard/bin/farm-nvcc /opt/farm/toolkit/cuda/bin/nvcc"
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/opt/farm/shard/bin/farm-nvcc"
    assert f"--volume {setup.directory}:/opt/farm/shard" in str(plan.options["container-engine"])
    assert "PYTORCH_NVCC" in str(plan.options["environment"]) and "FARM_SHARD_DIR" in plan.config_text
    home = tmp_path / "cuda"
    tk = Toolkit(cuda_home=home, nvcc=home / "bin/nvcc", cuobjdump=home / "bin/cuobjdump", version="13.0.88")
    native = dict(_native_plan(plan, tk, setup).native.environment)
    assert native["FARM_SHARD_DIR"] == str(setup.directory) and native["FARM_SHARD_ROOT"] == str(src)
    assert native["PYTORCH_NVCC"] == f"{setup.directory}/bin/farm-nvcc {home}/bin/nvcc"
    config_json = json.loads((setup.directory / "shard.json").read_text())
    assert (config_json["mode"], config_json["index"], config_json["count"]) == ("compile", 1, 2)


def test_sharded_cibuildwheel_build_under_podman(tmp_path, pypi_toolkit) -> None:
    """The container path: the shard folder is mounted into cibuildwheel's container, where the
    build runs the launcher; the link job's wheel asserts."""

    from .test_builders import podman_image

    image = podman_image()
    config = _root(tmp_path)
    shards = tmp_path / "shards"

    def settings(job: ShardJob, sub: str) -> BuildSettings:
        return BuildSettings(engine="podman", images={"x86_64": image}, out_dir=tmp_path / sub / "upload",
                             work_root=tmp_path / sub / "work", source_cache=tmp_path / "sources",
                             toolkit_root=pypi_toolkit.prefix.parents[1], shard=job, shard_dir=shards)

    compiled = [build_cell(config, config.recipe("shard_ext"), CELL, settings(ShardJob(2, i), f"s{i}"))
                for i in range(2)]
    assert [c.shard["tus"] for c in compiled] == [["csrc/add.cu", "csrc/ops/negate.cu"],
                                                  ["csrc/ops/fill.cu", "csrc/scale.cu"]]
    link = build_cell(config, config.recipe("shard_ext"), CELL, settings(ShardJob(2), "link"))
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    (wheel,) = link.asserted
    assert _found_per_tu(wheel, tmp_path) == ["sm_80;sm_90"] * 4
