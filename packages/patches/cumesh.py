"""CuMesh: C++20 where torch's headers need it.

Its setup.py pins C++17 on both branches: GCC's (``-std=c++17`` for the C++ files and nvcc) and
MSVC's (``/std:c++17``, ``-std=c++17``, ``-Xcompiler=/std:c++17``; the MSVC flags themselves,
``/permissive- /Zc:__cplusplus -allow-unsupported-compiler``, are upstream's, and the ``#if``
once inside CUDA_CHECK's arguments is outside them at the pin, src/atlas.cu:325). torch 2.14's
ATen.h refuses C++17 on every compiler and torch 2.13's headers need C++20 under MSVC: the five
flags become ``_FARM_STD`` (``_edit.std_block``: 17 as before, 20 where torch needs it). Run at
the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
edit("setup.py", "cumesh", [
    ('IS_WINDOWS = platform.system() == "Windows"\n',
     'IS_WINDOWS = platform.system() == "Windows"\n' + std_block(17)),
    ('        "/std:c++17",\n', f'        f"/std:c++{{_FARM_STD}}",  {MARK}\n'),
    ('        "-std=c++17",\n        "--expt-relaxed-constexpr",\n',
     f'        f"-std=c++{{_FARM_STD}}",  {MARK}\n        "--expt-relaxed-constexpr",\n'),
    ('        "-Xcompiler=/std:c++17",\n', f'        f"-Xcompiler=/std:c++{{_FARM_STD}}",  {MARK}\n'),
    ('        "-std=c++17"\n', f'        f"-std=c++{{_FARM_STD}}"  {MARK}\n', 2),  # GCC's C++ and nvcc lists
], MARK)
