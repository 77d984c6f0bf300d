"""DRTK on Windows: compile with the runtime and RTTI that torch's binaries use.

Its setup.py gives MSVC ``/MT`` (the static C runtime; torch and its extensions use the DLL one,
``/MD``, which torch passes too: the later flag would win) and ``/GR-`` (no RTTI; torch's and
pybind11's headers use ``typeid`` and ``dynamic_cast``). Both are dropped from its win32 flags; the
rest (``/EHsc``, ``NOMINMAX``, ``/O2 /fp:fast /GL``) stays. Run at the checkout's root; idempotent
(win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "# farm: torch's CRT (/MD) and RTTI"
OLD = """            ["/MT", "/GR-", "/EHsc", '/D "NOMINMAX"']\n"""
NEW = f"""            ["/EHsc", '/D "NOMINMAX"']  {MARK}: no /MT, no /GR-\n"""

edit("setup.py", "drtk", [(OLD, NEW)], MARK)
