"""FlexGEMM: C++20 where torch's headers need it.

Its setup.py pins C++17 on both branches, MSVC's (``/std:c++17``, ``-std=c++17``,
``-Xcompiler=/std:c++17``) and GCC's (``-std=c++17`` for the C++ files and nvcc), so torch's own
standard never applies: torch 2.14's ATen.h refuses C++17 on every compiler, and torch 2.13's
headers need C++20 under MSVC (nvcc keeps the last ``-std`` it is given). Each becomes
``_FARM_STD`` (``_edit.std_block``: 17 as before, 20 where torch needs it); the rest of its flags
are upstream's. Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
BRANCH = 'if platform.system() == "Windows":\n    extra_compile_args = {\n'
LINES = [
    '        "cxx": ["/O2", "/std:c++17", "/EHsc", "/openmp", "/permissive-", "/Zc:__cplusplus"],\n',
    ('        "nvcc": ["-O3", "-std=c++17", "-Xcompiler=/std:c++17", "-Xcompiler=/EHsc", "-Xcompiler=/permissive-", '
     '"-Xcompiler=/Zc:__cplusplus"] + cc_flag,\n'),
    '        "cxx": ["-O3", "-std=c++17", "-fopenmp", f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}"],\n',
    '        "nvcc": ["-O3", "-std=c++17"] + cc_flag,\n',
]


def raised(line: str) -> str:
    """The line with each C++17 flag spelled from _FARM_STD, and the marker."""
    for flag in ("/std:c++17", "-std=c++17", "-Xcompiler=/std:c++17"):
        line = line.replace(f'"{flag}"', f'f"{flag[:-2]}{{_FARM_STD}}"')
    return line.rstrip("\n") + f"  {MARK}\n"


edit("setup.py", "flexgemm", [(BRANCH, std_block(17) + BRANCH), *((line, raised(line)) for line in LINES)], MARK)
