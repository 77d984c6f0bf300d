"""The vocabulary of toolkit components: NVIDIA's redistrib manifest keys, and what each provides.

A component is named as in NVIDIA's ``redistrib_X.Y.Z.json`` (``cuda_nvcc``, ``libcublas``, ...),
whatever the toolkit's source: the PyPI wheel of a component is derived from the name
(:data:`PYPI_WHEELS`). The header and library tables let the pre-compile check
(:mod:`farm.toolkit.check`) say which component a missing ``#include`` or ``-l`` needs.
:func:`cuda_line` reads the CUDA line a torch build pins NVIDIA's wheels to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Component:
    """One component as installed: its manifest name, version and the sha256 of its archive or wheel."""

    name: str
    version: str
    sha256: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "version": self.version, "sha256": self.sha256}



# component -> NVIDIA's CUDA 13 PyPI wheel (CUDA 12 wheels add "-cu12"; they hold no nvcc: their
# toolkits come from the redistributable archives, docs/background.md "nvcc").
PYPI_WHEELS: dict[str, str] = {
    "cuda_nvcc": "nvidia-cuda-nvcc",
    "cuda_crt": "nvidia-cuda-crt",
    "libnvvm": "nvidia-nvvm",
    "cuda_cudart": "nvidia-cuda-runtime",
    "cuda_cccl": "nvidia-cuda-cccl",
    "cuda_cuobjdump": "nvidia-cuda-cuobjdump",
    "cuda_nvrtc": "nvidia-cuda-nvrtc",
    "cuda_cupti": "nvidia-cuda-cupti",
    "cuda_nvtx": "nvidia-nvtx",
    "cuda_profiler_api": "nvidia-cuda-profiler-api",
    "libcublas": "nvidia-cublas",
    "libcusparse": "nvidia-cusparse",
    "libcusolver": "nvidia-cusolver",
    "libcurand": "nvidia-curand",
    "libcufft": "nvidia-cufft",
    "libnvjitlink": "nvidia-nvjitlink",
}

# The components whose wheels hold shared libraries a built extension loads at import (a recipe's
# verify.runtime_libs); the others are the compiler's (nvcc, headers, tools).
RUNTIME_LIBRARIES: tuple[str, ...] = ("cuda_cudart", "cuda_nvrtc", "cuda_cupti", "cuda_nvtx", "libcublas",
                                      "libcusparse", "libcusolver", "libcurand", "libcufft", "libnvjitlink")

# Headers a source may include, by the component that ships them. A directory entry ("thrust/")
# matches every header below it. CCCL's live under include/cccl/ in CUDA 13 (nvcc adds that path).
HEADERS: dict[str, tuple[str, ...]] = {
    "cuda_cudart": ("cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h",
                    "cuda_fp8.h", "cooperative_groups.h", "cooperative_groups/",
                    "device_launch_parameters.h", "mma.h", "cuda_pipeline.h", "cuComplex.h"),
    "cuda_cccl": ("thrust/", "cub/", "cuda/", "nv/"),
    "libcublas": ("cublas_v2.h", "cublas.h", "cublasLt.h", "cublas_api.h", "cublasXt.h"),
    "libcusparse": ("cusparse.h", "cusparse_v2.h"),
    "libcusolver": ("cusolverDn.h", "cusolverSp.h", "cusolver_common.h", "cusolverRf.h", "cusolverMg.h"),
    "libcurand": ("curand.h", "curand_kernel.h", "curand_philox4x32_x.h"),
    "libcufft": ("cufft.h", "cufftXt.h"),
    "cuda_nvtx": ("nvtx3/", "nvToolsExt.h"),
    # its own component in NVIDIA's manifests and wheels, not cudart's (whose wheel lacks it)
    "cuda_profiler_api": ("cuda_profiler_api.h", "cudaProfiler.h"),
    "cuda_nvrtc": ("nvrtc.h",),
    "cuda_cupti": ("cupti.h",),
    "libnvjitlink": ("nvJitLink.h",),
}

# What must be in CUDA_HOME once a component is there: the first header it ships (or its tool).
MARKERS: dict[str, str] = {
    "cuda_nvcc": "bin/nvcc",
    "cuda_crt": "include/crt/host_defines.h",
    "libnvvm": "nvvm/bin/cicc",
    "cuda_cuobjdump": "bin/cuobjdump",
    "cuda_cudart": "include/cuda_runtime.h",
    "cuda_cccl": "include/cub/cub.cuh|include/cccl/cub/cub.cuh",
    "libcublas": "include/cublas_v2.h",
    "libcusparse": "include/cusparse.h",
    "libcusolver": "include/cusolverDn.h",
    "libcurand": "include/curand.h",
    "libcufft": "include/cufft.h",
    "cuda_nvtx": "include/nvtx3/nvToolsExt.h",
    "cuda_profiler_api": "include/cuda_profiler_api.h",
    "cuda_nvrtc": "include/nvrtc.h",
    "cuda_cupti": "include/cupti.h",
    "libnvjitlink": "include/nvJitLink.h",
}

def component_of_header(include: str) -> str | None:
    """The component that ships ``#include <include>``, or None for a header farm does not know."""
    return next((component for component, headers in HEADERS.items() for header in headers
                 if include == header or (header.endswith("/") and include.startswith(header))), None)


def pypi_requirement(component: str, version: str, cuda: str) -> str:
    """``nvidia-cublas==13.1.0.3``: the wheel of ``component`` for CUDA line ``cuda``."""
    wheel = PYPI_WHEELS[component]
    if cuda.split(".", maxsplit=1)[0] == "12":
        wheel += "-cu12"
    return f"{wheel}=={version}"


# NVIDIA's meta-package of one CUDA release's wheels (its extras name the components); its version
# is the release. PyPI's torch pins it from 2.11 on (``cuda-toolkit[cublas,cudart,...]==13.0.2``).
TOOLKIT_META = "cuda-toolkit"
_RUNTIME = re.compile(rf"{PYPI_WHEELS['cuda_cudart']}(?:-cu(\d+))?")


def cuda_line(requirements: Iterable[str]) -> str | None:
    """The CUDA line a torch wheel was built for, from its ``Requires-Dist`` lines: the release its
    CUDA runtime is pinned to, through the runtime's wheel (``nvidia-cuda-runtime-cu12==12.8.90``
    -> ``12.8``; the suffix, where there is one, must agree) or the toolkit meta-package
    (``cuda-toolkit[cudart,...]==13.0.2`` -> ``13.0``). None: no pinned CUDA (a CPU build)."""
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        m = _RUNTIME.fullmatch(name)
        if m is None and name != TOOLKIT_META:
            continue
        for spec in req.specifier:
            if spec.operator in ("==", "===", "~=", ">="):
                parts = spec.version.split(".")
                if (len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit()
                        and (m is None or m[1] in (None, parts[0]))):
                    return f"{parts[0]}.{parts[1]}"
    return None
