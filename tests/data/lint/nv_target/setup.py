from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="nv_target",
    ext_modules=[CUDAExtension(name="nv_target._C", sources=["csrc/dispatch.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
