"""The arch-gate lint on small fixture trees: every rule, every non-error case, ignores, cache, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.errors import SourceError
from farm.lint.api import LINT_VERSION, LintFinding, LintReport, LintSeverity, lint_cached, lint_tree
from farm.model.arch import ArchList
from farm.model.config import LintIgnore
from farm.source.fetch import SourceTree

DATA = Path(__file__).parent / "data" / "lint"


def lint(name: str, archs: str, ignores: tuple[LintIgnore, ...] = (), **kw: Any) -> LintReport:
    return lint_tree(DATA / name, ArchList.parse(archs), ignores, **kw)


def by_rule(report: LintReport, rule: str, severity: LintSeverity = LintSeverity.ERROR) -> list[LintFinding]:
    return [f for f in report.findings if f.rule == rule and f.severity is severity]


# ------------------------------------------------------------------------------------------------
# arch gates
# ------------------------------------------------------------------------------------------------
def test_sageattention_like_fp8_gate_with_brkpt_is_a_stub_trap() -> None:
    report = lint("sage_fp8", "8.0;8.6;9.0+PTX")
    assert not report.passed
    gate = next(f for f in by_rule(report, "arch-gate") if f.path.endswith("qk_int_sv_f8_cuda_sm89.cu"))
    assert gate.line == 7
    assert "__CUDA_ARCH__ >= 890" in gate.snippet
    assert gate.needs == ("8.9",)
    assert gate.devices == ("8.9 (RTX 40xx, L4, L40S)",)  # the device that runs the sm_86 stub
    assert "sm_86" in gate.message
    assert "__brkpt()" in gate.message
    assert gate.declared == "sm_80;sm_86;sm_90;compute_90"
    assert "declare 8.9" in gate.fix
    assert "lint_ignore" in gate.fix
    # The gate without an else inside a device function is the same trap (an empty branch).
    helper = next(f for f in by_rule(report, "arch-gate") if f.path.endswith("mma_fp8.cuh"))
    assert "empty branch" in helper.message


def test_sageattention_like_is_clean_once_8_9_is_declared() -> None:
    report = lint("sage_fp8", "8.0;8.6;8.9;9.0+PTX")
    assert report.passed
    assert not report.errors
    # 8.0 and 8.6 run their own images, where the FP8 helper is a stub: true, and only an info
    # (sageattention never launches its sm89 kernels there)
    assert len(report.infos) == 2
    assert all(i.devices == ("8.0 (A100)", "8.6 (RTX 30xx, A10)") and "own images" in i.message for i in report.infos)


def test_gate_with_a_real_fallback_is_info_not_error() -> None:
    report = lint("real_fallback", "7.5+PTX;9.0")
    assert report.passed
    (info,) = report.infos
    assert info.rule == "arch-gate"
    assert info.line == 7
    assert "fallback" in info.message
    assert "8.0 (A100)" in info.devices[0]
    assert "9.0 (H100, H200)" not in info.devices  # 9.0 runs its own sm_90
    assert info.needs[0] == "8.0"


def test_gate_below_every_declared_arch_is_silent() -> None:
    assert not lint("real_fallback", "8.0;9.0").findings


def test_nv_if_target_without_else_is_a_trap_and_with_else_is_info() -> None:
    report = lint("nv_target", "8.0+PTX")
    (error,) = report.errors
    assert error.line == 4
    assert error.snippet.startswith("NV_IF_TARGET(NV_PROVIDES_SM_90")
    assert any(d.startswith("9.0 (H100") for d in error.devices)
    (info,) = report.infos
    assert info.snippet.startswith("NV_IF_ELSE_TARGET")
    assert lint("nv_target", "8.0;9.0+PTX").passed


def test_feature_gate_needs_the_arch_specific_target() -> None:
    report = lint("feature_90a", "9.0;10.0")
    (error,) = report.errors
    assert error.needs == ("9.0a",)
    assert "assert(0)" in error.message
    assert error.devices == ("9.0 (H100, H200)",)
    assert lint("feature_90a", "9.0a").passed


def test_gate_through_a_derived_feature_macro() -> None:
    report = lint("alias_gate", "8.0;8.6;9.0")
    (error,) = report.errors
    assert error.path == "csrc/kernel.cu"
    assert "KERNEL_HAS_FP8_MMA" in error.snippet
    assert error.needs == ("8.9",)
    assert lint("alias_gate", "8.0;8.6;8.9;9.0").passed


def test_declarations_gated_at_namespace_scope_are_not_a_trap() -> None:
    assert not lint("namespace_gate", "7.5+PTX").findings


# ------------------------------------------------------------------------------------------------
# FP8
# ------------------------------------------------------------------------------------------------
def test_fp8_types_outside_a_gate_are_an_info() -> None:
    """__nv_fp8_e4m3 in signatures compiles for every arch (cuda_fp8.h converts in software below 8.9):
    an info for the 8.9 device that runs sm_86, not an error."""
    report = lint("sage_fp8", "8.0;8.6;9.0+PTX")
    fp8 = by_rule(report, "fp8", LintSeverity.INFO)
    assert {f.path for f in fp8} == {"csrc/qattn/qk_int_sv_f8_cuda_sm89.cu", "csrc/qattn/mma_fp8.cuh"}
    assert all(f.needs == ("8.9",) and "software" in f.message for f in fp8)
    # The e4m3 in mma_fp8.cuh's asm sits inside the >= 890 gate: reported once, on the signature line.
    assert next(f for f in fp8 if f.path.endswith(".cuh")).line == 4
    assert not by_rule(report, "fp8")


def test_an_fp8_instruction_outside_a_gate_is_an_error(tmp_path) -> None:
    """The same e4m3 in an asm statement without the gate is an instruction ptxas rejects below sm_89."""
    tree = shutil.copytree(DATA / "sage_fp8", tmp_path / "src")
    (tree / "csrc/qattn/mma_fp8.cuh").write_text(
        "#pragma once\n__device__ void cvt(unsigned short* d, float a, float b) {\n"
        '  asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(*d) : "f"(a), "f"(b));\n}\n')
    report = lint_tree(tree, ArchList.parse("8.0;8.9;9.0"))
    (error,) = by_rule(report, "fp8")
    assert error.path == "csrc/qattn/mma_fp8.cuh"
    assert error.line == 3
    assert "compiled for sm_80" in error.message
    assert "ptxas" in error.message
    assert not by_rule(lint_tree(tree, ArchList.parse("8.9;9.0")), "fp8")


def test_fp8_in_comments_strings_and_if_0_is_not_code() -> None:
    assert not lint("fp8_not_code", "8.0;8.6").findings


# ------------------------------------------------------------------------------------------------
# build files
# ------------------------------------------------------------------------------------------------
def test_pointnet2_like_assignment_of_the_list_is_an_error() -> None:
    report = lint("pointnet2_like", "7.5;8.0;8.6")
    (error,) = report.errors
    assert error.rule == "arch-override"
    assert error.path == "setup.py"
    assert error.line == 12
    assert "TORCH_CUDA_ARCH_LIST" in error.snippet
    assert not by_rule(report, "explicit-target")  # the assigned items are the override, not extra findings


def test_gencode_90a_without_9_0a_declared() -> None:
    report = lint("gencode_90a", "8.0;9.0")
    (target,) = by_rule(report, "explicit-target")
    assert target.needs == ("9.0a",)
    assert "sm_90a" in target.message
    assert target.line == 10
    (override,) = by_rule(report, "arch-override")
    assert "sm_80, sm_90 from the declared list would be missing" in override.message
    assert not by_rule(lint("gencode_90a", "9.0a"), "explicit-target")


def test_cmake_architectures_set_in_the_build() -> None:
    report = lint("cmake_override", "8.0;9.0")
    (override,) = by_rule(report, "arch-override")
    assert override.line == 10
    (default,) = by_rule(report, "arch-override", LintSeverity.INFO)  # guarded by if(NOT DEFINED ...)
    assert default.line == 6
    (target,) = by_rule(report, "explicit-target")
    assert "9.0a" in target.needs


# ------------------------------------------------------------------------------------------------
# what is compiled
# ------------------------------------------------------------------------------------------------
def test_vendored_tests_examples_and_unincluded_headers_are_not_linted() -> None:
    report = lint("vendored_unused", "8.0;8.6")
    assert report.passed
    assert not report.findings
    assert report.scope["compiled"] == 2  # csrc/add.cu and the one library header it includes
    assert report.scope["vendored"] == ["third_party/lib"]


def test_the_same_code_compiled_is_linted(tmp_path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(DATA / "vendored_unused", tree)
    (tree / "csrc" / "add.cu").write_text('#include "unused_fp8.cuh"\n' + (tree / "csrc" / "add.cu").read_text())
    report = lint_tree(tree, ArchList.parse("8.0;8.6"))
    assert {f.path for f in report.errors} == {"csrc/unused_fp8.cuh"}


def test_build_subdir(tmp_path) -> None:
    shutil.copytree(DATA / "sage_fp8", tmp_path / "pkg" / "python")
    report = lint_tree(tmp_path / "pkg", ArchList.parse("8.0;8.6;9.0+PTX"), build_subdir="python")
    assert {f.path.split("/")[0] for f in report.errors} == {"python"}
    with pytest.raises(SourceError, match="build_subdir"):
        lint_tree(tmp_path / "pkg", ArchList.parse("8.0"), build_subdir="nope")


def test_an_empty_tree_never_passes(tmp_path) -> None:
    with pytest.raises(SourceError, match="no files"):
        lint_tree(tmp_path, ArchList.parse("8.0"))


# ------------------------------------------------------------------------------------------------
# lint_ignore
# ------------------------------------------------------------------------------------------------
def test_lint_ignore_silences_visibly_and_stale_entries_are_reported() -> None:
    used = LintIgnore("arch-gate", "csrc/qattn/*", "only dispatched on sm_89+ by the Python side", "packages/s.yml:10")
    fp8 = LintIgnore("fp8", "csrc/qattn/*.cu*", "fp8 types only", "packages/s.yml:13")
    stale = LintIgnore("explicit-target", "setup.py", "was needed for 2.1", "packages/s.yml:16")
    report = lint("sage_fp8", "8.0;8.6;9.0+PTX", (used, fp8, stale))
    assert report.passed
    assert {(f.rule, i.where) for f, i in report.ignored} == {
        ("arch-gate", "packages/s.yml:10"), ("fp8", "packages/s.yml:13")}
    assert report.stale_ignores == (stale,)
    text = report.render()
    assert "ignored by packages/s.yml:10: only dispatched" in text
    assert "stale lint_ignore" in text
    assert "packages/s.yml:16" in text


# ------------------------------------------------------------------------------------------------
# report, cache, command
# ------------------------------------------------------------------------------------------------
def test_report_json_round_trip() -> None:
    report = lint("sage_fp8", "8.0;8.6;9.0+PTX", (LintIgnore("fp8", "*", "r", "p.yml:1"),))
    again = LintReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again == report
    data = report.to_json()
    assert data["passed"] is False
    assert data["lint_version"] == LINT_VERSION
    assert {"rule", "path", "line", "snippet", "needs", "declared", "fix", "devices"} <= set(data["errors"][0])


def test_lint_cached_reuses_the_result_by_identity(tmp_path) -> None:
    tree_dir = tmp_path / "src"
    shutil.copytree(DATA / "sage_fp8", tree_dir)
    tree = SourceTree(tree_dir, "identity-1", {"kind": "path", "path": "src", "tree_sha256": "identity-1"})
    archs = ArchList.parse("8.0;8.6;9.0+PTX")
    first = lint_cached(tree, archs, (), tmp_path / "cache")
    assert not first.passed
    # Same identity: the cached answer, even though the files changed (identity is the contract).
    shutil.rmtree(tree_dir / "csrc")
    assert lint_cached(tree, archs, (), tmp_path / "cache") == first
    # Another arch list or other ignores are another key.
    assert lint_cached(tree, ArchList.parse("8.9"), (), tmp_path / "cache").passed
    # A corrupt entry is recomputed, not trusted.
    for entry in (tmp_path / "cache" / "lint").glob("*.json"):
        entry.write_text("{")
    assert lint_cached(tree, archs, (), tmp_path / "cache").passed  # recomputed on the changed tree


def test_command_on_a_path(capsys) -> None:
    assert main(["lint", str(DATA / "sage_fp8"), "--arch-list", "8.0;8.6;9.0+PTX"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out
    assert "qk_int_sv_f8_cuda_sm89.cu:7" in out
    assert main(["lint", str(DATA / "sage_fp8"), "--arch-list", "8.0;8.6;8.9;9.0+PTX", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True
    assert data["reports"][0]["declared"] == "sm_80;sm_86;sm_89;sm_90;compute_90"


def test_command_on_a_path_needs_an_arch_list(capsys) -> None:
    assert main(["lint", str(DATA / "sage_fp8")]) == 2
    assert "--arch-list" in capsys.readouterr().err


def sage_farm(root: Path, repo_root: Path, ignores: str) -> None:
    """A farm root with one package, the sage_fp8 tree, linted under two lists (8.9 added on 13.0)."""
    shutil.copy(repo_root / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(DATA / "sage_fp8", root / "src" / "sage")
    (root / "packages").mkdir()
    (root / "packages" / "sage.yml").write_text(
        "name: sage\nversion: '1.0'\nsource: {path: src/sage}\nlinks_torch: true\n"
        "arch:\n  list: '8.0;8.6;9.0+PTX'\n  by_cuda: {'13.0': '8.0;8.6;8.9;9.0+PTX'}\n"
        "lint_ignore:\n" + ignores
    )


def test_command_on_a_package_lints_each_resolved_list(tmp_path, repo_root, capsys) -> None:
    sage_farm(tmp_path, repo_root, "  - {rule: fp8, path: 'csrc/qattn/*', reason: 'storage types only'}\n"
                                   "  - {rule: explicit-target, path: 'setup.py', reason: 'stale on purpose'}\n")
    code = main(["lint", "sage", "--root", str(tmp_path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["passed"] is False
    by_list = {r["declared"]: r for r in data["reports"]}
    assert set(by_list) == {"sm_80;sm_86;sm_90;compute_90", "sm_80;sm_86;sm_89;sm_90;compute_90"}
    failing = by_list["sm_80;sm_86;sm_90;compute_90"]
    assert {e["rule"] for e in failing["errors"]} == {"arch-gate"}
    assert {i["finding"]["rule"] for i in failing["ignored"]} == {"fp8"}
    assert [s["where"] for s in failing["stale_ignores"]] == ["packages/sage.yml:10"]
    assert by_list["sm_80;sm_86;sm_89;sm_90;compute_90"]["passed"] is True
    assert (tmp_path / ".cache" / "lint").is_dir()  # results cached under the farm root
    # --arch-list narrows a package to one list.
    assert main(["lint", "sage", "--root", str(tmp_path), "--arch-list", "8.9"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_command_on_an_unknown_package(tmp_path, repo_root, capsys) -> None:
    shutil.copy(repo_root / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    assert main(["lint", "nope", "--root", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err


def test_python_build_files_are_read_as_code_not_prose(tmp_path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    (tmp_path / "setup.py").write_text(
        '"""Builds for sm_90a; pass -gencode yourself if you must."""\n'       # 1 docstring: prose
        "import os, subprocess\n"                                               # 2
        'os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0")\n'                # 3 a default: info
        "def flags(nums):\n"                                                    # 4
        '    return [f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums]\n'  # 5 computed: info
        "if not os.environ.get('CUDA_HOME'):\n"                                 # 6
        '    raise RuntimeError("needs nvcc for sm_90a, set -arch=sm_90a")\n'   # 7 message: prose
        'print("building for compute_100")\n'                                   # 8 message: prose
        'subprocess.run(["make"], env={"TORCH_CUDA_ARCH_LIST": "9.0"})\n'       # 9 an env: override
        'srcs = ["csrc/k.cu"]\n'
    )
    report = lint_tree(tmp_path, ArchList.parse("8.0"))
    got = {(f.rule, f.severity.value, f.line) for f in report.findings}
    assert got == {("arch-override", "info", 3), ("arch-override", "info", 5), ("arch-override", "error", 9)}


def test_a_build_script_that_does_not_parse_is_read_line_by_line(tmp_path) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "setup.py").write_text('print "python 2"\nnvcc = ["-gencode", "arch=compute_90a,code=sm_90a"]\n'
                                       'srcs = ["k.cu"]\n')
    report = lint_tree(tmp_path, ArchList.parse("8.0"))
    assert {(f.rule, f.line) for f in report.errors} == {("arch-override", 2), ("explicit-target", 2)}


def test_cmake_architectures_passed_from_python_and_pyproject(tmp_path) -> None:
    (tmp_path / "CMakeLists.txt").write_text("add_library(k SHARED k.cu)\n")
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "setup.py").write_text(
        'fixed = ["-DCMAKE_CUDA_ARCHITECTURES=80;90"]\n'
        'def args(archs):\n    return [f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]\n'
    )
    (tmp_path / "pyproject.toml").write_text('[tool.scikit-build]\ncmake.define.CMAKE_CUDA_ARCHITECTURES = "80"\n')
    report = lint_tree(tmp_path, ArchList.parse("8.0;9.0"))
    got = {(f.path, f.severity.value, f.line) for f in report.findings if f.rule == "arch-override"}
    assert got == {("setup.py", "error", 1), ("setup.py", "info", 3), ("pyproject.toml", "error", 2)}


def test_host_compiler_flags_and_macos_branches_are_not_nvcc_flags(tmp_path) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "setup.py").write_text(
        "import sys\n"
        'args = {"cxx": ["-O3", "-march=native"], "nvcc": ["-O3"]}\n'
        'if sys.platform == "darwin":\n'
        '    args["nvcc"] += ["-arch", "arm64"]\n'
        'args["cxx"] += ["-arch", "x86_64"]\n'
        'extra_link_args = ["-arch", "x86_64"]\n'
        'args["nvcc"] += ["-arch=sm_90a"]\n'
        'srcs = ["k.cu"]\n'
    )
    report = lint_tree(tmp_path, ArchList.parse("8.0"))
    assert {(f.rule, f.line) for f in report.errors} == {("arch-override", 7), ("explicit-target", 7)}


def test_an_ignore_used_under_one_list_is_not_stale_under_another(tmp_path, repo_root, capsys) -> None:
    sage_farm(tmp_path, repo_root, "  - {rule: '*', path: 'csrc/*', reason: 'the 8.9 stub is unreachable'}\n")
    assert main(["lint", "sage", "--root", str(tmp_path), "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)["reports"]
    assert len(reports) == 2
    assert all(r["ignored"] for r in reports)
    assert [any(i["finding"]["severity"] == "error" for i in r["ignored"]) for r in reports].count(True) == 1
    assert all(r["stale_ignores"] == [] for r in reports)  # used by one list: not stale in the other


# ------------------------------------------------------------------------------------------------
# A NATTEN-like tree: a CMake project run from setup.py, a vendored library shipped as include/ +
# licence, CUTLASS-style feature macros (nested guard idioms, a function-like family macro)
# ------------------------------------------------------------------------------------------------
def test_cmake_project_run_by_setup_py_is_the_build() -> None:
    report = lint("natten_like", "8.0;9.0+PTX;10.0")
    assert report.scope["build_files"] == ["setup.py", "csrc/CMakeLists.txt"]
    assert report.scope["vendored"] == ["third_party/lib"]
    (override,) = by_rule(report, "arch-override")
    assert override.location == "csrc/CMakeLists.txt:6"
    assert "CUDA_ARCHITECTURES" in override.snippet


def test_feature_macros_nested_in_guard_idioms_are_gates() -> None:
    report = lint("natten_like", "8.0;9.0+PTX;10.0")
    gates = {f.line: f for f in by_rule(report, "arch-gate")}
    # The sm_90a, the sm_100a/f and the family-macro kernels; not exact_sm90, not the library's own gate.
    assert set(gates) == {9, 19, 40}
    assert gates[9].needs == ("9.0a",)
    assert gates[9].devices == ("9.0 (H100, H200)",)
    assert gates[19].needs == ("10.0f",)
    assert gates[19].devices == ("10.0 (B200, GB200)",)
    assert gates[40].needs == ("10.0f",)
    assert "__trap()" in gates[40].message
    # exact_sm90 on 11.0/12.0 via compute_90 runs the real body: nothing to fix; on 8.0 and 10.0,
    # their own images print instead of computing: a declared arch with a stub, an info
    (info,) = report.infos
    assert info.line == 30
    assert info.devices == ("8.0 (A100)", "10.0 (B200, GB200)")
    assert "own images" in info.message
    assert not by_rule(report, "fp8")  # c10::ScalarType::Float8_e4m3fn / kFloat8_e5m2: host dtype tags
    fixed = lint("natten_like", "8.0;9.0a;10.0f")
    assert [f.rule for f in fixed.errors] == ["arch-override"]


def test_command_bad_inputs_are_usage_errors(tmp_path, capsys) -> None:
    assert main(["lint", str(tmp_path / "missing"), "--arch-list", "8.0"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["lint", "flash_attn", "--build-subdir", "csrc"]) == 2
    assert "--build-subdir is for a PATH" in capsys.readouterr().err


def test_returning_a_computed_fallback_is_work_and_returning_a_constant_is_a_stub(tmp_path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "setup.py").write_text('srcs = ["csrc/k.cu"]\n')
    body = "#if __CUDA_ARCH__ >= 890\n  return fast(x);\n#else\n  {}\n#endif\n}}\n"
    (tmp_path / "csrc" / "k.cu").write_text(
        "__device__ float fast(float x);\n__device__ float slow(float x);\n"
         "__device__ float f(float x) {\n" + body.format("return slow(x);")  # gate at line 4: a real fallback
        + "__device__ float g(float x) {\n" + body.format("return 0.f;"))  # gate at line 11: a constant
    report = lint_tree(tmp_path, ArchList.parse("8.0;8.6;9.0"))
    assert [(f.line, f.severity) for f in report.findings] == [(11, LintSeverity.ERROR), (4, LintSeverity.INFO)]
    assert "return 0.f" in report.errors[0].message
    assert "return slow(x)" in report.infos[0].message


def test_a_gate_that_a_device_cannot_decide_natively_is_still_judged(tmp_path) -> None:
    # torch-scatter's atomics.cuh: the native side depends on CUDA_VERSION, which the lint cannot know.
    (tmp_path / "csrc").mkdir()
    (tmp_path / "setup.py").write_text('srcs = ["csrc/k.cu"]\n')
    (tmp_path / "csrc" / "k.cu").write_text(
        "__device__ void add(float* a, float v) {\n"
        "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 700 || CUDA_VERSION < 10000)\n"
        "  cas_loop_add(a, v);\n#else\n  atomicAdd(a, v);\n#endif\n}\n")
    report = lint_tree(tmp_path, ArchList.parse("6.0+PTX"))
    (info,) = report.findings
    assert info.severity is LintSeverity.INFO
    assert info.line == 2
    assert "cas_loop_add" in info.message
