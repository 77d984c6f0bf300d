"""flash_attn: C++20 where torch's headers need it.

Its setup.py compiles the CUDA build's C++ files with ``-std=c++17`` (``/std:c++17`` under MSVC)
and gives nvcc ``-std=c++17``: torch 2.14's ATen.h refuses both ("C++20 or later compatible
compiler is required to use ATen": flash_api.cpp fails first), and torch 2.13's headers need C++20
under MSVC. All three become ``_FARM_STD`` (``_edit.std_block``: 17 as before, 20 where torch
needs it). The ROCm build's flags are left as they are. Run in the sdist's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: torch's standard"
edit("setup.py", "flash_attn", [
    ('    nvcc_flags = [\n    "-O3",\n    "-std=c++17",\n',
     std_block(17, indent="    ") + f'    nvcc_flags = [\n    "-O3",\n    f"-std=c++{{_FARM_STD}}",  {MARK}\n'),
    ('    compiler_c17_flag=["-O3", "-std=c++17"]\n',
     f'    compiler_c17_flag=["-O3", f"-std=c++{{_FARM_STD}}"]  {MARK}\n'),
    ('        compiler_c17_flag=["-O2", "/std:c++17", "/Zc:__cplusplus"]\n',
     f'        compiler_c17_flag=["-O2", f"/std:c++{{_FARM_STD}}", "/Zc:__cplusplus"]  {MARK}\n'),
], MARK)
