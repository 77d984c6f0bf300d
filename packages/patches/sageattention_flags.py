"""SageAttention 2: MSVC flags for its C++ files, and C++20 where torch's headers need it.

Its setup.py gives every C++ file GCC's flags (``-g -O3 -fopenmp -lgomp -std=c++17``): cl
ignores each (warning D9002), so the host code would be built unoptimised and without OpenMP; on
Windows they become ``/O2 /openmp /std:c++NN /DENABLE_BF16``. The ``-std=c++17`` of the C++ and
nvcc flags becomes ``-std=c++NN`` elsewhere, NN being ``_FARM_STD`` (``_edit.std_block``: 17 as
before, 20 where torch needs it: torch 2.14's ATen.h refuses C++17, torch 2.13's headers too under
MSVC, and nvcc keeps the last ``-std`` it is given). Run at the source root, after
sageattention.py; idempotent.
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
    CXX_FLAGS = [f"-std=c++{{_FARM_STD}}" if f == "-std=c++17" else f for f in CXX_FLAGS]
    NVCC_FLAGS = [f"-std=c++{{_FARM_STD}}" if f == "-std=c++17" else f for f in NVCC_FLAGS]

""")

edit("setup.py", "sageattention", [(ANCHOR, BLOCK + ANCHOR)], MARK)
