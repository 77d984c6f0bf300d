"""NATTEN on Windows: C++20 where torch's headers need it.

NATTEN builds libnatten with CMake; its csrc/CMakeLists.txt compiles as ``CXX_STD`` (a cache
variable, 17: ``CMAKE_CXX_STANDARD`` for cl, ``--std=c++17`` for nvcc), and its setup.py passes
no ``-DCXX_STD``. torch 2.13 and later compile extensions as C++20, which their headers need
under MSVC: on Windows setup.py passes ``-DCXX_STD=NN``, NN being ``_FARM_STD`` (17; 20 with
torch >= 2.13), beside its other Windows arguments (Ninja, Release). Its MSVC flags (/Zc:lambda,
/Zc:preprocessor, /bigobj) are upstream's already. Run at the checkout's root; idempotent
(win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
edit("setup.py", "natten", [
    ('IS_WINDOWS = sys.platform == "win32"\n', 'IS_WINDOWS = sys.platform == "win32"\n' + std_block(17)),
    ('                cmake_args.append("-DCMAKE_BUILD_TYPE=Release")\n',
     ('                cmake_args.append("-DCMAKE_BUILD_TYPE=Release")\n'
     f'                cmake_args.append(f"-DCXX_STD={{_FARM_STD}}")  {MARK} (CMakeLists.txt: CXX_STD)\n')),
], MARK)
