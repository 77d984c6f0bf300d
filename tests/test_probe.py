"""The environment's part of a provenance: the CI run from the provider's variables, the toolchain's
versions from the real nvcc and installed metadata."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from farm.errors import ToolError
from farm.provenance import probe
from farm.provenance.buildinfo import ABSENT, CompileCacheRecord


def test_run_from_github_actions_variables() -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/farm", "GITHUB_SHA": "f" * 40,
           "GITHUB_RUN_ID": "123", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_SERVER_URL": "https://github.com"}
    run = probe.run_from_env(env).to_dict()
    assert run == {"provider": "github", "repository": "o/farm", "commit": "f" * 40, "run_id": "123",
                   "attempt": "2", "url": "https://github.com/o/farm/actions/runs/123/attempts/2"}


def test_run_outside_ci_is_local_and_unknown_ci_is_not_called_local() -> None:
    assert probe.run_from_env({}).to_dict() == {"provider": "local", "repository": None, "commit": None,
                                                    "run_id": None, "attempt": None}
    assert probe.run_from_env({"CI": "true"}).provider == "ci"
    assert probe.run_from_env({"GITLAB_CI": "true", "CI_PIPELINE_ID": "9"}).run_id == "9"


def test_toolchain_asks_the_real_nvcc(cuda_home: Path, nvcc: Path) -> None:
    reported = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    info = probe.toolchain(cuda_home=cuda_home, builder="native")
    assert info.nvcc
    assert f"V{info.nvcc}" in reported
    assert info.python == platform.python_version()
    assert info.builder == "native"
    assert info.cibuildwheel is None


def test_toolchain_reports_cibuildwheel_only_for_that_builder() -> None:
    assert probe.toolchain(cuda_home=None, builder="cibuildwheel").cibuildwheel == version("cibuildwheel")


def test_missing_nvcc_is_an_environment_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no nvcc"):
        probe.nvcc_version(tmp_path)


def test_compile_cache_counts_are_recorded_when_given_and_absent_otherwise() -> None:
    assert probe.toolchain(cuda_home=None, builder="native").compile_cache is ABSENT
    counts = {"tool": "ccache", "compiles": 12, "hits": 9, "misses": 3}
    chain = probe.toolchain(cuda_home=None, builder="native", compile_cache=counts)
    assert chain.compile_cache == CompileCacheRecord("ccache", 12, 9, 3)
    assert chain.to_dict()["compile_cache"] == counts
    assert probe.toolchain(cuda_home=None, builder="native", compile_cache=None).to_dict()["compile_cache"] is None
