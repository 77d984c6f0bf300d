"""A package shaped like pointnet2_ops_lib/setup.py: it overwrites the arch list at import.

pointnet2_ops assigns TORCH_CUDA_ARCH_LIST = "3.7+PTX;5.0;6.0;6.1;6.2;7.0;7.5" and passes
-Xfatbin -compress-all. CUDA 13's nvcc cannot build 3.7-7.0, so this fixture keeps the mechanism
with arches CUDA 13 can build: whatever list the farm exports, the wheel holds sm_75, sm_80 and
compute_80.

cuda_build.py links to examples/demo_ext/cuda_build.py (one build helper, two packages); tests copy
this folder with links resolved before building it.
"""

import os
import sys

os.environ["TORCH_CUDA_ARCH_LIST"] = "7.5;8.0+PTX"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup

setup(
    ext_modules=[
        CUDAExtension(
            "pointnet2_like._ext",
            ["csrc/module.cpp", "csrc/ball_query.cu"],
            nvcc_flags=["-O3", "-Xfatbin", "-compress-all"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
