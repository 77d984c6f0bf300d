from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="alias_gate",
    ext_modules=[CUDAExtension(name="alias_gate._C", sources=["csrc/kernel.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
