"""demo_ext: a small CUDA extension built with setuptools and nvcc, without torch."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup

# Extra nvcc flags from the builder (e.g. "-lineinfo"); like torch's extra_compile_args["nvcc"], a
# flag containing "arch" means "ignore TORCH_CUDA_ARCH_LIST".
user_nvcc_flags = os.environ.get("DEMO_EXT_NVCC_FLAGS", "").split()

setup(
    ext_modules=[
        CUDAExtension(
            "demo_ext._C",
            ["csrc/module.cpp", "csrc/sum_squares.cu", "csrc/run.cu"],
            include_dirs=["csrc"],
            nvcc_flags=user_nvcc_flags,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
