"""PyTorch3D on Windows: its C++ standard in MSVC's spelling.

Its setup.py gives every C++ file ``-std=c++17``, a GCC spelling cl ignores (warning D9002), and
gives nvcc no ``-std`` on Windows. The C++ files get ``/std:c++NN`` instead, NN being ``_FARM_STD``
(17; 20 with torch >= 2.13, which compiles extensions as C++20 and whose headers need it under
MSVC), so cl and nvcc compile with the same standard; off Windows the flag is as upstream wrote it.
Run at the checkout's root; idempotent (win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
OLD = '    extra_compile_args = {"cxx": ["-std=c++17"]}\n'
CXX = '[f"/std:c++{_FARM_STD}" if os.name == "nt" else "-std=c++17"]'
NEW = std_block(17, indent="    ") + f'    extra_compile_args = {{"cxx": {CXX}}}  {MARK}\n'

edit("setup.py", "pytorch3d", [(OLD, NEW)], MARK)
