"""pyg-lib: the NVTX target torch 2.4-2.6's CMake config asks for, and C++20 where torch needs it.

NVTX:

torch 2.4-2.6's ``Caffe2/public/cuda.cmake`` links its ``torch::nvtoolsext`` to ``CUDA::nvToolsExt``,
the NVTX 2 library CUDA 12.5 and later no longer ship (NVTX 3 is header-only, ``CUDA::nvtx3``), so
``find_package(Torch)`` fails in pyg-lib's CMakeLists.txt ("Failed to find nvToolsExt", or a link
interface naming a missing target). Before that call, when CUDA is on and the toolkit has
``CUDA::nvtx3`` but no ``CUDA::nvToolsExt``, an interface target of that name stands for NVTX 3 and
tells torch's headers to use it (``TORCH_CUDA_USE_NVTX3``). With an older CUDA, or a torch that
no longer asks for the target, the block does nothing.

The C++ standard: its CMakeLists.txt sets ``CMAKE_CXX_STANDARD 17`` (and torch's CUDA config gives
CUDA the same), which torch 2.14's ATen.h refuses (torch 2.13's headers too, under MSVC); torch's
CMake config sets C++20 only on its own imported target, which does not reach pyg-lib's. The
standard becomes ``FARM_CXX_STANDARD``, which setup.py passes from ``_FARM_STD``
(``_edit.std_block``: 17 as before, 20 where torch needs it); a CMake run without it keeps 17.

Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: CUDA::nvToolsExt"
ANCHOR = "find_package(Torch REQUIRED)\n"
BLOCK = f"""{MARK} for torch 2.4-2.6's CMake config on CUDA >= 12.5 (NVTX 3 only)
if(WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::nvToolsExt AND TARGET CUDA::nvtx3)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_compile_definitions(CUDA::nvToolsExt INTERFACE TORCH_CUDA_USE_NVTX3)
    target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
  endif()
endif()
"""

edit("CMakeLists.txt", "pyg_lib", [(ANCHOR, BLOCK + ANCHOR)], MARK)

STD_MARK = "# farm: the C++ standard"
edit("CMakeLists.txt", "pyg_lib", [("set(CMAKE_CXX_STANDARD 17)\n", f"""{STD_MARK}: setup.py passes FARM_CXX_STANDARD
if(NOT DEFINED FARM_CXX_STANDARD)
  set(FARM_CXX_STANDARD 17)
endif()
set(CMAKE_CXX_STANDARD ${{FARM_CXX_STANDARD}})
""")], STD_MARK)
PREFIX = "            f'-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}',\n"
edit("setup.py", "pyg_lib", [
    ("        cmake_args = [\n            '-DBUILD_TEST=OFF',\n",
     std_block(17, indent="        ") + "        cmake_args = [\n            '-DBUILD_TEST=OFF',\n"),
    (PREFIX, PREFIX + f"            f'-DFARM_CXX_STANDARD={{_FARM_STD}}',  {STD_MARK}\n"),
], STD_MARK)
