"""``farm build --probe``: the first TU of each extension compiled by the real nvcc with the
build's own flags, then read by both readers and judged against the cell's list; no wheel, no
ledger entry. The real probes build a two-extension variant of the sharding tests' package."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.binary.archrule import Expected, FamilyTargets
from farm.builder import shard
from farm.builder.builders import BuilderKind, BuildResult, BuildSettings, build_cell
from farm.builder.buildprobe import _expected_for
from farm.builder.shard import claim_key, extension_key
from farm.cli import main
from farm.model.arch import ArchList
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.toolkit.assemble import Toolkit
from tests.support.buildroot import REPO, make_root

CELL = Cell("probe_ext", "1.0.0", "13.0", "none", "cp311", "linux_x86_64")
RECIPE = """\
name: probe_ext
version: '1.0.0'
source:
  path: src/probe_ext
links_torch: false
arch:
  list: '8.0;9.0'
{extra}"""
# Two extensions, named as torch's build names them in every nvcc call; `_ops` may add its own flags.
SETUP = """\
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup
setup(
    ext_modules=[
        CUDAExtension("shard_ext._C", ["csrc/module.cpp", "csrc/add.cu", "csrc/scale.cu"],
                      nvcc_flags=["-DTORCH_EXTENSION_NAME=_C"]),
        CUDAExtension("shard_ext._ops", ["csrc/ops/fill.cu", "csrc/ops/negate.cu"],
                      nvcc_flags=["-DTORCH_EXTENSION_NAME=_ops", *{ops_flags!r}]),
    ],
    cmdclass={{"build_ext": BuildExtension}},
)
"""
OWN_LIST = ["-gencode=arch=compute_80,code=sm_80"]  # a build that replaces the cell's list with its own
# a wrong review: the lint is told the override is safe, so only the objects can tell
IGNORED = """\
lint_ignore:
  - rule: arch-override
    path: setup.py
    reason: reviewed wrongly on purpose
"""


def _root(root: Path, ops_flags: list[str], extra: str = "") -> FarmConfig:
    config = make_root(root, {"probe_ext": RECIPE.format(extra=extra)},
                       {"src/probe_ext": REPO / "tests" / "data" / "shard_ext"})
    (root / "src" / "probe_ext" / "setup.py").write_text(SETUP.format(ops_flags=ops_flags))
    return config


def _probe(root: Path, toolkit: Toolkit, ops_flags: list[str], extra: str = "") -> BuildResult:
    config = _root(root, ops_flags, extra)
    settings = BuildSettings(builder=BuilderKind.NATIVE, out_dir=root / "upload", work_root=root / "work",
                             source_cache=root / "sources", cuda_home=toolkit.cuda_home, shard_dir=root / "shards",
                             probe=True)
    return build_cell(config, config.recipe("probe_ext"), CELL, settings)


# -- pure ------------------------------------------------------------------------------------------
def test_the_extension_is_torchs_name_else_the_cmake_target_else_the_flags() -> None:
    assert extension_key(["-O2", "-DTORCH_EXTENSION_NAME=_C", "-c"]) == "_C"
    assert extension_key(["-D", "TORCH_EXTENSION_NAME=ops.x", "-O2"]) == "ops.x"
    # natten names itself in a CMake build: torch's name first
    assert extension_key(["-DTORCH_EXTENSION_NAME=libnatten"], "CMakeFiles/natten.dir/src/a.cu.o") == "libnatten"
    assert extension_key(["-O2"], "CMakeFiles/pyg.dir/pyg_lib/csrc/ops/cuda/matmul.cu.o") == "pyg"
    assert extension_key(["-O2"], "sub/CMakeFiles/_ops.dir/csrc/fill.cu.o") == "_ops"
    plain, other = extension_key(["-O2", "-DA=1"]), extension_key(["-O2", "-DA=2"])
    assert plain.startswith("flags-")
    assert plain != other
    assert plain == extension_key(["-O2", "-DA=1"], "build/temp/fill.o")


def test_a_probe_compiles_each_torch_extension_once_and_each_flag_set_of_a_cmake_target() -> None:
    torch_a = claim_key(["-DTORCH_EXTENSION_NAME=_C", "-DA=1"], "a.o")
    assert torch_a == claim_key(["-DTORCH_EXTENSION_NAME=_C", "-DA=2"], "b.o") == "_C"
    # two targets with the same flags (static libraries: no <target>_EXPORTS) are two claims
    assert claim_key(["-O2"], "CMakeFiles/a.dir/x.cu.o") != claim_key(["-O2"], "CMakeFiles/b.dir/x.cu.o")
    # one target, a source with its own flags (set_source_files_properties): compiled too
    same = claim_key(["-O2"], "CMakeFiles/a.dir/x.cu.o")
    assert same == claim_key(["-O2"], "CMakeFiles/a.dir/y.cu.o")
    assert same != claim_key(["-O2", "--generate-code=arch=compute_90a,code=sm_90a"], "CMakeFiles/a.dir/z.cu.o")


def test_a_tu_is_judged_by_its_family_then_its_extensions_list_then_the_cells() -> None:
    cell, own, fam = ArchList.parse("8.0;9.0"), ArchList.parse("9.0a"), ArchList.parse("12.0")
    expected = Expected(cell, per_extension=(("*_qattn_sm90*", own),),
                        families=(FamilyTargets("fp4", ("csrc/fp4/gemm.cu",), fam),))
    assert _expected_for(expected, "_C", "csrc/a.cu") == (cell, "the cell's list")
    assert _expected_for(expected, "_qattn_sm90", "csrc/a.cu") == (own, "extensions: '*_qattn_sm90*'")
    assert _expected_for(expected, "_C", "csrc/fp4/gemm.cu") == (fam, "kernel family fp4")


def test_a_generated_tu_is_judged_by_its_familys_glob_and_a_shared_one_by_all_its_families() -> None:
    cell = ArchList.parse("8.0;9.0;10.0;12.0")
    expected = Expected(cell, families=(
        FamilyTargets("MACHETE_ARCHS", (), ArchList.parse("9.0a"), ("csrc/machete/generated/*.cu",)),
        FamilyTargets("FP4_SM120_ARCHS", ("csrc/fp4/quant.cu",), ArchList.parse("12.0f")),
        FamilyTargets("FP4_SM100_ARCHS", ("csrc/fp4/quant.cu",), ArchList.parse("10.0f"))))
    assert _expected_for(expected, "_C", "csrc/machete/generated/machete_mm_impl_part1.cu") == (
        ArchList.parse("9.0a"), "kernel family MACHETE_ARCHS")
    assert _expected_for(expected, "_C", "csrc/fp4/quant.cu") == (
        ArchList.parse("10.0f;12.0f"), "kernel family FP4_SM120_ARCHS + FP4_SM100_ARCHS")


# -- real probes (nvcc) ----------------------------------------------------------------------------
def test_a_probe_compiles_the_first_tu_of_each_extension_and_makes_no_wheel(tmp_path, pypi_toolkit) -> None:
    result = _probe(tmp_path, pypi_toolkit, [])
    probe = result.probe
    assert probe is not None
    assert probe.passed
    assert result.passed
    assert sorted(u.extension for u in probe.units) == ["_C", "_ops"]
    assert probe.stand_ins == 2  # one of each extension's two TUs
    for unit in probe.units:
        assert unit.tu in {"csrc/add.cu", "csrc/scale.cu"} if unit.extension == "_C" else \
            unit.tu in {"csrc/ops/fill.cu", "csrc/ops/negate.cu"}
        assert unit.found.canonical() == unit.expected.canonical() == "sm_80;sm_90"
    # nothing a publisher could pick up: no wheel anywhere, no ledger fragment, the ledger untouched
    assert result.built == ()
    assert result.postbuild == ()
    assert not list(tmp_path.rglob("*.whl"))
    assert not (tmp_path / "upload").exists()
    assert (tmp_path / "ledger.jsonl").read_text() == ""
    log = (tmp_path / "shards" / "probe" / CELL.id / "log" / "probe.jsonl").read_text()
    assert log.count('"status":"compiled"') == 2
    assert log.count('"status":"skipped"') == 2


def test_a_probe_fails_an_extension_that_drops_the_cells_list_and_names_it(tmp_path, pypi_toolkit, capsys) -> None:
    _root(tmp_path, OWN_LIST, IGNORED)
    argv = ["build", "probe_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
            "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(pypi_toolkit.cuda_home),
            "--out", str(tmp_path / "upload"), "--probe", "--no-compile-cache"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"{CELL.id}: PROBE (no wheel, nothing published)" in out
    assert "  _C: csrc/" in out
    assert "expected sm_80;sm_90 (the cell's list): ok" in out
    assert "  _ops: csrc/ops/" in out
    assert "found sm_80, expected sm_80;sm_90 (the cell's list): FAILED" in out
    assert "lacks requested sm_90" in out
    assert not list(tmp_path.rglob("*.whl"))
    # the recipe declares that extension's own list: probed again (nothing kept from the first
    # probe: its claims and objects are cleared), the extension then passes
    _root(tmp_path, OWN_LIST, IGNORED + "extensions:\n  '*_ops*': '8.0'\n")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "found sm_80, expected sm_80 (extensions: '*_ops*'): ok" in out
    assert len(list((tmp_path / ".cache" / "shards" / "probe" / CELL.id / shard.OBJECTS).glob("*.o"))) == 2


def test_a_build_that_stops_before_nvcc_is_named_so_with_its_own_error_once(tmp_path, pypi_toolkit, capsys) -> None:
    """A setup.py that imports a module the build environment lacks (as torchsparse's did with
    numpy) fails before any TU reaches the launcher: the probe says so, gives the build's error
    once, and points at the recipe's build dependencies, not at the stand-ins."""
    _root(tmp_path, [])
    setup = tmp_path / "src" / "probe_ext" / "setup.py"
    setup.write_text("import farm_absent_build_module\n" + setup.read_text())
    argv = ["build", "probe_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
            "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(pypi_toolkit.cuda_home),
            "--out", str(tmp_path / "upload"), "--probe", "--no-compile-cache"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "No module named 'farm_absent_build_module'" in err
    assert "probe: the build failed, before any CUDA TU reached farm's nvcc launcher: python -m build" in err
    assert err.count("  fix: ") == 1
    assert "a build dependency the recipe's extra_deps lacks" in err
    assert "empty stand-ins" not in err  # the hint of a failure after nvcc


@pytest.mark.parametrize("flag", ["--shard", "--link"])
def test_probe_excludes_shard_and_link(tmp_path, capsys, flag) -> None:
    _root(tmp_path, [])
    extra = [flag, "0/2"] if flag == "--shard" else [flag]
    with pytest.raises(SystemExit) as exc:
        main(["build", "probe_ext", "--root", str(tmp_path), "--probe", *extra])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# Two CMake targets, as a CMake package builds its modules: `_C` takes the cell's list (CUDAARCHS),
# `_ops` its own (CUDA_ARCHITECTURES 90-real: sm_90 alone), which the recipe declares under
# `extensions:` and the lint is told about.
CMAKE_RECIPE = """\
name: cmake_ext
version: '1.0.0'
source:
  path: src/cmake_ext
links_torch: false
arch:
  list: '8.0;9.0'
extensions:
  '*_ops*': '9.0'
lint_ignore:
  - rule: arch-override
    path: CMakeLists.txt
    reason: the _ops target builds sm_90 alone, declared under extensions
build:
  extra_deps: [scikit-build-core, cmake]
"""
CMAKE_LISTS = """\
cmake_minimum_required(VERSION 3.18)
project(${SKBUILD_PROJECT_NAME} LANGUAGES CXX CUDA)
find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
Python_add_library(_C MODULE WITH_SOABI csrc/module.cpp csrc/add.cu csrc/scale.cu)
Python_add_library(_ops MODULE WITH_SOABI csrc/kernels/fill.cu)
set_target_properties(_ops PROPERTIES CUDA_ARCHITECTURES 90-real)
install(TARGETS _C _ops LIBRARY DESTINATION cmake_ext)
"""


def test_a_cmake_probe_names_each_target_and_holds_it_to_its_declared_list(tmp_path, pypi_toolkit) -> None:
    """A CMake build names no TORCH_EXTENSION_NAME: each TU's target is read from its object's
    path (CMakeFiles/<target>.dir/), so the recipe's `extensions: {'*_ops*': ...}` reaches the
    `_ops` target's TUs; told apart by flags alone, `_ops` was an anonymous flag set judged against
    the cell's list, and failed although the recipe declares exactly what it builds."""
    cell = Cell("cmake_ext", "1.0.0", "13.0", "none", "cp311", "linux_x86_64")
    config = make_root(tmp_path, {"cmake_ext": CMAKE_RECIPE}, {"src/cmake_ext": REPO / "tests" / "data" / "cmake_ext"})
    (tmp_path / "src" / "cmake_ext" / "CMakeLists.txt").write_text(CMAKE_LISTS)
    settings = BuildSettings(builder=BuilderKind.NATIVE, out_dir=tmp_path / "upload", work_root=tmp_path / "work",
                             source_cache=tmp_path / "sources", cuda_home=pypi_toolkit.cuda_home,
                             shard_dir=tmp_path / "shards", probe=True, env_root=tmp_path.parent / "envs")
    result = build_cell(config, config.recipe("cmake_ext"), cell, settings)
    probe = result.probe
    assert probe is not None
    units = {u.extension: u for u in probe.units}
    assert sorted(units) == ["_C", "_ops"]
    assert units["_ops"].tu == "csrc/kernels/fill.cu"
    assert units["_ops"].expected_from == "extensions: '*_ops*'"
    assert units["_ops"].found.canonical() == "sm_90"
    assert units["_C"].tu in {"csrc/add.cu", "csrc/scale.cu"}
    assert units["_C"].found.canonical() == units["_C"].expected.canonical() == "sm_80;sm_90"
    assert probe.passed, probe.render()
    assert probe.stand_ins == 1  # _C's other TU
    assert not list(tmp_path.rglob("*.whl"))
