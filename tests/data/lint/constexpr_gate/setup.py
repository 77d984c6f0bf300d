# Like nunchaku 1.2.1: kernels gated with `if constexpr` on __CUDA_ARCH__, not with #if.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="constexpr_gate",
    ext_modules=[CUDAExtension(name="constexpr_gate._C", sources=["csrc/gemm.cu", "csrc/dispatch.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
