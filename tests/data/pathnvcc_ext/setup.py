"""A CUDA extension whose build runs `nvcc` as found on PATH, as tools with their own compile
driver do (spconv's ccimport): compile sharding reaches it through farm's PATH shim, not through
$PYTORCH_NVCC or CMake's launcher.

cuda_build.py links to examples/demo_ext/cuda_build.py; tests copy this folder with links resolved.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup

# cuda_build runs $PYTORCH_NVCC when set: here, plain `nvcc`, looked up on PATH by the OS
os.environ["PYTORCH_NVCC"] = "nvcc"

setup(
    ext_modules=[CUDAExtension("pathnvcc_ext._C", ["csrc/module.cpp", "csrc/add.cu", "csrc/ops/scale.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
