from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="feature_90a",
    ext_modules=[CUDAExtension(name="feature_90a._C", sources=["csrc/gemm_sm90.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
