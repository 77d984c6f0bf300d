"""The lint on a real package: the flash-attn 2.8.3 sdist from PyPI, pinned by sha256, with the arch
list the public farm declares for it. The download is cached under the repository's ``.cache/``
(the matrix's source cache), so it happens once per checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.lint.api import lint_cached
from farm.model.arch import ArchList
from farm.model.config import LintIgnore, SdistSource
from farm.source.fetch import SourceTree, fetch

FLASH_ATTN = SdistSource("flash-attn", "2.8.3", "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d")
PUBLIC_LIST = "8.0 9.0 10.0 12.0+PTX"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def flash_attn(repo_root: Path) -> SourceTree:
    return fetch(FLASH_ATTN, repo_root / ".cache", package="flash_attn")


def test_the_sdist_is_the_pinned_one(flash_attn) -> None:
    assert flash_attn.identity == FLASH_ATTN.sha256
    assert (flash_attn.root / "setup.py").is_file()
    assert sum(1 for p in flash_attn.root.rglob("*") if p.is_file()) == 6614


def test_flash_attn_fails_for_one_real_reason(flash_attn, tmp_path) -> None:
    report = lint_cached(flash_attn, ArchList.parse(PUBLIC_LIST), (), tmp_path)
    # Precision: ~8,000 raw grep hits, a few hundred compiled files, one finding.
    assert report.scope["files_total"] == 6614
    assert 200 < report.scope["compiled"] < 400
    assert report.scope["vendored"] == ["csrc/cutlass", "csrc/composable_kernel"]
    assert not report.infos
    (error,) = report.errors
    # setup.py passes -gencode itself: torch ignores TORCH_CUDA_ARCH_LIST, and the flags build
    # sm_80;sm_90;sm_100;sm_120 but never compute_120, which the declared list promises.
    assert (error.rule, error.path, error.line) == ("arch-override", "setup.py", 180)
    assert "sm_80;sm_90;sm_100;sm_120" in error.message
    assert "compute_120" in error.message
    # The first-party gates (>= 800, ARCH_SUPPORTS_FLASH) are all at or below the lowest declared arch.
    assert not [f for f in report.findings if f.rule in ("arch-gate", "fp8")]
    (cutlass,) = [lib for lib in report.libraries if lib.path == "csrc/cutlass"]
    assert cutlass.gates > 100
    assert "sm_90a" in cutlass.thresholds


def test_a_list_below_the_gates_finds_the_stub(flash_attn, tmp_path) -> None:
    """Declare 7.0+PTX and every newer GPU JITs compute_70, where flash-attn's kernels are printf stubs."""
    report = lint_cached(flash_attn, ArchList.parse("7.0+PTX"), (), tmp_path)
    stubs = [f for f in report.errors if f.rule == "arch-gate"]
    assert {f.path for f in stubs} >= {"csrc/flash_attn/src/flash_fwd_launch_template.h",
                                       "csrc/flash_attn/src/flash_bwd_launch_template.h"}
    assert any("FLASH_UNSUPPORTED_ARCH" in f.message for f in stubs)
    assert len(report.errors) < 20


def test_a_reviewed_ignore_makes_it_pass(flash_attn, tmp_path) -> None:
    ignore = LintIgnore("arch-override", "setup.py", "FLASH_ATTN_CUDA_ARCHS is set from the cell's list",
                        "packages/flash_attn.yml:20")
    report = lint_cached(flash_attn, ArchList.parse("8.0 9.0 10.0 12.0"), (ignore,), tmp_path)
    assert report.passed
    assert not report.stale_ignores
    assert len(report.ignored) == 1
