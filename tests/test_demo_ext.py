"""examples/demo_ext/cuda_build.py reads TORCH_CUDA_ARCH_LIST the way torch does (docs/background.md,
"torch's TORCH_CUDA_ARCH_LIST")."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tests.support.buildroot import REPO

_spec = importlib.util.spec_from_file_location("demo_cuda_build", REPO / "examples/demo_ext/cuda_build.py")
assert _spec is not None
assert _spec.loader is not None
cuda_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda_build)


def flags(value: str, user: tuple[str, ...] = ()) -> list[str]:
    flags: list[str] = cuda_build.arch_flags(list(user), {"TORCH_CUDA_ARCH_LIST": value})
    return flags


def test_semicolons_spaces_and_ptx() -> None:
    expected = sorted({"-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                       "-gencode=arch=compute_90,code=compute_90"})
    assert flags("8.0;9.0+PTX") == expected
    assert flags("8.0 9.0+PTX") == expected


def test_named_arches_and_arch_specific() -> None:
    assert flags("Ampere") == sorted({"-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_86,code=sm_86",
                                      "-gencode=arch=compute_86,code=compute_86"})
    assert flags("9.0a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert flags("12.0") == ["-gencode=arch=compute_120,code=sm_120"]


def test_a_user_flag_containing_arch_silences_the_variable() -> None:
    assert flags("8.0", user=("-Xcompiler", "-march=native")) == []


@pytest.mark.parametrize("value", ["10.0f", "8.0;;9.0", "sm_80", "8.8"])
def test_values_torch_rejects(value) -> None:
    with pytest.raises(cuda_build.ArchListError, match="Unknown CUDA arch"):
        flags(value)


@pytest.mark.parametrize("value", [None, "", "native"])
def test_unset_is_an_error_on_a_build_machine(value) -> None:
    env = {} if value is None else {"TORCH_CUDA_ARCH_LIST": value}
    with pytest.raises(cuda_build.ArchListError, match="build machine has none"):
        cuda_build.arch_flags([], env)


def test_setup_py_without_an_arch_list_fails_clearly(tmp_path, cuda_home) -> None:
    shutil.copytree(REPO / "examples/demo_ext", tmp_path / "demo", ignore=shutil.ignore_patterns("build"))
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(cuda_home)}
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext"], cwd=tmp_path / "demo", env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "TORCH_CUDA_ARCH_LIST is unset" in proc.stderr
