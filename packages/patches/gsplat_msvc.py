"""gsplat on Windows: MSVC's optimisation flag, and C++20 where torch's headers need it.

Its setup.py gives every C++ file GCC's ``-O3``, which cl ignores (warning D9002: the host code is
built unoptimised), and nvcc ``-std=c++17`` on every platform; torch 2.13 and later compile
extensions as C++20, which their headers need under MSVC, and nvcc keeps the last ``-std`` it is
given, the package's. On Windows the C++ files get ``/O2`` and nvcc ``-std=c++NN`` with NN
``_FARM_STD`` (17; 20 with torch >= 2.13); elsewhere the flags are upstream's. Run in the sdist's
root; idempotent (win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: MSVC"
edit("setup.py", "gsplat", [
    ('    extra_compile_args = {"cxx": ["-O3"]}\n',
     std_block(17, indent="    ")
     + f'    extra_compile_args = {{"cxx": ["/O2" if os.name == "nt" else "-O3"]}}  {MARK}: /O2, not -O3\n'),
    ('    nvcc_flags += ["-O3", "--use_fast_math", "-std=c++17"]\n',
     f'    nvcc_flags += ["-O3", "--use_fast_math", f"-std=c++{{_FARM_STD}}"]  {MARK}: torch\'s standard\n'),
], MARK)
