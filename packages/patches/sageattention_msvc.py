"""SageAttention 2 on Windows: MSVC flags for its C++ files.

Its setup.py gives every C++ file GCC's flags (``-g -O3 -fopenmp -lgomp -std=c++17``): cl ignores
each (warning D9002), so the host code would be built unoptimised and without OpenMP. On Windows
they become ``/O2 /openmp /std:c++NN /DENABLE_BF16`` and nvcc's ``-std=c++17`` becomes
``-std=c++NN``, NN being ``_FARM_STD`` (17; 20 with torch >= 2.13, which compiles extensions as
C++20 and whose headers need it under MSVC; nvcc keeps the last ``-std`` it is given). The block is
inside ``if os.name == "nt"``. Run at the source root, after sageattention.py; idempotent
(win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: MSVC flags"
ANCHOR = "    # Append flags from env if provided\n"
BLOCK = (std_block(17, indent="    ")
         + f"""    if os.name == "nt":  {MARK}, not GCC's (cl ignores those)
        CXX_FLAGS = ["/O2", "/openmp", f"/std:c++{{_FARM_STD}}", "/DENABLE_BF16"]
        NVCC_FLAGS = [f"-std=c++{{_FARM_STD}}" if f == "-std=c++17" else f for f in NVCC_FLAGS]

""")

edit("setup.py", "sageattention", [(ANCHOR, BLOCK + ANCHOR)], MARK)
