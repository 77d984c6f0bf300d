"""Compile SageAttention 2's Hopper module for sm_90a alone.

Upstream's setup.py appends every ``-gencode`` to one ``NVCC_FLAGS`` that all four extensions
share, so ``sageattention._qattn_sm90`` (``csrc/qattn/qk_int_sv_f8_cuda_sm90.cu``, which includes
``csrc/wgmma.cuh``'s unguarded ``wgmma`` asm) is compiled for sm_80/86/89/120 too, where ptxas
rejects ``wgmma`` ("not supported on .target 'sm_80'"; thu-ml/SageAttention#291). This gives that
extension only ``arch=compute_90a,code=sm_90a``, the list the recipe declares for it; the other
extensions keep the shared flags. Run at the source root; idempotent.
"""

import pathlib
import sys

MARK = "# farm: sm_90a only"
OLD = """                name="sageattention._qattn_sm90",
                sources=[
                    "csrc/qattn/pybind_sm90.cpp",
                    "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu",
                ],
                extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS},
"""
NEW = f"""                name="sageattention._qattn_sm90",
                sources=[
                    "csrc/qattn/pybind_sm90.cpp",
                    "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu",
                ],
                {MARK}: wgmma assembles for no other target
                extra_compile_args={{"cxx": CXX_FLAGS, "nvcc": [
                    f for i, f in enumerate(NVCC_FLAGS)
                    if not (f == "-gencode" and NVCC_FLAGS[i + 1] != "arch=compute_90a,code=sm_90a")
                    and not (i and NVCC_FLAGS[i - 1] == "-gencode" and f != "arch=compute_90a,code=sm_90a")]}},
"""

setup = pathlib.Path("setup.py")
text = setup.read_text()
if MARK in text:
    print("sageattention: setup.py already patched")
elif text.count(OLD) == 1:
    setup.write_text(text.replace(OLD, NEW))
    print("sageattention: _qattn_sm90 is compiled for sm_90a only")
else:  # upstream changed: review before building
    sys.exit("sageattention: setup.py no longer has the _qattn_sm90 extension this patch narrows; review the patch")
