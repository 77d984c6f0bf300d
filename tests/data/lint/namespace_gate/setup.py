from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="namespace_gate",
    ext_modules=[CUDAExtension(name="namespace_gate._C", sources=["csrc/kernel.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
