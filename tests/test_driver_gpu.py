"""The driver model against a real GPU: each build's kernel reports the ``__CUDA_ARCH__`` it ran
with (or the launch error), and farm.model.driver must have predicted exactly that.

Skipped, with the reason, on machines without an NVIDIA GPU (CI); run it where there is one:
``CUDA_HOME=... pytest tests/test_driver_gpu.py``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from farm.model.arch import ArchList
from farm.model.driver import Device, ImageKind, pick_image

# The rows measured on an H200 and the a/f and PTX-direction rules (docs/background.md, "Which image
# a GPU runs"), as nvcc targets.
CONFIGS = [
    "sm_80", "sm_80;compute_80", "sm_86;sm_89", "sm_86;sm_89;compute_89", "sm_90", "sm_90a",
    "sm_100;compute_100", "sm_80;sm_90", "compute_75", "sm_75;sm_86;compute_86", "sm_90;compute_90",
    "sm_100a;compute_100a", "sm_100f", "sm_120f;compute_120f", "sm_89;compute_89;sm_120;compute_120",
]

PROGRAM = r"""
#include <cstdio>
#include <cuda_runtime.h>
__global__ void which(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}
int main() {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) { printf("nodevice %s\n", cudaGetErrorName(e)); return 0; }
  int* d = nullptr;
  cudaMalloc(&d, sizeof(int));
  cudaMemset(d, 0xff, sizeof(int));
  which<<<1, 1>>>(d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { printf("%d.%d error %s\n", p.major, p.minor, cudaGetErrorName(e)); return 0; }
  int v = 0;
  cudaMemcpy(&v, d, sizeof(int), cudaMemcpyDeviceToHost);
  printf("%d.%d ok %d\n", p.major, p.minor, v);
  return 0;
}
"""


def _gpu_reason() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no NVIDIA GPU here (nvidia-smi not found)"
    probe = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        return f"no NVIDIA GPU here (nvidia-smi -L: {probe.stdout.strip() or probe.stderr.strip()})"
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, str]:
    reason = _gpu_reason()
    if reason:
        pytest.skip(reason)
    nvcc = request.getfixturevalue("nvcc")
    work = tmp_path_factory.mktemp("driver-gpu")
    src = work / "which.cu"
    src.write_text(PROGRAM)
    out = {}
    for i, config in enumerate(CONFIGS):
        exe = work / f"which{i}"
        gencode = [f"-gencode=arch=compute_{t.number}{t.variant.value},code={t.name}" for t in ArchList.parse(config)]
        subprocess.run([str(nvcc), "-o", str(exe), str(src), *gencode],
                       check=True, capture_output=True)
        out[config] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()
    return out


@pytest.mark.parametrize("config", CONFIGS)
def test_driver_model_matches_the_gpu(runs: dict[str, str], config: str) -> None:
    line = runs[config]
    assert not line.startswith("nodevice"), line
    capability, status, value = line.split(" ", 2)
    choice = pick_image(ArchList.parse(config), Device.parse(capability))
    if choice.kind is ImageKind.NONE:
        assert (status, value) == ("error", "cudaErrorNoKernelImageForDevice"), line
    else:
        assert (status, int(value)) == ("ok", choice.cuda_arch), f"{line}; model: {choice.describe()}"


def test_results_cover_every_config(runs: dict[str, str]) -> None:
    assert set(runs) == set(CONFIGS)
