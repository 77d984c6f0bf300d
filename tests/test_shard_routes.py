"""Compile sharding by the routes other than torch's $PYTORCH_NVCC, with real nvcc, 2 compile jobs
and a link job each:

- CMake's compiler launcher: tests/data/cmake_ext (three .cu TUs in two folders, built by CMake
  through scikit-build-core, nvcc reached as CMAKE_CUDA_COMPILER_LAUNCHER + CMAKE_CUDA_COMPILER,
  the arch list as CUDAARCHS);
- the PATH shim: tests/data/pathnvcc_ext, whose build runs `nvcc` from PATH itself.

The link job's wheel asserts per TU and carries the unsharded build's targets. Slow: the CMake
build environment installs scikit-build-core and cmake from the package index."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from farm.builder.builders import BuilderKind, BuildResult, BuildSettings, build_cell
from farm.builder.shard import ShardJob
from farm.model.cells import Cell
from farm.toolkit.assemble import Toolkit
from tests.support.buildroot import REPO, make_root

CELL = Cell("cmake_ext", "1.0.0", "13.0", "none", "cp311", "linux_x86_64")
RECIPE = """\
name: cmake_ext
version: '1.0.0'
source:
  path: src/cmake_ext
links_torch: false
sharding: 2
arch:
  list: '8.0;9.0'
build:
  extra_deps: [scikit-build-core, cmake]
"""
SO = "cmake_ext/_C.cpython-311-x86_64-linux-gnu.so"


def _settings(root: Path, toolkit, shards: Path, job: ShardJob | None) -> BuildSettings:
    return BuildSettings(builder=BuilderKind.NATIVE, out_dir=root / "upload", work_root=root / "work",
                         source_cache=root / "sources", cuda_home=toolkit.cuda_home, shard=job, shard_dir=shards,
                         env_root=root.parent / "envs")


def _fatbins(wheel: Path, tmp: Path) -> list[str]:
    from farm.binary.fatbin import read_fatbins

    so = tmp / "x.so"
    with zipfile.ZipFile(wheel) as zf:
        so.write_bytes(zf.read(SO))
    return sorted(fb.targets.canonical() for fb in read_fatbins(so))


@pytest.fixture(scope="module")
def cmake_sharded(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit) -> tuple[Path, BuildResult, list[BuildResult], BuildResult]:
    root = tmp_path_factory.mktemp("cmake")
    config = make_root(root, {"cmake_ext": RECIPE}, {"src/cmake_ext": REPO / "tests" / "data" / "cmake_ext"})
    recipe = config.recipe("cmake_ext")
    shards = root / "shards"
    plain = build_cell(config, recipe, CELL, _settings(root / "plain", pypi_toolkit, shards, None))
    compiled = [build_cell(config, recipe, CELL, _settings(root / f"c{i}", pypi_toolkit, shards, ShardJob(2, i)))
                for i in range(2)]
    link = build_cell(config, recipe, CELL, _settings(root / "linked", pypi_toolkit, shards, ShardJob(2)))
    return root, plain, compiled, link


def test_cmake_compile_shards_each_compile_their_own_tus(cmake_sharded) -> None:
    root, _, compiled, _ = cmake_sharded
    assert all(c.passed and not c.postbuild for c in compiled)  # objects, no wheel postbuilt
    # CMake called the launcher for every TU in both jobs; each compiled only its own with nvcc
    logs = [[json.loads(line) for line in (root / "shards" / CELL.id / "log" / f"{i}-of-2.jsonl").read_text()
             .splitlines()] for i in range(2)]
    compiled_tus = [sorted(r["tu"] for r in log if r["status"] == "compiled") for log in logs]
    assert sorted(compiled_tus[0] + compiled_tus[1]) == ["csrc/add.cu", "csrc/kernels/fill.cu", "csrc/scale.cu"]
    assert all(compiled_tus)
    assert not set(compiled_tus[0]) & set(compiled_tus[1])


def test_cmake_link_wheel_asserts_and_matches_the_unsharded_build(cmake_sharded, tmp_path) -> None:
    _, plain, _, link = cmake_sharded
    assert plain.passed, "\n".join(r.report.render() for r in plain.postbuild)
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    (a,), (b,) = plain.asserted, link.asserted
    assert a.name == b.name
    with zipfile.ZipFile(b) as zb:
        info = json.loads(zb.read("cmake_ext-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["found"] == info["expected"] == {SO: "sm_80;sm_90"}
    per_tu = _fatbins(b, tmp_path)
    assert per_tu == ["sm_80;sm_90"] * 3 == _fatbins(a, tmp_path)
    # and the link job's wheel imports in a fresh venv, as the unsharded one does
    assert [c.passed for c in link.imports] == [True] == [c.passed for c in plain.imports]


PATH_CELL = Cell("pathnvcc_ext", "1.0.0", "13.0", "none", "cp311", "linux_x86_64")
PATH_RECIPE = """\
name: pathnvcc_ext
version: '1.0.0'
source:
  path: src/pathnvcc_ext
links_torch: false
sharding: 2
arch:
  list: '8.0;9.0'
"""
PATH_SO = "pathnvcc_ext/_C.cpython-311-x86_64-linux-gnu.so"


def test_a_build_that_runs_nvcc_from_path_is_sharded_through_the_shim(tmp_path_factory, pypi_toolkit, tmp_path) -> None:
    root = tmp_path_factory.mktemp("pathnvcc")
    config = make_root(root, {"pathnvcc_ext": PATH_RECIPE},
                       {"src/pathnvcc_ext": REPO / "tests" / "data" / "pathnvcc_ext"})
    recipe = config.recipe("pathnvcc_ext")
    shards = root / "shards"
    plain = build_cell(config, recipe, PATH_CELL, _settings(root / "plain", pypi_toolkit, shards, None))
    compiled = [build_cell(config, recipe, PATH_CELL, _settings(root / f"c{i}", pypi_toolkit, shards, ShardJob(2, i)))
                for i in range(2)]
    link = build_cell(config, recipe, PATH_CELL, _settings(root / "linked", pypi_toolkit, shards, ShardJob(2)))
    assert all(c.passed for c in compiled)
    logs = [[json.loads(line) for line in (shards / PATH_CELL.id / "log" / f"{i}-of-2.jsonl").read_text()
             .splitlines()] for i in range(2)]
    # every TU reached the launcher in both jobs (through the shim), and was compiled by its owner only
    assert [sorted(r["tu"] for r in log) for log in logs] == [["csrc/add.cu", "csrc/ops/scale.cu"]] * 2
    assert sorted(r["tu"] for log in logs for r in log if r["status"] == "compiled") == [
        "csrc/add.cu", "csrc/ops/scale.cu"]
    assert plain.passed, "\n".join(r.report.render() for r in plain.postbuild)
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    with zipfile.ZipFile(link.asserted[0]) as zf:
        info = json.loads(zf.read("pathnvcc_ext-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["found"] == info["expected"] == {PATH_SO: "sm_80;sm_90"}
