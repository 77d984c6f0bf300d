"""cubvh on Windows: C++20 where torch's headers need it.

Its setup.py pins ``cpp_standard = 17`` and passes it to cl (``/std:c++17``) and to nvcc
(``-std=c++17``, ``-Xcompiler=/std:c++17``); torch 2.13 and later compile extensions as C++20,
which their headers need under MSVC, and nvcc keeps the last ``-std`` it is given, the package's.
The standard becomes ``_FARM_STD``: 17 as before, 20 on Windows with torch >= 2.13. Run at the
checkout's root; idempotent (win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
OLD = "cpp_standard = 17\n"
NEW = std_block(17) + "cpp_standard = _FARM_STD\n"

edit("setup.py", "cubvh", [(OLD, NEW)], MARK)
