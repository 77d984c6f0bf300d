"""Stamped demo_ext wheels for the doctor's tests: examples/demo_ext built by nvcc for a given arch
list and Python, then asserted and stamped by the real postbuild (so the wheel carries
``_build_info.json``, as a farm wheel a user installs does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.postbuildfix import build_stamped

REPO = Path(__file__).resolve().parents[2]


ARCH = "8.0;8.6+PTX"  # SASS for Ampere, PTX the newer GPUs JIT: every kind of verdict across devices


@pytest.fixture(scope="session")
def doctor_wheel(tmp_path_factory: pytest.TempPathFactory, cuda_home: Path) -> Path:
    """demo_ext for sm_80 and sm_86 SASS plus compute_86 PTX, stamped by postbuild."""
    return build_stamped(tmp_path_factory.getbasetemp() / "doctor-demo", cuda_home, ARCH).wheel


if __name__ == "__main__":  # python -m tests.support.doctorfix OUT ARCH [PYTHON]: one wheel, by hand
    sys.path.insert(0, str(REPO))
    wheel = build_stamped(Path(sys.argv[1]), Path(os.environ["CUDA_HOME"]), sys.argv[2],
                          sys.argv[3] if len(sys.argv) > 3 else sys.executable).wheel
    print(wheel)
