"""pyg-lib with torch 2.4-2.6 on CUDA >= 12.5: give torch's CMake config the NVTX target it asks for.

torch 2.4-2.6's ``Caffe2/public/cuda.cmake`` links its ``torch::nvtoolsext`` to ``CUDA::nvToolsExt``,
the NVTX 2 library CUDA 12.5 and later no longer ship (NVTX 3 is header-only, ``CUDA::nvtx3``), so
``find_package(Torch)`` fails in pyg-lib's CMakeLists.txt ("Failed to find nvToolsExt", or a link
interface naming a missing target). Before that call, when CUDA is on and the toolkit has
``CUDA::nvtx3`` but no ``CUDA::nvToolsExt``, an interface target of that name stands for NVTX 3 and
tells torch's headers to use it (``TORCH_CUDA_USE_NVTX3``). With an older CUDA, or a torch that
no longer asks for the target, the block does nothing. Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

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
