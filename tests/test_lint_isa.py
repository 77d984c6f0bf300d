"""The arch-specific instruction rule: the table checked against ptxas itself, and the rule on a
tree shaped like sageattention 2.2.0 (its sm90 module includes ``csrc/wgmma.cuh``, whose ``wgmma``
asm has no guard, and setup.py gives every module the same ``-gencode`` flags)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from farm.lint.api import LintReport, LintSeverity, lint_tree
from farm.lint.isa import INSTRUCTIONS, instruction_in_asm
from farm.model.arch import ArchList, Target
from farm.model.config import LintIgnore

DATA = Path(__file__).parent / "data" / "lint"
SAGE_LISTS = "8.0;8.6;8.9;9.0a;12.0"
SM90_ONLY = (("*_qattn_sm90*", ArchList.parse("9.0a")),)

# One instruction of each row, as it would sit in an asm statement.
SAMPLES = {
    "wgmma": "wgmma.fence.sync.aligned;",
    "setmaxnreg": "setmaxnreg.inc.sync.aligned.u32 240;",
    "tcgen05": "tcgen05.fence::before_thread_sync;",
    "mma with block scaling (kind::mxf8f6f4, kind::mxf4, kind::mxf4nvf4)":
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 "
        "{%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f0,%f1,%f2,%f3}, %r6, {0, 0}, %r7, {0, 0};",
    "mma kind::f8f6f4": "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32 "
                        "{%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f0,%f1,%f2,%f3};",
    "cvt to FP4/FP6/UE8M0 pairs (e2m1x2, e2m3x2, e3m2x2, ue8m0x2)": "cvt.rn.satfinite.e2m1x2.f32 %rs1, %f1, %f2;",
    "tensormap.replace": "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;",
}
TARGETS = ("sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110f",
           "sm_120", "sm_120a", "sm_120f", "sm_121a")
PTX = """.version 9.0
.target {target}
.address_size 64
.visible .entry k()
{{
.reg .b8 %rs<2>;
.reg .f32 %f<4>;
.reg .b32 %r<8>;
.reg .b64 %rd<3>;
{instruction}
ret;
}}
"""


def lint(name: str, archs: str, ignores: tuple[LintIgnore, ...] = (), **kw: Any) -> LintReport:
    return lint_tree(DATA / name, ArchList.parse(archs), ignores, **kw)


def test_every_asm_row_has_a_sample_it_recognises() -> None:
    rows = [row for row in INSTRUCTIONS if not row.intrinsic]
    assert {row.name for row in rows} == set(SAMPLES)
    for row in rows:
        assert instruction_in_asm(SAMPLES[row.name]) is row
        assert row.ptx
        assert row.source.startswith(("NVIDIA PTX ISA", "CCCL"))


def test_the_table_is_what_ptxas_assembles(cuda_home: Path, tmp_path: Path) -> None:
    """Each row's targets, against the real ptxas of the CUDA 13.0 toolkit: it assembles the
    sample exactly for the targets the row accepts."""
    ptxas = cuda_home / "bin" / "ptxas"
    wrong = []
    for row in INSTRUCTIONS:
        if row.intrinsic:
            continue
        for target in TARGETS:
            src = tmp_path / f"{target}.ptx"
            src.write_text(PTX.format(target=target, instruction=SAMPLES[row.name]))
            done = subprocess.run([str(ptxas), f"-arch={target}", str(src), "-o", str(tmp_path / "k.cubin")],
                                  capture_output=True, text=True, timeout=120, check=False)
            if (done.returncode == 0) != row.accepted_by(Target.from_name(target)):
                wrong.append((row.name, target, done.returncode, done.stderr.strip()[:200]))
    assert not wrong


def test_sageattention_like_wgmma_compiled_for_every_arch_fails() -> None:
    report = lint("sage_wgmma", SAGE_LISTS)
    (finding,) = [f for f in report.errors if f.rule == "arch-specific"]
    assert (finding.path, finding.line) == ("csrc/wgmma.cuh", 7)
    assert "wgmma" in finding.message
    assert "PTX ISA 8.0" in finding.message
    assert "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu" in finding.message
    assert "sm_80, sm_86, sm_89, sm_120" in finding.message
    assert "sm_90a," not in finding.message
    assert "and 3 more lines" in finding.message
    assert finding.needs == ("9.0a",)


def test_an_fp8_ignore_does_not_hide_it() -> None:
    """The recipe's old ``fp8 csrc/*`` entry was about FP8 conversions under __CUDA_ARCH__ >= 890;
    it silences FP8 findings only, never the arch-specific one in the same directory."""
    ignore = LintIgnore("fp8", "csrc/*", "FP8 conversions are compiled only for __CUDA_ARCH__ >= 890", "here")
    report = lint("sage_wgmma", "8.0;9.0a+PTX", (ignore,))
    assert [f.path for f in report.errors if f.rule == "arch-specific"] == ["csrc/wgmma.cuh"]
    assert all(f.rule == "fp8" for f, _ in report.ignored)


def test_its_own_list_for_the_sm90_module_passes() -> None:
    report = lint("sage_wgmma", SAGE_LISTS, extensions=SM90_ONLY)
    assert not [f for f in report.findings if f.rule == "arch-specific"]
    assert report.scope["extensions"] == [["*_qattn_sm90*", "sm_90a"]]
    # the other modules are still judged against the package's list: their build files' findings stand
    assert {f.rule for f in report.errors} == {"arch-override"}


def test_an_own_list_without_9_0a_still_fails() -> None:
    report = lint("sage_wgmma", SAGE_LISTS, extensions=(("*_qattn_sm90*", ArchList.parse("9.0")),))
    (finding,) = [f for f in report.errors if f.rule == "arch-specific"]
    assert "extension sage_wgmma._qattn_sm90 (*_qattn_sm90*)" in finding.message
    assert "for sm_90: ptxas rejects it" in finding.message


def _tree(tmp_path: Path, header: str) -> Path:
    root = shutil.copytree(DATA / "sage_wgmma", tmp_path / "src")
    (root / "csrc" / "wgmma.cuh").write_text(header)
    return root


@pytest.mark.parametrize("guard", ["defined(__CUDA_ARCH_FEAT_SM90_ALL)", "defined(__CUDA_ARCH_SPECIFIC__)",
                                   "__CUDA_ARCH_SPECIFIC__ == 900", "defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)"])
def test_a_feature_guard_makes_it_safe(tmp_path, guard) -> None:
    header = f"""#pragma once
__device__ void arrive() {{
#if {guard}
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
#endif
}}
"""
    report = lint_tree(_tree(tmp_path, header), ArchList.parse(SAGE_LISTS))
    assert not [f for f in report.findings if f.rule == "arch-specific"]


def test_an_arch_number_guard_is_not_enough(tmp_path) -> None:
    """``__CUDA_ARCH__ >= 900`` is true for sm_120 too (and for plain sm_90): ptxas still rejects it."""
    header = """#pragma once
__device__ void arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
#endif
}
"""
    report = lint_tree(_tree(tmp_path, header), ArchList.parse(SAGE_LISTS))
    (finding,) = [f for f in report.errors if f.rule == "arch-specific"]
    assert finding.line == 4
    assert "sm_120" in finding.message
    assert "sm_80" not in finding.message


def test_the_word_outside_asm_is_not_an_instruction(tmp_path) -> None:
    """False positives: the mnemonic in a comment, a log string or a function name is no PTX."""
    header = """#pragma once
// wgmma.fence.sync.aligned is Hopper's; this file only wraps it on sm_90a (see wgmma_sm90.cuh)
__device__ void wgmma_arrive_note(const char** msg) {
    *msg = "wgmma.fence.sync.aligned";
}
"""
    report = lint_tree(_tree(tmp_path, header), ArchList.parse(SAGE_LISTS))
    assert not [f for f in report.findings if f.rule == "arch-specific"]


def test_a_cccl_wrapper_is_judged_like_the_asm(tmp_path) -> None:
    header = """#pragma once
#include <cuda/ptx>
__device__ void more_registers() {
    cuda::ptx::setmaxnreg_inc(cuda::ptx::n32_t<240>{});
}
"""
    report = lint_tree(_tree(tmp_path, header), ArchList.parse("9.0a;10.0;12.0f"))
    (finding,) = [f for f in report.errors if f.rule == "arch-specific"]
    assert finding.severity is LintSeverity.ERROR
    assert "the package's list for sm_100: ptxas" in finding.message


def test_nvcc_agrees_with_the_verdict(nvcc: Path, tmp_path: Path) -> None:
    """The fixture's sm90 unit, compiled by the real nvcc: sm_90a assembles, sm_80 is rejected by
    ptxas for the reason the lint gives."""
    unit = DATA / "sage_wgmma" / "csrc" / "qattn" / "qk_int_sv_f8_cuda_sm90.cu"
    results = {}
    for target in ("sm_90a", "sm_80"):
        number = target.removeprefix("sm_")
        done = subprocess.run([str(nvcc), "-c", str(unit), "-o", str(tmp_path / f"{target}.o"),
                               f"-gencode=arch=compute_{number},code={target}"],
                              capture_output=True, text=True, timeout=300, check=False)
        results[target] = (done.returncode, done.stderr)
    assert results["sm_90a"][0] == 0, results["sm_90a"][1]
    assert results["sm_80"][0] != 0
    assert "wgmma" in results["sm_80"][1]
    assert "sm_80" in results["sm_80"][1]


def test_an_inline_helper_nobody_calls_is_not_compiled(tmp_path) -> None:
    """False positive avoided: nvcc emits an inline function or a template of a header only where
    a unit uses it (vLLM's nvfp4_utils.cuh FP4 helpers in units that never call them)."""
    header = """#pragma once
__device__ __forceinline__ void arrive_unused() {
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
}
"""
    root = _tree(tmp_path, header)
    unit = root / "csrc" / "qattn" / "qk_int_sv_f8_cuda_sm90.cu"
    unit.write_text('#include "../wgmma.cuh"\n__global__ void k(float* out) { out[0] = 1.f; }\n')
    assert not [f for f in lint_tree(root, ArchList.parse(SAGE_LISTS)).findings if f.rule == "arch-specific"]
    unit.write_text('#include "../wgmma.cuh"\n__global__ void k(float* out) { arrive_unused(); }\n')
    assert [f for f in lint_tree(root, ArchList.parse(SAGE_LISTS)).errors if f.rule == "arch-specific"]


def test_a_helper_reached_only_under_a_constexpr_arch_flag(tmp_path) -> None:
    """nunchaku's idiom: a class constant set under ``#if __CUDA_ARCH__ >= 1200`` and the FP4 path
    called under ``if constexpr (FP4_AVAILABLE)``: no image below sm_120 compiles the helper."""
    header = """#pragma once
__device__ __forceinline__ unsigned to_fp4(float a, float b) {
    unsigned r;
    asm volatile("{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %1, %2; cvt.u32.u8 %0, t; }" : "=r"(r) : "f"(a), "f"(b));
    return r;
}
struct Gemm {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    static constexpr bool FP4_AVAILABLE = true;
#else
    static constexpr bool FP4_AVAILABLE = false;
#endif
    __device__ static void quantize(unsigned* out, float a, float b) {
        if constexpr (FP4_AVAILABLE) {
            out[0] = to_fp4(a, b);
        } else {
            out[0] = 0;
        }
    }
};
"""
    root = _tree(tmp_path, header)
    unit = root / "csrc" / "qattn" / "qk_int_sv_f8_cuda_sm90.cu"
    unit.write_text('#include "../wgmma.cuh"\n__global__ void k(unsigned* o) { Gemm::quantize(o, 1.f, 2.f); }\n')
    assert not [f for f in lint_tree(root, ArchList.parse("8.0;8.9;12.0a")).findings if f.rule == "arch-specific"]
    # called outside the flag, the same helper is compiled for sm_80 and sm_89 too
    unit.write_text('#include "../wgmma.cuh"\n__global__ void k(unsigned* o) { o[0] = to_fp4(1.f, 2.f); }\n')
    (error,) = [f for f in lint_tree(root, ArchList.parse("8.0;8.9;12.0a")).errors if f.rule == "arch-specific"]
    assert "for sm_80, sm_89:" in error.message
