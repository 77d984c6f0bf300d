import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

this_dir = os.path.dirname(os.path.abspath(__file__))
_ext_src_root = os.path.join("pointnet2_ops", "_ext-src")
_ext_sources = glob.glob("src/*.cpp") + glob.glob("src/*.cu")

# Like pointnet2_ops: the list is assigned at import, so the farm's list never reaches torch.
os.environ["TORCH_CUDA_ARCH_LIST"] = "3.7+PTX;5.0;6.0;6.1;6.2;7.0;7.5"

setup(
    name="pointnet2_like",
    packages=find_packages(),
    ext_modules=[
        CUDAExtension(
            name="pointnet2_like._ext",
            sources=_ext_sources,
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "-Xfatbin", "-compress-all"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
