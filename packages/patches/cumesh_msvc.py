"""CuMesh on Windows: C++20 where torch's headers need it.

Its setup.py already has an MSVC branch (``/O2 /EHsc /permissive- /Zc:__cplusplus``,
``-allow-unsupported-compiler``), pinned to C++17 (``/std:c++17``, ``-std=c++17``,
``-Xcompiler=/std:c++17``); torch 2.13 and later compile extensions as C++20, which their headers
need under MSVC, and nvcc keeps the last ``-std`` it is given, the package's. The three flags
become ``_FARM_STD``: 17 as before, 20 with torch >= 2.13. Run at the checkout's root; idempotent
(win_amd64 cells: ``platform_patch_script``).
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
], MARK)
