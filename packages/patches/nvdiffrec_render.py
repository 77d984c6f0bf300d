"""Make nvdiffrec's render utilities a package that builds its CUDA kernels ahead of time.

Upstream keeps ``render/`` as a folder of modules (no ``__init__.py``, no setup.py) and compiles
``render/renderutils/c_src`` with torch's JIT on first use, for the GPU of the machine it runs on
(``TORCH_CUDA_ARCH_LIST`` emptied). This patch, run in the checkout's root, makes
``nvdiffrec_render/``: the package ``nvdiffrec_render`` (``render/``'s modules, without the
kernels' tests), a setup.py building ``nvdiffrec_render.renderutils._C`` from the same sources
with the same ``-DNVDR_TORCH``, and ``ops.py`` loading that prebuilt extension first (the JIT path
stays as the fallback it always was). Idempotent.
"""

import shutil
import sys
from pathlib import Path

TARGET = Path("nvdiffrec_render")
PACKAGE = TARGET / "nvdiffrec_render"
OPS_ANCHOR = """    if _cached_plugin is not None:
        return _cached_plugin
"""
OPS_PREBUILT = """
    # farm: the extension built into this wheel, for every GPU of its arch list
    try:
        from . import _C
    except ImportError:
        pass
    else:
        _cached_plugin = _C
        return _cached_plugin
"""
SOURCES = ["mesh.cu", "loss.cu", "bsdf.cu", "normal.cu", "cubemap.cu", "common.cpp", "torch_bindings.cpp"]
SETUP = f'''"""nvdiffrec's render utilities, as packages/patches/nvdiffrec_render.py lays them out."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

SOURCES = {SOURCES!r}

setup(
    name="nvdiffrec_render",
    version="0.0.1",
    packages=["nvdiffrec_render", "nvdiffrec_render.renderutils"],
    ext_modules=[
        CUDAExtension(
            "nvdiffrec_render.renderutils._C",
            [f"nvdiffrec_render/renderutils/c_src/{{name}}" for name in SOURCES],
            extra_compile_args={{"cxx": ["-DNVDR_TORCH"], "nvcc": ["-DNVDR_TORCH"]}},
        )
    ],
    cmdclass={{"build_ext": BuildExtension}},
)
'''

if (TARGET / "setup.py").is_file():
    print("nvdiffrec_render: nvdiffrec_render/ already made")
    sys.exit(0)
c_src = Path("render/renderutils/c_src")
missing = [name for name in SOURCES if not (c_src / name).is_file()]
ops = Path("render/renderutils/ops.py")
if missing or not ops.is_file() or OPS_ANCHOR not in ops.read_text():
    sys.exit(f"nvdiffrec_render: render/renderutils is not as expected (missing: {missing or 'ops.py anchor'}); "
             "review the patch")
shutil.copytree("render", PACKAGE, ignore=shutil.ignore_patterns("tests", "__pycache__"))
(PACKAGE / "__init__.py").write_text('"""nvdiffrec\'s render utilities (render/ of NVlabs/nvdiffrec)."""\n')
ops = PACKAGE / "renderutils" / "ops.py"
ops.write_text(ops.read_text().replace(OPS_ANCHOR, OPS_ANCHOR + OPS_PREBUILT, 1))
(TARGET / "setup.py").write_text(SETUP)
print(f"nvdiffrec_render: made nvdiffrec_render/ ({len(list(PACKAGE.rglob('*.py')))} modules, "
      f"{len(SOURCES)} extension sources)")
