from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="vendored_unused",
    ext_modules=[
        CUDAExtension(
            name="vendored_unused._C",
            sources=["csrc/add.cu"],
            include_dirs=["third_party/lib/include"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
