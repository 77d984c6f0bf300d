"""A CUDA extension that builds against another farm wheel: setup.py imports demo_ext (the farm
wheel of the same cell, installed in the build environment from farm's wheelhouse) and compiles
its version into the extension. Without that wheel the build stops at the import.

cuda_build.py links to examples/demo_ext/cuda_build.py; tests copy this folder with links resolved.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import demo_ext  # the build dependency: farm's own wheel, never this source tree
from cuda_build import BuildExtension, CUDAExtension
from setuptools import setup

built_against = demo_ext.__version__.replace(".", "")

setup(
    ext_modules=[
        CUDAExtension(
            "dep_user._C",
            ["csrc/module.cpp", "csrc/twice.cu"],
            nvcc_flags=[f"-DDEMO_EXT_VERSION={built_against}"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
