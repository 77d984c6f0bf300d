"""torch_scatter, torch_cluster, torch_spline_conv: build with ninja, as torch_sparse does.

Their setup.py asks torch's BuildExtension for ``use_ninja=False``, and torch's setuptools path
then runs ``$CUDA_HOME/bin/nvcc`` itself: farm's compiler cache, its probe and compile sharding,
which reach nvcc through ``$PYTORCH_NVCC`` (the path torch's ninja build takes), never see a CUDA
translation unit, and every rebuild recompiles every one (torch_scatter 2.1.2, cu130 / torch 2.11:
0 of 3 nvcc steps cached). torch_sparse, which builds the same `_NAME_cpu` / `_NAME_cuda` pairs from
the same files, has built with ninja since upstream's 2023 fix; the objects are compiled from the
same sources with the same flags. Run at the source's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "# farm: ninja"
edit("setup.py", "pyg_ninja", [(
    "BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)",
    f"BuildExtension.with_options(no_python_abi_suffix=True)  {MARK} (torch's PYTORCH_NVCC path)",
)], MARK)
