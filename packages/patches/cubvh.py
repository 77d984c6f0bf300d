"""cubvh: C++20 where torch's headers need it.

Its setup.py pins ``cpp_standard = 17`` and passes it to the C++ compiler (``-std=c++17``, MSVC's
``/std:c++17``) and nvcc (``-std=c++17``, ``-Xcompiler=/std:c++17``), so torch's own choice never
applies; torch 2.14's ATen.h refuses C++17 on every compiler and torch 2.13's headers need C++20
under MSVC (nvcc keeps the last ``-std`` it is given, the package's). The standard becomes
``_FARM_STD`` (``_edit.std_block``): 17 as before, 20 where torch needs it. Its MSVC branch is
upstream's. Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: the C++ standard"
OLD = "cpp_standard = 17\n"
NEW = std_block(17) + "cpp_standard = _FARM_STD\n"

edit("setup.py", "cubvh", [(OLD, NEW)], MARK)
