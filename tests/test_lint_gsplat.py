"""The lint on a second real package: the gsplat 1.5.3 sdist from PyPI, pinned by sha256 (cached
under the repository's ``.cache/`` like the flash-attn test). Its setup.py globs the kernels under
a directory it assembles with ``os.path.join``: the lint must read them, not pass without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.lint.api import lint_cached
from farm.model.arch import ArchList
from farm.model.config import SdistSource
from farm.source.fetch import SourceTree, fetch

GSPLAT = SdistSource("gsplat", "1.5.3", "343f080c470e891ba3c697c03bdf0952cb982d1d535fdc24adb23c2cb4fba906")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gsplat(repo_root: Path) -> SourceTree:
    return fetch(GSPLAT, repo_root / ".cache", package="gsplat")


def test_gsplat_kernels_are_read_and_lint_clean(gsplat, tmp_path) -> None:
    report = lint_cached(gsplat, ArchList.parse("7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX"), (), tmp_path)
    kernels = sorted(p.relative_to(gsplat.root).as_posix() for p in (gsplat.root / "gsplat/cuda/csrc").glob("*.cu"))
    assert len(kernels) == 20
    assert report.scope["translation_units"] == 29  # the 20 kernels, 8 host .cpp files, ext.cpp
    assert report.scope["vendored"] == ["gsplat/cuda/csrc/third_party/glm"]
    # Its only arch gates are commented out (`// #if __CUDA_ARCH__ >= 700`): nothing to find.
    assert report.passed
    assert not report.findings
