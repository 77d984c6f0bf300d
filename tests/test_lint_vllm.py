"""The lint on vLLM 0.27.1, the PyPI sdist pinned by sha256 (cached under the repository's
``.cache/`` like the flash-attn test): its CMake project compiles each kernel family for its own
subset of the list, which the lint derives per CUDA line and judges family by family."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.lint.api import lint_cached
from farm.model.arch import ArchList
from farm.model.config import SdistSource
from farm.source.fetch import SourceTree, fetch

VLLM = SdistSource("vllm", "0.27.1", "eec2d54d137ac1e59cb4c39226dfee1943eefc8f4788f5821d7300d6acbdb646")
POLICY = "7.5 8.0 8.6 9.0+PTX 10.0 12.0+PTX"  # what its cells resolve to (the x86_64 policy of 12.9 and 13.0)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm(repo_root: Path) -> SourceTree:
    return fetch(VLLM, repo_root / ".cache", package="vllm")


@pytest.mark.parametrize("cuda", ["12.9", "13.0"])
def test_vllm_lints_clean_family_by_family(vllm, tmp_path, cuda) -> None:
    report = lint_cached(vllm, ArchList.parse(POLICY), (), tmp_path, cuda=cuda)
    assert report.passed, report.render()
    families = {(name, where): targets for name, where, _, targets, _ in report.scope["families"]}
    assert families[("SCALED_MM_ARCHS", "CMakeLists.txt:773")] == "sm_90a"
    blackwell = "sm_100f" if cuda == "13.0" else "sm_100a"  # 12.9 takes the 10.0a;10.1a;10.3a branch
    assert families[("FP4_SM100_ARCHS", "CMakeLists.txt:1015")] == blackwell
    assert families[("CUDA_ARCHS", "CMakeLists.txt:558")] == "sm_75;sm_80;sm_86;sm_90;sm_100;sm_120"  # no PTX
    assert len(families) > 15
    # the Kimi K3 tcgen05 kernel is built only from CUDA 13.0 on, for the 10.x family
    kimi = "csrc/libtorch_stable/kimi_k3/attn_res_kernel.cu"
    assert (kimi in report.scope["not_built"]) == (cuda == "12.9")
    # no CPU-only or ROCm-only source is judged as CUDA
    assert not [f for f in report.findings if "/cpu/" in f.path or "/rocm/" in f.path]
    # Machete and Marlin kernels are written at configure time and globbed: each family keeps its
    # glob, which matches nothing in the sdist (an info), for the assertion to name their TUs by
    globs = {(name, where): (targets, tuple(patterns)) for (name, where, _, targets, _), patterns
             in zip(report.scope["families"], report.scope["family_patterns"], strict=True)}
    assert globs[("MACHETE_ARCHS", "CMakeLists.txt:538")] == (
        "sm_90a", ("csrc/libtorch_stable/quantization/machete/generated/*.cu",))
    marlin = "sm_80;compute_80;sm_120f" if cuda == "13.0" else "sm_80;compute_80;sm_120a"
    assert globs[("MARLIN_ARCHS", "CMakeLists.txt:645")] == (
        marlin, ("csrc/libtorch_stable/quantization/marlin/sm80_kernel_*_float16.cu",))
    generated = {f.location for f in report.infos if f.rule == "generated-sources"}
    assert {"CMakeLists.txt:538", "CMakeLists.txt:645", "CMakeLists.txt:1297"} <= generated


def test_without_families_the_arch_specific_kernels_fail(vllm, tmp_path) -> None:
    """Judged against the whole list (the recipe without kernel_families), the tcgen05 kernel and
    the FP4 helpers would be compiled for sm_75 ... sm_120: the real problem, not noise."""
    report = lint_cached(vllm, ArchList.parse(POLICY), (), tmp_path)
    assert {f.rule for f in report.errors} <= {"arch-specific", "arch-gate"}
    assert "csrc/libtorch_stable/kimi_k3/attn_res_kernel.cu" in {f.path for f in report.errors
                                                                 if f.rule == "arch-specific"}
    assert len(report.errors) < 10
