"""A small torch CUDA extension of farm's own tests: two kernels in two .cu files using ATen's
CUDA headers, bound in one .cpp. Built by `farm build` against a real CUDA build of torch; its
arch list comes from TORCH_CUDA_ARCH_LIST, which farm sets."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="torch_ext",
    version="0.1.0",
    packages=["torch_ext"],
    ext_modules=[
        CUDAExtension(
            "torch_ext._C",
            ["csrc/bindings.cpp", "csrc/scale.cu", "csrc/square_sum.cu"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch>=2.0"],  # upstream-style: farm replaces it with the cell's torch
)
