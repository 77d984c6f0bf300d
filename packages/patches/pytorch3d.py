"""PyTorch3D: its C++ standard in MSVC's spelling, and C++20 where torch's headers need it.

Its setup.py gives every C++ file ``-std=c++17`` (a GCC spelling cl ignores, warning D9002) and
nvcc ``-std=c++17`` off Windows; torch 2.14's ATen.h refuses C++17 (torch 2.13's headers too,
under MSVC). The C++ files get ``/std:c++NN`` on Windows and ``-std=c++NN`` elsewhere, nvcc
``-std=c++NN`` off Windows (on Windows torch gives nvcc its own), NN being ``_FARM_STD``
(``_edit.std_block``: 17 as before, 20 where torch needs it). Run at the checkout's root;
idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
OLD = '    extra_compile_args = {"cxx": ["-std=c++17"]}\n'
CXX = '[f"/std:c++{_FARM_STD}" if os.name == "nt" else f"-std=c++{_FARM_STD}"]'
NEW = std_block(17, indent="    ") + f'    extra_compile_args = {{"cxx": {CXX}}}  {MARK}\n'
NVCC = '            nvcc_args.append("-std=c++17")\n'

NVCC_NEW = f'            nvcc_args.append(f"-std=c++{{_FARM_STD}}")  {MARK}\n'

edit("setup.py", "pytorch3d", [(OLD, NEW), (NVCC, NVCC_NEW)], MARK)
