"""A CUDA extension of four .cu translation units (two folders), built like demo_ext, for the
compile-sharding tests: split over compile jobs, each TU's fatbin must still carry the cell's list.

cuda_build.py links to examples/demo_ext/cuda_build.py; tests copy this folder with links resolved.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup

setup(
    ext_modules=[
        CUDAExtension(
            "shard_ext._C",
            ["csrc/module.cpp", "csrc/add.cu", "csrc/scale.cu", "csrc/ops/fill.cu", "csrc/ops/negate.cu"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
