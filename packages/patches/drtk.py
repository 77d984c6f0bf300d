"""DRTK: torch's runtime and RTTI under MSVC, and C++20 where torch's headers need it.

- MSVC: its setup.py gives ``/MT`` (the static C runtime; torch and its extensions use the DLL
  one, ``/MD``, which torch passes too: the later flag would win) and ``/GR-`` (no RTTI; torch's
  and pybind11's headers use ``typeid`` and ``dynamic_cast``). Both are dropped from its win32
  flags; the rest (``/EHsc``, ``NOMINMAX``, ``/O2 /fp:fast /GL``) stays.
- GCC: its Linux C++ flags pin ``-std=c++17``, which torch 2.14's ATen.h refuses: it becomes
  ``_FARM_STD`` (``_edit.std_block``: 17 as before, 20 where torch needs it). nvcc already gets
  ``-std=c++20`` from it.

Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: torch's CRT (/MD) and RTTI"
IMPORT = "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
edit("setup.py", "drtk", [
    (IMPORT, IMPORT + std_block(17)),
    ('        "linux": ["-std=c++17", "-Wall"]\n', '        "linux": [f"-std=c++{_FARM_STD}", "-Wall"]\n'),
    ("""            ["/MT", "/GR-", "/EHsc", '/D "NOMINMAX"']\n""",
     f"""            ["/EHsc", '/D "NOMINMAX"']  {MARK}: no /MT, no /GR-\n"""),
], MARK)
