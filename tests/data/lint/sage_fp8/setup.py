# Like sageattention 2.2.0: one module per arch, the sm89 one FP8 under an arch gate.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="sage_fp8",
    ext_modules=[
        CUDAExtension(
            name="sage_fp8._qattn_sm89",
            sources=["csrc/qattn/pybind_sm89.cpp", "csrc/qattn/qk_int_sv_f8_cuda_sm89.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
