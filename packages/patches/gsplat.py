"""gsplat: MSVC's optimisation flag, and C++20 where torch's headers need it.

Its setup.py gives every C++ file GCC's ``-O3``, which cl ignores (warning D9002: the host code is
built unoptimised): on Windows they get ``/O2``. It gives nvcc ``-std=c++17`` on every platform,
which torch 2.14's ATen.h refuses (and torch 2.13's headers under MSVC; nvcc keeps the last
``-std`` it is given, the package's): it becomes ``_FARM_STD`` (``_edit.std_block``: 17 as
before, 20 where torch needs it). Its C++ files pass no standard, so torch's applies. Run in the
sdist's root; idempotent.
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
