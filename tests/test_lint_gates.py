"""Arch gates the preprocessor does not show: ``if constexpr`` on ``__CUDA_ARCH__`` (as nunchaku
writes its kernels), libcu++'s ``NV_IF_ELSE_TARGET``/``NV_DISPATCH_TARGET``, and CUTLASS's
``CUTLASS_ARCH_MMA_SM*_ENABLED`` guards when CUTLASS is a submodule the tree lacks. They are judged
with the same driver model as ``#if``; and a declared arch whose own image is a stub is reported."""

from __future__ import annotations

from pathlib import Path

from farm.lint.api import LintFinding, LintReport, LintSeverity, lint_tree
from farm.model.arch import ArchList

DATA = Path(__file__).parent / "data" / "lint"


def lint(name: str, archs: str) -> LintReport:
    return lint_tree(DATA / name, ArchList.parse(archs))


def at(report: LintReport, path: str, line: int) -> LintFinding:
    (finding,) = [f for f in report.findings if (f.path, f.line) == (path, line)]
    return finding


def test_if_constexpr_below_the_gate_is_the_same_trap_as_if() -> None:
    """7.5+PTX: every newer device JIT-compiles compute_75, where ``if constexpr (__CUDA_ARCH__ >=
    800)`` takes the else branch, a call of nunchaku's trap_unsupported_arch()."""
    report = lint("constexpr_gate", "7.5+PTX")
    gate = at(report, "csrc/gemm.cu", 6)
    assert gate.severity is LintSeverity.ERROR
    assert gate.rule == "arch-gate"
    assert "trap_unsupported_arch()" in gate.message
    assert "8.0 (A100)" in gate.devices
    assert gate.needs[0] == "8.0"
    # the gate without an else (quantize, >= 750) is met by compute_75 itself: nothing
    assert not [f for f in report.findings if (f.path, f.line) == ("csrc/gemm.cu", 17)]


def test_if_constexpr_met_by_every_image_is_silent() -> None:
    report = lint("constexpr_gate", "8.0;8.9;9.0")
    assert not [f for f in report.findings if f.path == "csrc/gemm.cu"]


def test_nv_dispatch_target_is_judged_per_image() -> None:
    report = lint("constexpr_gate", "8.0;8.6")
    dispatch = at(report, "csrc/dispatch.cu", 9)
    # 8.9 runs sm_86, where NV_DISPATCH_TARGET has no branch at all: an empty kernel
    assert dispatch.severity is LintSeverity.ERROR
    assert dispatch.devices == ("8.9 (RTX 40xx, L4, L40S)",)
    assert dispatch.needs == ("8.9",)
    # NV_IF_ELSE_TARGET with a real fallback never fails (here no device is above 9.0 with an image)
    assert not [f for f in report.errors if f.line == 5]


def test_a_stub_on_a_declared_arch_own_image_is_reported() -> None:
    """8.0 is declared and runs sm_80, where NV_DISPATCH_TARGET's NV_IS_EXACTLY_SM_80 branch traps
    (and 7.5's sm_75 has no branch at all); 7.5 runs sm_75, where gemm_w4a4 is
    trap_unsupported_arch(): infos, the package's dispatch must keep those kernels off those devices."""
    report = lint("constexpr_gate", "7.5;8.0;8.9;9.0")
    dispatch = at(report, "csrc/dispatch.cu", 9)
    assert dispatch.severity is LintSeverity.INFO
    assert dispatch.devices == ("7.5 (T4, RTX 20xx)", "8.0 (A100)")
    assert "own images (sm_75, sm_80)" in dispatch.message
    gemm = at(report, "csrc/gemm.cu", 6)
    assert gemm.severity is LintSeverity.INFO
    assert gemm.devices == ("7.5 (T4, RTX 20xx)",)
    assert report.passed


def test_cutlass_guards_without_cutlass_in_the_tree() -> None:
    """CUTLASS_ARCH_MMA_SM90A_ENABLED is the sm_90a feature macro: a 9.0 device given plain sm_90
    runs CUTE_INVALID_CONTROL_PATH; SM80_ENABLED is __CUDA_ARCH__ >= 800."""
    report = lint("cutlass_guard", "8.0;9.0")
    gate = at(report, "csrc/scaled_mm_sm90.cu", 6)
    assert gate.severity is LintSeverity.ERROR
    assert gate.needs == ("9.0a",)
    assert gate.devices == ("9.0 (H100, H200)",)
    assert not [f for f in report.findings if f.line == 15]  # met by every declared image
    assert lint("cutlass_guard", "8.0;9.0a").passed


def test_cutlass_sm80_guard_below_the_list() -> None:
    report = lint("cutlass_guard", "7.5+PTX")
    gate = at(report, "csrc/scaled_mm_sm90.cu", 15)
    assert gate.severity is LintSeverity.ERROR
    assert "empty branch" in gate.message
