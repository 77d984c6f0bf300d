"""Compile sharding: the pure partition and nvcc-argv reading, and real sharded builds of a
four-TU CUDA extension with nvcc (N=2): the link job's wheel asserts and carries the targets of the
unsharded build's; a shard built with another arch list fails the per-TU check; a missing shard
or object stops the link job, naming it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.builder import cclaunch, shard, shardjob
from farm.builder.builders import BuilderKind, BuildResult, BuildSettings, build_cell
from farm.builder.shard import (
    CompileUnit,
    ShardJob,
    assign,
    compile_unit,
    owner_of,
    tree_tus,
    tu_path,
)
from farm.cli import main
from farm.errors import UsageError
from farm.fsutil import sha256_file
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.toolkit.assemble import Toolkit
from tests.support.buildroot import REPO, make_root, plan_from_config

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
    assert ShardJob.parse("3/20") == ShardJob(20, 3)
    assert ShardJob.parse("0/2").label == "0/2"
    assert ShardJob(4).is_link
    assert ShardJob(4).label == "link"
    for bad in ("3", "20/20", "0/1", "a/2", "-1/2"):
        with pytest.raises(ValueError, match="is not I/N|need 0 <= I < N"):
            ShardJob.parse(bad)


def test_sorted_round_robin_is_deterministic_and_balanced() -> None:
    tus = [f"csrc/k{i:02d}.cu" for i in range(41)] + [f"other/x{i}.cu" for i in range(7)]
    table = assign(reversed(tus), 20)
    assert table == assign(tus, 20)  # the order the tree is walked in does not matter
    loads = [list(table.values()).count(s) for s in range(20)]
    assert max(loads) - min(loads) <= 1
    assert assign(TUS, 2) == {"csrc/add.cu": 0, "csrc/ops/fill.cu": 1, "csrc/ops/negate.cu": 0, "csrc/scale.cu": 1}
    # a TU the tree did not list: a stable hash, the same in every process
    assert owner_of("build/gen/x.cu", table, 20) == owner_of("build/gen/x.cu", {}, 20) < 20
    assert all(owner_of(tu, table, 20) == table[tu] for tu in tus)


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
def _root(root: Path, arch: str = ARCHS) -> FarmConfig:
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
def sharded(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit,
            ) -> tuple[Path, BuildResult, list[BuildResult], BuildResult]:
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
    assert [sorted(u["tu"] for u in r["units"]) for r in records] == [
        ["csrc/add.cu", "csrc/ops/negate.cu"], ["csrc/ops/fill.cu", "csrc/scale.cu"]]
    # each unit carries its object's, its source's and its in-tree includes' sha256, and its flags
    fill = next(u for u in records[1]["units"] if u["tu"] == "csrc/ops/fill.cu")
    src = root / "src" / "shard_ext"
    assert fill["inputs"] == {"csrc/ops/values.h": sha256_file(src / "csrc/ops/values.h")}
    assert fill["source_sha256"] == sha256_file(src / "csrc/ops/fill.cu")
    assert fill["object_sha256"] == sha256_file(root / "shards" / CELL.id / "objects" / fill["file"])
    assert "-gencode=arch=compute_90,code=sm_90" in fill["flags"]
    assert not any("fill.o" in f for f in fill["flags"])
    assert {r["spec"] for r in records} == {compiled[0].plan.spec.digest}
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
    assert len(per_tu) == 4
    assert per_tu == _found_per_tu(a, tmp_path)
    log = [json.loads(x) for x in (sharded[0] / "shards" / CELL.id / "log" / "link.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in log) == ["served"] * 4
    assert all(r["rechecked"] for r in log)  # 4 TUs (at most 8): each recompiled uncached, the same bytes


def test_a_shard_built_with_another_arch_list_is_refused_by_the_link_job(sharded, pypi_toolkit, tmp_path) -> None:
    """Shard 1 rebuilt from a config that says 8.0 only: its build spec differs from the link
    job's, so the link job refuses it before building (the per-TU check in postbuild would fail
    the wheel too, but the shard never gets that far)."""
    root = sharded[0]
    shards = tmp_path / "shards"
    shutil.copytree(root / "shards", shards)
    other = _root(tmp_path / "other", arch="8.0")
    build_cell(other, other.recipe("shard_ext"), CELL, _settings(tmp_path / "other", pypi_toolkit, shards, ShardJob(2, 1)))
    config = _root(tmp_path / "main")
    with pytest.raises(UsageError, match=r"compile shard 1/2 was built from another build spec"):
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "main", pypi_toolkit, shards, ShardJob(2)))
    assert not (tmp_path / "main" / "upload").exists()


@pytest.mark.parametrize("edit", ["kernel", "header"])
def test_a_shard_compiled_from_a_changed_tree_is_refused(sharded, pypi_toolkit, tmp_path, monkeypatch, edit) -> None:
    """The attack: compile shard 1/2 compiles a tree where one kernel (or a header it includes)
    was changed after farm prepared it, same paths, same recipe and build spec (a hostile build
    step or a dirty runner: for a git source the spec names the commit, not the files). The link
    job, on the original tree, recomputes the source hashes and refuses the shard, naming the TU
    (or header) and the shard; nothing is linked, asserted or published. Then the evil object goes
    into the true shard's output under a consistently rewritten record: the link build recompiles
    it (every TU of a build of at most 8) and refuses it, naming both sha256s."""
    from farm.builder import builders
    from farm.builder.prepare import prepare_source as prepare

    shards = tmp_path / "shards"
    shutil.copytree(sharded[0] / "shards", shards)

    def tampered(*args: Any, **kwargs: Any) -> Path:
        src = prepare(*args, **kwargs)
        changed = src / "csrc" / "ops" / ("fill.cu" if edit == "kernel" else "values.h")
        text = changed.read_text()
        changed.write_text(text.replace("= SHARD_EXT_FILL_VALUE;", "= 1e30f;") if edit == "kernel" else
                           text.replace("0.5f", "1e30f"))
        assert changed.read_text() != text
        return src

    config = _root(tmp_path / "main")
    with monkeypatch.context() as m:
        m.setattr(builders, "prepare_source", tampered)
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "evil", pypi_toolkit, shards,
                                                                     ShardJob(2, 1)))
    name = "csrc/ops/fill.cu" if edit == "kernel" else "csrc/ops/values.h"
    with pytest.raises(UsageError, match=rf"compile shard 1/2 compiled TU csrc/ops/fill.cu from other sources than "
                                         rf"this tree: {name} \(sha256 [0-9a-f]{{12}} here") as caught:
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "main", pypi_toolkit, shards, ShardJob(2)))
    assert "--shard 1/2" in (caught.value.hint or "")
    assert not (tmp_path / "main" / "upload").exists()
    assert not (tmp_path / "main" / "work" / CELL.id / "wheelhouse").exists()  # refused before any build

    # The consistent forgery: the evil object in the true shard's output, the record's object sha256
    # rewritten to match, its source hashes kept. It proves; the link build's fresh compile refuses it.
    forged = tmp_path / "forged"
    shutil.copytree(sharded[0] / "shards", forged)

    def fill(shards: Path) -> dict[str, Any]:
        done = json.loads((shards / CELL.id / "objects" / "done-1.json").read_text())
        return next(u for u in done["units"] if u["tu"] == "csrc/ops/fill.cu")

    evil, true = fill(shards), fill(forged)
    assert evil["object_sha256"] != true["object_sha256"]
    assert evil["file"] == true["file"]
    shutil.copy(shards / CELL.id / "objects" / evil["file"], forged / CELL.id / "objects" / true["file"])
    _edit_done(forged, 1, lambda d: {**d, "units": [
        {**u, "object_sha256": evil["object_sha256"]} if u["tu"] == "csrc/ops/fill.cu" else u for u in d["units"]]})
    with pytest.raises(UsageError, match=rf"the link build refused 1 object\(s\) of the compile shards: TU "
                                         rf"csrc/ops/fill\.cu of compile shard 1/2: a fresh uncached compile makes "
                                         rf"sha256 {true['object_sha256']}, the shard's object has sha256 "
                                         rf"{evil['object_sha256']}") as caught:
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "forger", pypi_toolkit, forged,
                                                                     ShardJob(2)))
    assert caught.value.exit_code == 2
    assert not (tmp_path / "forger" / "upload").exists()


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
    gone = min(u["file"] for u in done["units"])
    (shards / CELL.id / "objects" / gone).unlink()
    config = _root(tmp_path / "r")
    with pytest.raises(UsageError, match=r"compile shard 1/2 did not leave the object it recorded for TU csrc/\S+\.cu"
                                         r": \S+ is missing"):
        build_cell(config, config.recipe("shard_ext"), CELL, _settings(tmp_path / "r", pypi_toolkit, shards, ShardJob(2)))


def test_cli_checks_the_shard_against_the_recipe(tmp_path, pypi_toolkit, capsys) -> None:
    _root(tmp_path)
    base = ["build", "shard_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
            "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(pypi_toolkit.cuda_home)]
    assert main([*base, "--shard", "0/3"]) == 2
    assert f"splits cell {CELL.id} into 2 compile shards" in capsys.readouterr().err
    assert main([*base, "--shard", "2/2"]) == 2
    assert "need 0 <= I < N" in capsys.readouterr().err


def test_cli_compile_shard_then_a_forged_record_refused_by_the_link_job(sharded, tmp_path, pypi_toolkit,
                                                                         capsys) -> None:
    """Through `farm build`: a compile shard reports its TUs; a link job whose shard record was
    replaced by a JSON list exits 2 with the shard named and its fix, never a traceback."""
    _root(tmp_path)
    shards = tmp_path / "shards"
    base = ["build", "shard_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
            "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(pypi_toolkit.cuda_home),
            "--shard-dir", str(shards)]
    assert main([*base, "--shard", "0/2"]) == 0
    assert f"{CELL.id}: compile shard 0/2: 2 TU(s) compiled into" in capsys.readouterr().out
    shutil.copy(sharded[0] / "shards" / CELL.id / "objects" / "done-1.json", shards / CELL.id / "objects")
    for name in (sharded[0] / "shards" / CELL.id / "objects").glob("1-*.o"):
        shutil.copy(name, shards / CELL.id / "objects")
    (shards / CELL.id / "objects" / "done-1.json").write_text("[1, 2]")
    assert main([*base, "--link"]) == 2
    err = capsys.readouterr().err
    assert "compile shard 1/2's record is not one farm wrote: record: expected an object, got list" in err
    assert "fix: rerun compile shard 1/2" in err
    assert "Traceback" not in err


def test_launcher_is_the_module_itself() -> None:
    """The launcher copied into shard folders runs with the standard library alone."""
    assert shard.FRESH == cclaunch.FRESH  # one variable, spelt in both stdlib-only launchers
    source = Path(shard.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "contextlib", "hashlib", "json", "os", "re", "shutil", "subprocess", "sys",
                       "collections", "dataclasses", "pathlib"}
    assert shardjob.CONTAINER_ROOT == "/project"


# -- schedule: compile jobs and link jobs ----------------------------------------------------------
def test_matrix_expands_sharded_cells_into_compile_and_link_jobs(tmp_path, capsys, monkeypatch) -> None:
    from farm.schedule.slices import slice_plan

    from .test_matrix import farm_matrix, make_tree, read_outputs

    root = make_tree(tmp_path, beta="sharding: {jobs: 3, platforms: [linux_x86_64]}\n")
    output = tmp_path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    rc, data, _ = farm_matrix(capsys, root, "beta", "--platform", "linux_x86_64,win_amd64", "--github-output")
    assert rc == 0
    linux = [c for c in data["cells"] if c["platform"] == "linux_x86_64"]
    windows = [c for c in data["cells"] if c["platform"] == "win_amd64"]
    assert linux
    assert windows
    assert all(c["compile_jobs"] == 3 for c in linux)
    assert all("compile_jobs" not in c for c in windows)  # Windows cells build unsharded
    out = read_outputs(output)
    build, link = slice_plan(data, "0"), slice_plan(data, "link")
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
    from farm.schedule.jobs import cost
    from farm.schedule.slices import SHARD_SIZE

    from .test_matrix import farm_matrix, make_tree

    root = make_tree(tmp_path, alpha="sharding: 60\n")
    rc, data, _ = farm_matrix(capsys, root, "alpha", "--platform", "linux_x86_64", "--max-shards", "1")
    assert rc == 0
    assert data["deferred_cells"]
    n = len(data["cells"])
    assert data["jobs"] == {"build": 60 * n, "link": n}
    assert 61 * n <= SHARD_SIZE < 61 * (n + 1)  # as many whole sharded cells as fit, the rest deferred
    assert cost.__module__ == "farm.schedule.jobs"


def test_plans_route_nvcc_through_the_launcher(tmp_path) -> None:
    """Container plan: the shard folder is mounted and the build sees it there; the native builder
    swaps in this host's paths (farm/builder/builders.py:_native_plan)."""
    from farm.builder.builders import _native_plan
    from farm.builder.plan import PlanOptions
    from farm.toolkit.assemble import Toolkit

    config = _root(tmp_path)
    src = tmp_path / "src" / "shard_ext"
    setup = shardjob.prepare(tmp_path / "shards", ShardJob(2, 1), CELL.id, src, "0" * 64)
    assert setup.table == assign(TUS, 2)
    assert (setup.directory / "bin" / "farm-nvcc").stat().st_mode & 0o111
    plan = plan_from_config(config, config.recipe("shard_ext"), CELL, src,
                            PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w", shard=setup))
    assert plan.native is not None
    env = dict(plan.native.environment)
    assert env["FARM_SHARD_DIR"] == "/opt/farm/shard"
    assert env["FARM_SHARD_ROOT"] == "/project"
    # the shard launcher's real compiler is farm's nvcc launcher: every Linux build compiles through it
    assert env["PYTORCH_NVCC"] == "/opt/farm/shard/bin/farm-nvcc /opt/farm/compile-run/bin/nvcc"
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/opt/farm/shard/bin/farm-nvcc;/opt/farm/compile-run/bin/launch"
    assert f"--volume {setup.directory}:/opt/farm/shard" in str(plan.options["container-engine"])
    assert "PYTORCH_NVCC" in str(plan.options["environment"])
    assert "FARM_SHARD_DIR" in plan.config_text
    home = tmp_path / "cuda"
    tk = Toolkit(cuda_home=home, nvcc=home / "bin/nvcc", cuobjdump=home / "bin/cuobjdump", version="13.0.88")
    native_steps = _native_plan(plan, str(tk.cuda_home), setup).native
    assert native_steps is not None
    native = dict(native_steps.environment)
    assert native["FARM_SHARD_DIR"] == str(setup.directory)
    assert native["FARM_SHARD_ROOT"] == str(src)
    assert native["PYTORCH_NVCC"] == f"{setup.directory}/bin/farm-nvcc {tmp_path / 'w'}/compile-cache/bin/nvcc"
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
    assert [sorted(u["tu"] for u in c.shard["units"]) if c.shard else None for c in compiled] == [
        ["csrc/add.cu", "csrc/ops/negate.cu"], ["csrc/ops/fill.cu", "csrc/scale.cu"]]
    link = build_cell(config, config.recipe("shard_ext"), CELL, settings(ShardJob(2), "link"))
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    (wheel,) = link.asserted
    assert _found_per_tu(wheel, tmp_path) == ["sm_80;sm_90"] * 4


# -- forged shard outputs (fast: objects and records made here, the link job's checks are real) ----
ARGS = ["-c", "{tu}", "-o", "build/{stem}.o", "-Xcompiler", "-fPIC", "-O2", "-gencode=arch=compute_80,code=sm_80"]


def _argv(tu: str) -> list[str]:
    return [a.format(tu=tu, stem=Path(tu).stem) for a in ARGS]


def _forge_shards(tmp_path: Path) -> tuple[Path, Path]:
    """A source tree and the outputs two compile shards would leave for it, each record true."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "tests" / "data" / "shard_ext", src)
    shards = tmp_path / "shards"
    objects = shards / CELL.id / shard.OBJECTS
    objects.mkdir(parents=True)
    table = assign(tree_tus(src), 2)
    for i in range(2):
        units = []
        for tu in sorted(t for t, owner in table.items() if owner == i):
            args = _argv(tu)
            unit = compile_unit(args)
            assert unit is not None
            file = shard.object_name(i, tu, unit.output)
            (objects / file).write_bytes(f"object of {tu}".encode())
            inputs = {"csrc/ops/values.h": sha256_file(src / "csrc/ops/values.h")} if tu.endswith("fill.cu") else {}
            units.append(shardjob.Unit(tu, Path(unit.output).name, file, sha256_file(objects / file),
                                       sha256_file(src / tu), inputs, tuple(shard.compile_flags(args, unit, str(src)))))
        record = shardjob.DoneRecord(cell=CELL.id, index=i, count=2, digest=shard.table_digest(table, 2),
                                     spec="5" * 64, units=tuple(units), skipped=2)
        (objects / shard.done_name(i)).write_text(json.dumps(record.to_json(), indent=1))
    return src, shards


def _link(src: Path, shards: Path) -> shardjob.ShardSetup:
    return shardjob.prepare(shards, ShardJob(2), CELL.id, src, "5" * 64)


def _edit_done(shards: Path, index: int, change) -> None:
    path = shards / CELL.id / shard.OBJECTS / shard.done_name(index)
    data = json.loads(path.read_text())
    path.write_text(json.dumps(change(data)) if callable(change) else change)


def test_true_shard_records_are_proven(tmp_path) -> None:
    src, shards = _forge_shards(tmp_path)
    setup = _link(src, shards)
    assert sorted(u.tu for u in setup.proofs.values()) == TUS
    config = json.loads((setup.directory / shard.CONFIG).read_text())
    assert set(config["proofs"]) == set(setup.proofs)
    assert config["spec"] == "5" * 64


def _swap_objects(src: Path, shards: Path) -> None:
    a, b = sorted((shards / CELL.id / shard.OBJECTS).glob("0-*.o"))
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


def _first_unit(field: str, value: object) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(data: dict[str, Any]) -> dict[str, Any]:
        data["units"][0][field] = value
        return data
    return change


FORGERIES = {
    "objects swapped": (_swap_objects, (r"compile shard 0/2 did not leave the object it recorded for TU csrc/add\.cu"
                                       r": \S+ is not the one it compiled")),
    "object hash edited": (lambda src, sh: _edit_done(sh, 1, _first_unit("object_sha256", "a" * 64)),
                           r"compile shard 1/2 did not leave the object it recorded for TU csrc/ops/fill\.cu"),
    "source edited": (lambda src, sh: (src / "csrc/scale.cu").write_text("// changed\n"),
                      r"compile shard 1/2 compiled TU csrc/scale\.cu from other sources than this tree: csrc/scale\.cu"),
    "header edited": (lambda src, sh: (src / "csrc/ops/values.h").write_text("#define SHARD_EXT_FILL_VALUE 2\n"),
                      (r"compile shard 1/2 compiled TU csrc/ops/fill\.cu from other sources than this tree: "
                      r"csrc/ops/values\.h \(sha256 \w+ here")),
    "source hash edited": (lambda src, sh: _edit_done(sh, 0, _first_unit("source_sha256", "b" * 64)),
                           r"compile shard 0/2 compiled TU csrc/add\.cu from other sources"),
    "record is a list": (lambda src, sh: _edit_done(sh, 1, "[1, 2]"), r"record is not one farm wrote: record: expected an object, got list"),
    "objects: 5 (an old record)": (lambda src, sh: _edit_done(sh, 1, lambda d: {**d, "version": 1, "objects": 5}),
                                   r"version: must be 2 with job 'compile'"),
    "units: 5": (lambda src, sh: _edit_done(sh, 1, lambda d: {**d, "units": 5}), r"units: expected an array, got int"),
    "flags not strings": (lambda src, sh: _edit_done(sh, 0, _first_unit("flags", [1])),
                          r"units/0/flags/0: expected string, got int"),
    "a TU outside the tree": (lambda src, sh: _edit_done(sh, 0, _first_unit("tu", "../../etc/passwd")),
                              r"units/0/tu: must be a path inside the source tree"),
    "a TU of another shard": (lambda src, sh: _edit_done(sh, 0, _first_unit("tu", "csrc/scale.cu")),
                              r"compile shard 0/2 claims TU csrc/scale\.cu, which compile shard 1/2 owns"),
    "another spec": (lambda src, sh: _edit_done(sh, 0, lambda d: {**d, "spec": "6" * 64}),
                     r"compile shard 0/2 was built from another build spec \(666666666666; this link job's: 555555555555\)"),
    "not JSON": (lambda src, sh: _edit_done(sh, 0, "{"), r"compile shard 0/2's record is not JSON"),
    "nested a million deep": (lambda src, sh: _edit_done(sh, 0, "[" * 1_000_000), r"record is not JSON"),
    "a key farm does not write": (lambda src, sh: _edit_done(sh, 0, lambda d: {**d, "trusted": True}),
                                  r"record: holds keys farm does not write \('trusted'\)"),
    "a negative count": (lambda src, sh: _edit_done(sh, 0, lambda d: {**d, "skipped": -1}),
                         r"skipped: must be a count, not -1"),
    "count is a bool": (lambda src, sh: _edit_done(sh, 0, lambda d: {**d, "skipped": True}),
                        r"skipped: expected .*, got bool"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forged_shard_outputs_are_refused_before_the_link_build(tmp_path, forgery) -> None:
    src, shards = _forge_shards(tmp_path)
    forge, message = FORGERIES[forgery]
    forge(src, shards)
    with pytest.raises(UsageError, match=message) as caught:
        _link(src, shards)
    assert caught.value.exit_code == 2
    assert caught.value.hint


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_record_that_is_a_link_or_a_fifo_is_refused(tmp_path, kind) -> None:
    """A link is never followed; a FIFO is refused at once (reading it would wait forever)."""
    src, shards = _forge_shards(tmp_path)
    done = shards / CELL.id / shard.OBJECTS / shard.done_name(1)
    real = tmp_path / "elsewhere.json"
    done.rename(real)
    if kind == "link":
        done.symlink_to(real)
    else:
        os.mkfifo(done)
    with pytest.raises(UsageError, match=r"compile shard 1/2's record is not a regular file"):
        _link(src, shards)


# The compiler of the forged shards' fast tests: it makes "object of TU" as _forge_shards recorded
# (the launcher's recompile of the TUs shard.json samples; nvcc's is tested in the slow tests)
COMPILER = """#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -c) src=$2; shift;; -o) out=$2; shift;; esac; shift; done
printf 'object of %s' "$src" > "$out"
"""


def _serve(setup: shardjob.ShardSetup, src: Path, tu: str, args: list[str]) -> int:
    """The link build's nvcc call for ``tu``, through the real launcher."""
    (src / "build").mkdir(exist_ok=True)
    compiler = src.parent / "compiler"
    compiler.write_text(COMPILER)
    compiler.chmod(0o755)
    cwd = Path.cwd()
    os.chdir(src)
    try:
        return shard.launch([str(setup.directory / shard.LAUNCHER), str(compiler), *args],
                            {"FARM_SHARD_DIR": str(setup.directory), "FARM_SHARD_ROOT": str(src)})
    finally:
        os.chdir(cwd)


def test_the_launcher_serves_proven_objects_and_refuses_other_flags(tmp_path, capsys) -> None:
    src, shards = _forge_shards(tmp_path)
    setup = _link(src, shards)
    for tu in TUS[:3]:
        assert _serve(setup, src, tu, _argv(tu)) == 0
    assert (src / "build/add.o").read_bytes() == b"object of csrc/add.cu"
    # the link build compiles scale.cu with another flag than compile shard 1 did
    assert _serve(setup, src, "csrc/scale.cu", [*_argv("csrc/scale.cu"), "-DFAST=1"]) == 1
    assert "TU csrc/scale.cu of compile shard 1/2: compiled with other flags" in capsys.readouterr().err
    assert not (src / "build/scale.o").exists()
    with pytest.raises(UsageError, match=r"refused 1 object\(s\) of the compile shards: TU csrc/scale\.cu of compile "
                                         r"shard 1/2: compiled with other flags: .*'-DFAST=1'"):
        shardjob.finish_link(setup, None)


def test_a_consistently_forged_record_is_refused_by_the_recompile(tmp_path, capsys) -> None:
    """Compile shard 0's object of csrc/add.cu replaced by another one and its sha256 rewritten
    in the record, the source hashes kept: the record proves, and the launcher's fresh compile
    (every TU of a build of at most 8) makes other bytes, so the object is refused, both named."""
    src, shards = _forge_shards(tmp_path)
    forged = b"object of some other kernel"
    file = next(u["file"] for u in json.loads((shards / CELL.id / "objects/done-0.json").read_text())["units"]
                if u["tu"] == "csrc/add.cu")
    (shards / CELL.id / shard.OBJECTS / file).write_bytes(forged)
    _edit_done(shards, 0, lambda d: {**d, "units": [
        {**u, "object_sha256": hashlib.sha256(forged).hexdigest()} if u["tu"] == "csrc/add.cu" else u
        for u in d["units"]]})
    setup = _link(src, shards)
    assert json.loads((setup.directory / shard.CONFIG).read_text())["recheck"] == sorted(setup.proofs)
    assert _serve(setup, src, "csrc/add.cu", _argv("csrc/add.cu")) == 1
    fresh, recorded = hashlib.sha256(b"object of csrc/add.cu").hexdigest(), hashlib.sha256(forged).hexdigest()
    assert (f"TU csrc/add.cu of compile shard 0/2: a fresh uncached compile makes sha256 {fresh}, the shard's "
            f"object has sha256 {recorded}") in capsys.readouterr().err
    assert not (src / "build/add.o").exists()  # never left for the build to link
    assert _serve(setup, src, "csrc/scale.cu", _argv("csrc/scale.cu")) == 0
    with pytest.raises(UsageError, match=rf"refused 1 object\(s\) of the compile shards: TU csrc/add\.cu of compile "
                                         rf"shard 0/2: a fresh uncached compile makes sha256 {fresh}") as caught:
        shardjob.finish_link(setup, None)
    assert caught.value.exit_code == 2
    assert "rerun the named shards" in (caught.value.hint or "")


def test_the_launcher_refuses_an_object_changed_after_the_check(tmp_path, capsys) -> None:
    src, shards = _forge_shards(tmp_path)
    setup = _link(src, shards)
    (shards / CELL.id / shard.OBJECTS / next(f for f, u in setup.proofs.items() if u.tu == "csrc/add.cu")).write_bytes(b"x")
    assert _serve(setup, src, "csrc/add.cu", _argv("csrc/add.cu")) == 1
    assert "is not the one the shard recorded" in capsys.readouterr().err
    assert not (src / "build/add.o").exists()


def test_empty_shard_flag_is_refused_not_an_unsharded_build(tmp_path, capsys) -> None:
    assert main(["build", "shard_ext", "--root", str(tmp_path), "--shard", ""]) == 2
    assert "'' is not I/N" in capsys.readouterr().err


def test_compile_flags_leave_out_outputs_and_make_the_root_relative() -> None:
    args = ["--generate-dependencies-with-compile", "--dependency-output", "/src/build/a.o.d", "-MT", "/src/build/a.o",
            "-I/src/csrc", "-isystem", "/env/torch/include", "-c", "/src/csrc/a.cu", "-o", "/src/build/a.o", "-O3"]
    unit = compile_unit(args)
    assert unit is not None
    assert shard.compile_flags(args, unit, "/src") == ["-I$ROOT/csrc", "-isystem", "/env/torch/include", "-c", "-O3"]


def test_depfile_inputs_keep_the_tree_only() -> None:
    text = "build/a.o : csrc/a.cu csrc/my\\ dir/k.h \\\n  /usr/include/stdio.h ../outside.h build/CMakeFiles/x.h\n"
    assert shard.depfile_inputs(text, "/p", "/p") == ["csrc/a.cu", "csrc/my dir/k.h"]


def test_a_header_the_build_generates_is_checked_when_it_exists(tmp_path, capsys) -> None:
    """A TU of the tree includes a header the build writes (absent before the build): the link job
    cannot hash it before building, so the launcher does as it serves the object."""
    src, shards = _forge_shards(tmp_path)
    gen = src / "build" / "gen" / "config.h"
    _edit_done(shards, 0, lambda d: {**d, "units": [
        {**u, "inputs": {"build/gen/config.h": hashlib.sha256(b"#define N 4\n").hexdigest()}} for u in d["units"]]})
    setup = _link(src, shards)  # proven as far as the tree goes
    gen.parent.mkdir(parents=True)
    gen.write_bytes(b"#define N 8\n")  # the link build generated something else
    assert _serve(setup, src, "csrc/add.cu", _argv("csrc/add.cu")) == 1
    assert "its sources differ from this tree: build/gen/config.h (sha256" in capsys.readouterr().err
    gen.write_bytes(b"#define N 4\n")
    assert _serve(setup, src, "csrc/add.cu", _argv("csrc/add.cu")) == 0
