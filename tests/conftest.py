"""Shared fixtures. CUDA fixtures are compiled once per session and reused."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline measures the machine's load, not the code: CI shares two
# cores with builds, so a slow example is not a failure.
settings.register_profile("farm", deadline=None)
settings.load_profile("farm")

REPO = Path(__file__).resolve().parent.parent

# the fixtures the test modules share, each defined once: the compiled CUDA fixtures, the PyPI
# toolkit, the stamped demo_ext wheels, the simulated GitHub
pytest_plugins = ("tests.support.cudafix", "tests.support.buildroot", "tests.support.doctorfix", "tests.support.publishfix",
                  "tests.support.ghsim")


@pytest.fixture
def terminal_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler for the test, as in a terminal: a test run started in the
    background by a non-interactive shell inherits SIGINT ignored, and a test's SIGINT would then
    do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session", autouse=True)
def private_key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run's own cache key file: a build the tests start replaces the key its package code
    could read (farm.cacheseal), and that key must be neither the user's nor another run's."""
    previous = os.environ.get("FARM_KEY_FILE")
    os.environ["FARM_KEY_FILE"] = str(tmp_path_factory.mktemp("config") / "cache.key")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("FARM_KEY_FILE", None)
        else:
            os.environ["FARM_KEY_FILE"] = previous


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cuda_home() -> Path:
    """The CUDA toolkit the tests compile with: ``CUDA_HOME``, as the nox session and CI set it
    from ``farm toolkit`` (NVIDIA's PyPI wheels). Never guessed from the machine."""
    value = os.environ.get("CUDA_HOME")
    if not value or not (Path(value) / "bin" / "nvcc").exists():
        pytest.fail(
            "CUDA_HOME is not set to a toolkit with bin/nvcc; run the tests through `nox -s tests` "
            "or `bash .ci/run`, which assemble one with `farm toolkit`"
        )
    return Path(value)


@pytest.fixture(scope="session")
def nvcc(cuda_home: Path) -> Path:
    return cuda_home / "bin" / "nvcc"


# Fixtures that compile with nvcc, assemble a toolkit or build a wheel: a test that uses one
# (directly or through another fixture) is in the slow tier, so `-m "not slow"` stays fast.
SLOW_FIXTURES = frozenset({"cuda_home", "nvcc", "cuda_fixtures", "pypi_toolkit", "demo_batch", "doctor_wheel",
                           "served", "redist_toolkit", "windows_tree",
                           "all_cells"})  # waves over the public farm's ~14,000 cells


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
