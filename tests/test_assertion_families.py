"""The assertion per kernel family on constructed binaries: each TU of a family must hold exactly
the family's targets, found through the source names its symbol table keeps."""

from __future__ import annotations

from pathlib import Path

from farm.binary.archrule import Expected, FamilyTargets
from farm.binary.assertion import AssertionReport, Cause, assert_inspection, assert_wheel
from farm.binary.inspection import Reader, inspect_file
from farm.model.arch import ArchList
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.fatbinmaker import shared_object
from tests.support.wheelmaker import make_wheel

EXT = "vllm/_C.abi3.so"
CELL = ArchList.parse("8.0;9.0;10.0+PTX")
SCALED_MM = FamilyTargets("SCALED_MM_ARCHS", ("csrc/quantization/scaled_mm_c3x_sm90.cu",), ArchList.parse("9.0a"))
MARLIN = FamilyTargets("MARLIN_ARCHS", ("csrc/marlin/gptq_marlin.cu", "csrc/marlin/awq_marlin.cu"),
                       ArchList.parse("8.0;9.0"))
FAMILIES = (SCALED_MM, MARLIN)
REST = ["sm_80", "sm_90", "sm_100", "compute_100"]


def _judge(tmp_path: Path, units: list[list[str]], sources: list[str] | None,
           families: tuple[FamilyTargets, ...] = FAMILIES) -> AssertionReport:
    so = shared_object(tmp_path / "x.so", units, sources=sources)
    insp = inspect_file(so, Reader.NATIVE, label=EXT, sources=True)
    return assert_inspection("vllm.whl", (insp,), Expected(CELL, families=families))


def test_families_on_their_own_targets_pass(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST, ["sm_90a"], ["sm_80", "sm_90"], ["sm_80", "sm_90"]],
                    ["torch_bindings", "scaled_mm_c3x_sm90", "gptq_marlin", "awq_marlin"])
    assert report.passed, report.render()
    (ext,) = report.extensions
    # recorded for the whole .so: the cell's list of the other TUs and each family's own targets
    assert ext.found == ext.expected == ArchList.parse("8.0;9.0;9.0a;10.0+PTX")


def test_a_family_with_an_extra_target_fails_naming_family_so_and_tu(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST, ["sm_90a", "sm_100a"], ["sm_80", "sm_90"], ["sm_80", "sm_90"]],
                    ["torch_bindings", "scaled_mm_c3x_sm90", "gptq_marlin", "awq_marlin"])
    assert not report.passed
    (finding,) = report.extensions[0].findings
    assert (finding.code, finding.cause) == ("family-targets", Cause.FAMILY)
    assert [t.name for t in finding.targets] == ["sm_100a"]
    for needle in (EXT, "scaled_mm_c3x_sm90.cu", "SCALED_MM_ARCHS", "extra sm_100a", "missing -"):
        assert needle in finding.message, finding.message
    assert "kernel family built for other targets" in report.render()


def test_a_family_with_a_missing_target_fails(tmp_path: Path) -> None:
    # awq_marlin built with the sm_90 of the rest only: the family's sm_80 is missing
    report = _judge(tmp_path, [REST, ["sm_90a"], ["sm_80", "sm_90"], ["sm_90"]],
                    ["torch_bindings", "scaled_mm_c3x_sm90", "gptq_marlin", "awq_marlin"])
    (finding,) = report.extensions[0].findings
    assert finding.code == "family-targets"
    assert "awq_marlin.cu" in finding.message
    assert "MARLIN_ARCHS" in finding.message
    assert "missing sm_80" in finding.message


def test_a_tu_outside_the_families_is_judged_against_the_cell_list(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST, ["sm_80", "sm_90"], ["sm_90a"]], ["torch_bindings", "cache_kernels",
                                                                        "scaled_mm_c3x_sm90"])
    codes = {f.code for f in report.extensions[0].findings}
    assert codes == {"incomplete-tu"}, report.render()  # cache_kernels lacks 10.0+PTX that its sibling has


def test_a_wrong_family_is_not_hidden_by_a_right_union(tmp_path: Path) -> None:
    # the scaled_mm TU built for the cell's list instead of 9.0a: the file's union looks fine
    report = _judge(tmp_path, [REST, REST], ["torch_bindings", "scaled_mm_c3x_sm90"],
                    families=(SCALED_MM,))
    (finding,) = report.extensions[0].findings
    assert finding.code == "family-targets"
    assert "missing sm_90a" in finding.message


def test_a_family_built_nowhere_fails_at_wheel_level(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST], ["torch_bindings"], families=(SCALED_MM,))
    (finding,) = report.findings
    assert finding.code == "family-absent"
    assert "SCALED_MM_ARCHS" in finding.message
    # a family the cell does not build (no targets) need not be there
    unbuilt = FamilyTargets("FP4_ARCHS", ("csrc/nvfp4.cu",), ArchList.of(()))
    assert _judge(tmp_path, [REST], ["torch_bindings"], families=(unbuilt,)).passed


def test_a_stripped_so_fails_closed(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST, ["sm_90a"]], None)
    codes = {(f.code, f.cause) for f in report.extensions[0].findings}
    assert ("no-symbols", Cause.NO_SYMBOLS) in codes
    assert "stripped" in report.render()


def test_two_families_sharing_a_source_name_fail_closed(tmp_path: Path) -> None:
    other = FamilyTargets("OTHER_ARCHS", ("csrc/other/scaled_mm_c3x_sm90.cu",), ArchList.parse("10.0a"))
    report = _judge(tmp_path, [REST, ["sm_90a"]], ["torch_bindings", "scaled_mm_c3x_sm90"],
                    families=(SCALED_MM, other))
    (finding,) = report.extensions[0].findings
    assert finding.code == "family-ambiguous"
    assert "OTHER_ARCHS" in finding.message


# vLLM's generated kernels: globs of files written at configure time (Machete's folder, Marlin's names)
MACHETE = FamilyTargets("MACHETE_ARCHS (CMakeLists.txt:538)", (), ArchList.parse("9.0a"),
                        ("csrc/quantization/machete/generated/*.cu",))
MARLIN_FP16 = FamilyTargets("MARLIN_ARCHS (CMakeLists.txt:645)", (), ArchList.parse("8.0+PTX"),
                            ("csrc/quantization/marlin/sm80_kernel_*_float16.cu",))


def test_a_tu_named_by_a_glob_is_judged_against_its_familys_targets(tmp_path: Path) -> None:
    names = ["scaled_mm_c3x_sm90", "machete_mm_impl_part1", "sm80_kernel_u4b8_float16"]
    families = (SCALED_MM, MACHETE, MARLIN_FP16)
    right = _judge(tmp_path, [["sm_90a"], ["sm_90a"], ["sm_80", "compute_80"]], names, families)
    assert right.passed, right.render()
    assert set(right.extensions[0].families) == {SCALED_MM.name, MACHETE.name, MARLIN_FP16.name}
    # the Machete TU built for the cell's list; Marlin's, named by both globs, is its own glob's (it
    # spells out part of the name, the folder's names any) and its sm_90 is extra; scaled_mm's own
    # source beats the folder glob
    wrong = _judge(tmp_path, [["sm_90a"], REST, ["sm_80", "compute_80", "sm_90"]], names, families)
    messages = sorted(f.message for f in wrong.extensions[0].findings)
    assert len(messages) == 2, wrong.render()
    machete, marlin = messages
    for needle in ("TU machete_mm_impl_part1.cu", "MACHETE_ARCHS", "csrc/quantization/machete/generated/*.cu",
                   "exactly sm_90a", "missing sm_90a"):
        assert needle in machete, machete
    for needle in ("TU sm80_kernel_u4b8_float16.cu", "MARLIN_ARCHS", "extra sm_90"):
        assert needle in marlin, marlin


def test_globs_naming_one_tu_for_different_targets_fail_closed(tmp_path: Path) -> None:
    """vLLM's Marlin and Marlin MoE generators write files of the same names in two folders; where
    their families' targets differ (bf16 Marlin adds 9.0+PTX), the binary cannot tell them apart."""
    bf16 = FamilyTargets("MARLIN_BF16_ARCHS", (), ArchList.parse("8.0+PTX;9.0+PTX"),
                         ("csrc/quantization/marlin/sm80_kernel_*_bfloat16.cu",))
    moe = FamilyTargets("MARLIN_MOE_ARCHS", (), ArchList.parse("8.0+PTX"), ("csrc/moe/marlin_moe_wna16/sm80_kernel_*.cu",))
    report = _judge(tmp_path, [["sm_90a"], ["sm_80", "compute_80"]], ["scaled_mm_c3x_sm90", "sm80_kernel_bf16_bfloat16"],
                    families=(SCALED_MM, bf16, moe))
    (finding,) = report.extensions[0].findings
    assert finding.code == "family-ambiguous"
    for needle in ("TU sm80_kernel_bf16_bfloat16.cu", "sm80_kernel_*_bfloat16.cu of MARLIN_BF16_ARCHS",
                   "sm80_kernel_*.cu of MARLIN_MOE_ARCHS"):
        assert needle in finding.message, finding.message


def test_a_glob_names_no_tu_of_an_extension_without_a_familys_own_source(tmp_path: Path) -> None:
    """An external project's .so (vLLM's flash-attn) holds none of the families' sources: Machete's
    folder glob would name every TU, so there it names none and the cell's list judges them."""
    ext = inspect_file(shared_object(tmp_path / "fa.so", [REST, REST], sources=["flash_fwd", "flash_bwd"]),
                       Reader.NATIVE, label="vllm/_vllm_fa2_C.abi3.so", sources=True)
    report = assert_inspection("vllm.whl", (ext,), Expected(CELL, families=(MACHETE,)))
    assert report.extensions[0].passed, report.render()
    assert report.extensions[0].families == ()


def test_a_glob_whose_family_left_no_tu_fails_at_wheel_level(tmp_path: Path) -> None:
    report = _judge(tmp_path, [REST, ["sm_90a"]], ["torch_bindings", "scaled_mm_c3x_sm90"],
                    families=(SCALED_MM, MARLIN_FP16))
    (finding,) = report.findings
    assert finding.code == "family-absent"
    assert "csrc/quantization/marlin/sm80_kernel_*_float16.cu" in finding.message


def test_a_source_in_two_families_holds_both_families_targets(tmp_path: Path) -> None:
    """vLLM's nvfp4 sources are in its SM100 and SM120 families: CMake appends both gencode flags."""
    sm100 = FamilyTargets("FP4_SM100_ARCHS", ("csrc/fp4/nvfp4_quant_kernels.cu",), ArchList.parse("10.0f"))
    sm120 = FamilyTargets("FP4_SM120_ARCHS", ("csrc/fp4/nvfp4_quant_kernels.cu",), ArchList.parse("12.0f"))
    report = _judge(tmp_path, [REST, ["sm_100f", "sm_120f"]], ["torch_bindings", "nvfp4_quant_kernels"],
                    families=(sm100, sm120))
    assert report.passed, report.render()
    report = _judge(tmp_path, [REST, ["sm_100f"]], ["torch_bindings", "nvfp4_quant_kernels"],
                    families=(sm100, sm120))
    (finding,) = report.extensions[0].findings
    assert finding.code == "family-targets"
    assert "FP4_SM100_ARCHS + FP4_SM120_ARCHS" in finding.message
    assert "missing sm_120f" in finding.message


def _families(k2: str) -> tuple[FamilyTargets, ...]:
    return (FamilyTargets("BASE_ARCHS", ("csrc/k1.cu",), ArchList.parse(BASE)),
            FamilyTargets("HOPPER_ARCHS", ("csrc/hopper/k2.cu",), ArchList.parse(k2)))


def test_real_nvcc_families_pass_and_a_changed_list_fails(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """k1.cu compiled for 8.0;9.0+PTX and k2.cu for 9.0a alone, linked by g++ into one .so (the
    shape of a vLLM extension); both readers, the symbol table as the linker left it."""
    wheel = make_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"", EXT: cuda_fixtures.path("families")})
    right = assert_wheel(wheel, Expected(ArchList.parse(BASE), families=_families("9.0a")))
    assert right.passed, right.render()
    # without families the same wheel fails: its TUs differ, as one list per extension expects
    assert not assert_wheel(wheel, Expected(ArchList.parse(BASE))).passed

    wrong = assert_wheel(wheel, Expected(ArchList.parse(BASE), families=_families("9.0a;10.0a")))
    assert not wrong.passed
    (finding,) = wrong.extensions[0].findings
    assert finding.code == "family-targets"
    assert finding.cause is Cause.FAMILY
    for needle in (EXT, "TU k2.cu", "HOPPER_ARCHS", "missing sm_100a"):
        assert needle in finding.message, finding.message


def test_real_nvcc_tu_named_by_a_folder_glob_is_judged_against_its_family(cuda_fixtures: CudaFixtures,
                                                                          tmp_path: Path) -> None:
    """k2.cu as a generated file of a Machete-like folder glob (``*.cu``): k1.cu, a source of its
    own family, is not the glob's; k2's TU must hold the glob's family's targets exactly."""
    wheel = make_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"", EXT: cuda_fixtures.path("families")})

    def families(k2: str) -> tuple[FamilyTargets, ...]:
        return (FamilyTargets("BASE_ARCHS", ("csrc/k1.cu",), ArchList.parse(BASE)),
                FamilyTargets("GEN_ARCHS", (), ArchList.parse(k2), ("csrc/generated/*.cu",)))

    right = assert_wheel(wheel, Expected(ArchList.parse(BASE), families=families("9.0a")))
    assert right.passed, right.render()
    assert right.families_record()["GEN_ARCHS"] == {"targets": "sm_90a", "sources": [], "extensions": [EXT],
                                                   "patterns": ["csrc/generated/*.cu"]}
    wrong = assert_wheel(wheel, Expected(ArchList.parse(BASE), families=families("9.0")))
    (finding,) = wrong.extensions[0].findings
    assert finding.code == "family-targets"
    for needle in ("TU k2.cu", "GEN_ARCHS", "csrc/generated/*.cu", "missing sm_90", "extra sm_90a"):
        assert needle in finding.message, finding.message
