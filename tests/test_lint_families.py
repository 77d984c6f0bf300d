"""Kernel families: a CMake build in vLLM's style (``cuda_archs_loose_intersection`` +
``set_gencode_flags_for_srcs``) read for each cell, and each family judged against its own
targets; CPU-only and ROCm-only sources and ``USE_ROCM`` branches are not judged as CUDA."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from farm.cli import main
from farm.lint.api import LintReport, lint_tree
from farm.lint.families import loose_intersection
from farm.model.arch import ArchList

DATA = Path(__file__).parent / "data" / "lint"
POLICY = "7.5 8.0 8.6 9.0+PTX 10.0 12.0+PTX"  # the public farm's x86_64 list for CUDA 12.9 and 13.0


def lint(archs: str = POLICY, cuda: str | None = "13.0", tree: Path = DATA / "vllm_like") -> LintReport:
    return lint_tree(tree, ArchList.parse(archs), cuda=cuda)


@pytest.mark.parametrize(("src", "tgt", "out"), [
    ("9.0a;", "7.5;8.0;9.0", "9.0a"),  # the arch-specific suffix is the family's
    ("9.0a", "8.0;8.6", ""),  # not asked for: not built
    ("12.0f", "12.1a", "12.1a"),  # an f family takes any target of its major, as written
    ("10.0f;10.7f;11.0f", "7.5;8.0;10.0;12.0", "10.0f"),
    ("8.0+PTX;9.0+PTX", "8.0;8.6;9.0;10.0", "8.0+PTX;9.0+PTX"),  # 8.6 runs 8.0; 10.0 JITs 9.0's PTX
    ("7.5;8.0;8.7;8.9+PTX", "7.5;8.0;8.6;9.0;10.0;12.0", "7.5;8.0;8.9+PTX"),
    ("7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0", "7.5;8.0;8.6;9.0;10.0;12.0", "7.5;8.0;8.6;9.0;10.0;12.0"),
])
def test_loose_intersection_is_vllms(src, tgt, out) -> None:
    assert ";".join(loose_intersection(src.split(";"), tgt.split(";"))) == out


def test_each_family_gets_its_own_targets_and_the_tree_passes() -> None:
    report = lint()
    table = {(name, where): targets for name, where, _, targets, _ in report.scope["families"]}
    assert table == {
        ("CUDA_ARCHS", "CMakeLists.txt:23"): "sm_75;sm_80;sm_86;sm_90;sm_100;sm_120",  # +PTX dropped
        ("SCALED_MM_ARCHS", "CMakeLists.txt:29"): "sm_90a",
        ("ATTN_RES_ARCHS", "CMakeLists.txt:39"): "sm_100f",
        ("HADACORE_ARCHS", "CMakeLists.txt:47"): "sm_80;compute_80;sm_90;compute_90",
    }
    assert report.passed
    assert not report.findings
    assert "kernel families (CUDA 13.0)" in report.render()
    assert "SCALED_MM_ARCHS (CMakeLists.txt:29)" in report.render()


def test_the_cuda_line_decides_the_branches() -> None:
    """On 12.9 the tcgen05 kernel is not built at all (its family exists from CUDA 13.0 on)."""
    report = lint(cuda="12.9")
    assert "ATTN_RES_ARCHS" not in {name for name, *_ in report.scope["families"]}
    assert "csrc/blackwell/attn_res_kernel.cu" in report.scope["not_built"]
    assert report.passed


def test_without_the_families_the_package_list_is_wrong_for_them() -> None:
    """What the families fix: judged against the whole list, wgmma and tcgen05 would be compiled
    for sm_75 ... sm_120, which ptxas rejects."""
    report = lint(cuda=None)
    assert {(f.rule, f.path) for f in report.errors} == {("arch-specific", "csrc/hopper/wgmma.cuh"),
                                                         ("arch-specific", "csrc/blackwell/attn_res_kernel.cu")}


def test_a_family_built_for_the_wrong_arch_fails(tmp_path) -> None:
    tree = shutil.copytree(DATA / "vllm_like", tmp_path / "src")
    cmake = tree / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace('"9.0a;"', '"9.0;"'))  # plain sm_90: no wgmma
    (error,) = lint(tree=tree).errors
    assert (error.rule, error.path) == ("arch-specific", "csrc/hopper/wgmma.cuh")
    assert "family SCALED_MM_ARCHS (CMakeLists.txt:29)" in error.message
    assert "for sm_90:" in error.message


# vLLM's Machete and Marlin kernels: a script writes them at configure time and file(GLOB) collects
# them, so the files are not in the tree the lint reads (Marlin's sm90 file here is, as a generator
# run before the lint would leave it: a file of the tree the glob matches is the family's)
GENERATED = """
cuda_archs_loose_intersection(MACHETE_ARCHS "9.0a" "${CUDA_ARCHS}")
if(MACHETE_ARCHS)
  file(GLOB_RECURSE MACHETE_GEN_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/machete/generated/*.cu")
  set_gencode_flags_for_srcs(
    SRCS "${MACHETE_GEN_SOURCES}"
    CUDA_ARCHS "${MACHETE_ARCHS}")
endif()
cuda_archs_loose_intersection(MARLIN_ARCHS "9.0a" "${CUDA_ARCHS}")
file(GLOB MARLIN_SRC "csrc/marlin/sm90_kernel_*.cu")
set_gencode_flags_for_srcs(SRCS "${MARLIN_SRC}" CUDA_ARCHS "${MARLIN_ARCHS}")
"""


def generated_tree(tmp_path: Path, marlin: str = "9.0a") -> Path:
    tree = shutil.copytree(DATA / "vllm_like", tmp_path / "src")
    cmake = tree / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + GENERATED.replace('MARLIN_ARCHS "9.0a"', f'MARLIN_ARCHS "{marlin}"'))
    (tree / "csrc" / "marlin").mkdir()
    (tree / "csrc" / "marlin" / "sm90_kernel_e4m3.cu").write_text(
        '#include "../hopper/wgmma.cuh"\n__global__ void k() { warpgroup_arrive(); }\n')
    return tree


def test_a_globbed_family_keeps_its_glob_for_the_files_the_build_generates(tmp_path) -> None:
    report = lint(tree=generated_tree(tmp_path))
    rows = {name: (where, targets, count) for name, where, _, targets, count in report.scope["families"]}
    patterns = dict(zip([name for name, *_ in report.scope["families"]], report.scope["family_patterns"],
                        strict=True))
    assert rows["MACHETE_ARCHS"] == ("CMakeLists.txt:60", "sm_90a", 0)
    # GLOB_RECURSE from the source dir: the file name in every folder below
    assert patterns["MACHETE_ARCHS"] == ["csrc/machete/generated/**/*.cu"]
    # the file that exists is the family's
    assert rows["MARLIN_ARCHS"] == ("CMakeLists.txt:66", "sm_90a", 1)
    assert patterns["MARLIN_ARCHS"] == ["csrc/marlin/sm90_kernel_*.cu"]
    (info,) = [f for f in report.findings if f.rule == "generated-sources"]
    assert (info.severity.value, info.location) == ("info", "CMakeLists.txt:60")
    assert "csrc/machete/generated/**/*.cu, which matches no file in the tree" in info.message
    assert "generated at build time" in info.message
    assert report.passed
    assert "[0 sources, glob csrc/machete/generated/**/*.cu]" in report.render()


def test_a_globbed_file_in_the_tree_is_judged_against_its_family(tmp_path) -> None:
    """The sm90 file's wgmma is right for its family's sm_90a and an error for a plain sm_90 one."""
    assert lint(tree=generated_tree(tmp_path / "a")).passed
    (error,) = lint(tree=generated_tree(tmp_path / "b", marlin="9.0")).errors
    assert (error.rule, error.path) == ("arch-specific", "csrc/hopper/wgmma.cuh")
    assert "family MARLIN_ARCHS (CMakeLists.txt:66)" in error.message


def test_a_glob_in_a_branch_not_taken_is_not_built(tmp_path) -> None:
    tree = generated_tree(tmp_path)
    (tree / "csrc" / "machete" / "generated").mkdir(parents=True)
    (tree / "csrc" / "machete" / "generated" / "machete_mm.cu").write_text("__global__ void k() {}\n")
    report = lint("7.5;8.0;8.6", tree=tree)  # no 9.0: no Machete
    assert "MACHETE_ARCHS" not in {name for name, *_ in report.scope["families"]}
    assert "csrc/machete/generated/machete_mm.cu" in report.scope["not_built"]


def test_cpu_and_rocm_sources_and_rocm_branches_are_not_cuda() -> None:
    """csrc/cpu/quant.cpp (host compiler) and csrc/rocm/attention.cu (a HIP-only list) carry arch
    gates and FP8 that would be findings in CUDA code; the USE_ROCM branch of a CUDA kernel traps."""
    report = lint()
    assert not [f for f in report.findings if f.path.startswith(("csrc/cpu/", "csrc/rocm/"))]
    assert not [f for f in report.findings if f.path == "csrc/layernorm_kernels.cu"]


def test_farm_lint_shows_the_family_table(tmp_path, capsys) -> None:
    code = main(["lint", str(DATA / "vllm_like"), "--arch-list", POLICY, "--cuda", "13.0",
                 "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "kernel families (CUDA 13.0)" in out
    assert "ATTN_RES_ARCHS (CMakeLists.txt:39)" in out
    assert "-> sm_100f" in out


def test_a_recipe_with_kernel_families_is_linted_per_cuda_line(tmp_path, repo_root, capsys) -> None:
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    shutil.copytree(DATA / "vllm_like", tmp_path / "src" / "vl")
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "vl.yml").write_text(
        "name: vl\nversion: '1.0'\nsource: {path: src/vl}\nlinks_torch: true\nkernel_families: cmake\n"
        "only:\n  platforms: [linux_x86_64]\n  combinations:\n    - {cuda: '12.9', torch: '2.11'}\n"
        "    - {cuda: '13.0', torch: '2.11'}\n")
    assert main(["lint", "vl", "--root", str(tmp_path), "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)["reports"]
    assert sorted(r["scope"]["cuda"] for r in reports) == ["12.9", "13.0"]
    assert all(r["passed"] and r["scope"]["families"] for r in reports)


def test_an_unknown_kernel_families_value_is_bad_input(tmp_path, repo_root, capsys) -> None:
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "vl.yml").write_text(
        "name: vl\nversion: '1.0'\nsource: {path: src}\nlinks_torch: true\nkernel_families: bazel\n")
    (tmp_path / "src").mkdir()
    assert main(["lint", "vl", "--root", str(tmp_path)]) == 2
    assert "kernel_families 'bazel'" in capsys.readouterr().err


def test_farm_lint_reads_the_source_as_built(tmp_path, repo_root, capsys) -> None:
    """A recipe's patch_script runs on a copy before `farm lint PKG` reads it, as before a build:
    the patch that narrows the sm90 module's flags is what makes the setup.py findings go."""
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    shutil.copytree(DATA / "sage_wgmma", tmp_path / "src" / "sw")
    (tmp_path / "packages" / "patches").mkdir(parents=True)
    (tmp_path / "packages" / "patches" / "sw.py").write_text(
        "import pathlib\np = pathlib.Path('setup.py')\n"
        "p.write_text(p.read_text().replace('NVCC_FLAGS += [\"-gencode\", f\"arch=compute_{num},code=sm_{num}\"]',"
        " 'pass'))\n")
    (tmp_path / "packages" / "sw.yml").write_text(
        "name: sw\nversion: '1.0'\nsource: {path: src/sw}\nlinks_torch: true\narch: {list: '9.0a'}\n"
        "build: {patch_script: packages/patches/sw.py}\n")
    assert main(["lint", "sw", "--root", str(tmp_path), "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["reports"]
    assert report["passed"]
    assert not report["errors"]
    # the fetched tree itself is untouched
    assert "arch=compute_{num}" in (tmp_path / "src" / "sw" / "setup.py").read_text()


DECLARED = """name: vd
version: '1.0'
source: {path: src/vd}
links_torch: true
only:
  platforms: [linux_x86_64]
  combinations:
    - {cuda: '12.9', torch: '2.11'}
    - {cuda: '13.0', torch: '2.11'}
kernel_families:
  hopper_gemm: {sources: ['csrc/hopper/*.cu'], archs: 'HOPPER'}
  blackwell_attention: {sources: ['csrc/blackwell/*.cu'], archs: '10.0f', cuda: '>=13.0'}
  hadamard: {sources: [csrc/hadamard.cu], archs: '8.0+PTX;9.0+PTX'}
lint_ignore:
  - {rule: arch-override, path: CMakeLists.txt, reason: the families above are what it builds}
"""


def declared_farm(root: Path, repo_root: Path, hopper: str) -> None:
    shutil.copy(repo_root / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(DATA / "vllm_like", root / "src" / "vd")
    (root / "packages").mkdir()
    (root / "packages" / "vd.yml").write_text(DECLARED.replace("HOPPER", hopper))


def test_a_recipe_can_declare_its_families(tmp_path, repo_root, capsys) -> None:
    """Named source sets whose targets are the cell's list intersected with the family's arches
    (9.0 asked for builds 9.0a; 10.0f only from CUDA 13.0; +PTX per family)."""
    declared_farm(tmp_path, repo_root, "9.0a")
    assert main(["lint", "vd", "--root", str(tmp_path), "--json"]) == 0
    reports = {r["scope"]["cuda"]: r for r in json.loads(capsys.readouterr().out)["reports"]}
    table = {cuda: {name: targets for name, _, _, targets, _ in r["scope"]["families"]} for cuda, r in reports.items()}
    assert table["13.0"] == {"hopper_gemm": "sm_90a", "blackwell_attention": "sm_100f",
                             "hadamard": "sm_80;compute_80;sm_90;compute_90"}
    assert "blackwell_attention" not in table["12.9"]
    assert reports["12.9"]["scope"]["not_built"] == ["csrc/blackwell/attn_res_kernel.cu"]


def test_a_declared_family_for_the_wrong_arch_fails(tmp_path, repo_root, capsys) -> None:
    declared_farm(tmp_path, repo_root, "9.0")
    assert main(["lint", "vd", "--root", str(tmp_path), "--json"]) == 1
    errors = [e for r in json.loads(capsys.readouterr().out)["reports"] for e in r["errors"]]
    assert {(e["rule"], e["path"]) for e in errors} == {("arch-specific", "csrc/hopper/wgmma.cuh")}
    assert "family hopper_gemm (packages/vd.yml:" in errors[0]["message"]


@pytest.mark.parametrize(("family", "says"), [
    ("{sources: [a.cu], archs: '9.0x'}", "9.0x is not an arch"),
    ("{sources: [], archs: '9.0a'}", "is empty"),
    ("{sources: [a.cu], archs: '9.0a', cuda: '12.8'}", "is not '>=X.Y'"),
    ("{sources: [a.cu], archs: '9.0a', arch: '9.0'}", "unknown key"),
])
def test_a_bad_family_is_bad_input(tmp_path, repo_root, capsys, family, says) -> None:
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "packages" / "vd.yml").write_text(
        f"name: vd\nversion: '1.0'\nsource: {{path: src}}\nlinks_torch: true\nkernel_families:\n  f: {family}\n")
    assert main(["lint", "vd", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "packages/vd.yml:" in err


def test_farm_lint_reads_each_platforms_source_as_built(tmp_path, repo_root, capsys) -> None:
    """A `platform_patch_script` changes only its platform's tree, and `farm lint PKG` lints that
    tree for that platform's cells: here the win_amd64 patch is the one that narrows the flags, so
    the Windows lint passes and the one of the other platforms (the same list) does not."""
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    shutil.copytree(DATA / "sage_wgmma", tmp_path / "src" / "sw")
    (tmp_path / "packages" / "patches").mkdir(parents=True)
    (tmp_path / "packages" / "patches" / "sw_win.py").write_text(
        "import pathlib\np = pathlib.Path('setup.py')\n"
        "p.write_text(p.read_text().replace('NVCC_FLAGS += [\"-gencode\", f\"arch=compute_{num},code=sm_{num}\"]',"
        " 'pass'))\n")
    (tmp_path / "packages" / "sw.yml").write_text(
        "name: sw\nversion: '1.0'\nsource: {path: src/sw}\nlinks_torch: true\narch: {list: '9.0a'}\n"
        "build: {platform_patch_script: {win_amd64: packages/patches/sw_win.py}}\n")
    assert main(["lint", "sw", "--root", str(tmp_path), "--json"]) == 1
    reports = json.loads(capsys.readouterr().out)["reports"]
    assert [r["passed"] for r in reports] == [False, True]  # Linux first (first seen), then win_amd64
    assert len({json.dumps(r["scope"], sort_keys=True) for r in reports}) == 1  # the same list, two trees
