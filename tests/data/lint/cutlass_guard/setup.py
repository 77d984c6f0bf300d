# Like vllm's and torchao's CUTLASS kernels: guarded by CUTLASS's CUTLASS_ARCH_MMA_SM*_ENABLED macros,
# with CUTLASS itself a submodule the source tree does not carry.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="cutlass_guard",
    ext_modules=[CUDAExtension(name="cutlass_guard._C", sources=["csrc/scaled_mm_sm90.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
