from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="fp8_not_code",
    ext_modules=[CUDAExtension(name="fp8_not_code._C", sources=["csrc/kernel.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
