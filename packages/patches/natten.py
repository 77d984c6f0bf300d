"""NATTEN: C++20 where torch's headers need it.

NATTEN builds libnatten with CMake; its csrc/CMakeLists.txt compiles as ``CXX_STD`` (a cache
variable, 17: ``CMAKE_CXX_STANDARD`` for the C++ compiler, ``--std=c++17`` for nvcc), and its
setup.py passes no ``-DCXX_STD``. torch 2.14's ATen.h refuses C++17 on every compiler and torch
2.13's headers need C++20 under MSVC: setup.py passes ``-DCXX_STD=NN``, NN being ``_FARM_STD``
(``_edit.std_block``: 17 as before, 20 where torch needs it). Its MSVC flags (/Zc:lambda,
/Zc:preprocessor, /bigobj) are upstream's. Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
edit("setup.py", "natten", [
    ('IS_WINDOWS = sys.platform == "win32"\n', 'IS_WINDOWS = sys.platform == "win32"\n' + std_block(17)),
    ("            if IS_WINDOWS:\n                python_path = sys.executable\n",
     (f'            cmake_args.append(f"-DCXX_STD={{_FARM_STD}}")  {MARK} (CMakeLists.txt: CXX_STD)\n'
      "            if IS_WINDOWS:\n                python_path = sys.executable\n")),
], MARK)
