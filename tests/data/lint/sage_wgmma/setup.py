# Like sageattention 2.2.0's setup.py: every -gencode goes into one NVCC_FLAGS that every module
# shares, so the sm90 module (wgmma) is compiled for each arch of TORCH_CUDA_ARCH_LIST.
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

NVCC_FLAGS = ["-O3", "--use_fast_math"]
for capability in os.environ["TORCH_CUDA_ARCH_LIST"].split(";"):
    num = {"8.0": "80", "8.6": "86", "8.9": "89", "9.0": "90a", "12.0": "120"}[capability]
    NVCC_FLAGS += ["-gencode", f"arch=compute_{num},code=sm_{num}"]

setup(
    name="sage_wgmma",
    ext_modules=[
        CUDAExtension(
            name="sage_wgmma._qattn_sm80",
            sources=["csrc/qattn/pybind_sm80.cpp", "csrc/qattn/qk_int_sv_f16_cuda_sm80.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": NVCC_FLAGS},
        ),
        CUDAExtension(
            name="sage_wgmma._qattn_sm90",
            sources=["csrc/qattn/pybind_sm90.cpp", "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": NVCC_FLAGS},
        ),
        CUDAExtension(
            name="sage_wgmma._fused",
            sources=["csrc/fused/pybind.cpp", "csrc/fused/fused.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": NVCC_FLAGS},
        ),
    ],
    cmdclass={"build_ext": BuildExtension},
)
