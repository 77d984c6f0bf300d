from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="gencode_90a",
    ext_modules=[
        CUDAExtension(
            name="gencode_90a._C",
            sources=["csrc/wgmma_kernel.cu"],
            extra_compile_args={"nvcc": ["-O3", "-gencode", "arch=compute_90a,code=sm_90a"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
